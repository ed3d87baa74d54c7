"""Beat's scheduler (portal.beat) while the broker cannot be reached: one warning for the
outage and one line when the broker answers again, never a traceback per task; no try
while the outage is fresh; any other error still logged with its traceback."""

import logging

import pytest
from celery import beat
from celery.utils.imports import symbol_by_name

from portal.beat import Scheduler, outage
from portal.celery import app
from tests.fixtures_outages import celery_app, closed_redis_url, empty_queue, queued

HEARTBEAT = "portal.tasks.record_beat_task"


def entries(app, count: int) -> list[beat.ScheduleEntry]:
    return [
        beat.ScheduleEntry(name=f"every-second-{n}", task=HEARTBEAT, schedule=1.0, app=app)
        for n in range(count)
    ]


@pytest.fixture
def schedulers(tmp_path, settings):
    """Makes beat's scheduler on a broker URL; the broker's queue starts and ends empty,
    and the outage is forgotten."""
    settings.PORTAL_OUTAGE_RETRY_SECONDS = 0  # every send is tried: no clock needed
    empty_queue()

    def make(broker_url: str) -> Scheduler:
        app = celery_app(broker_url)
        return Scheduler(app, schedule_filename=str(tmp_path / "beat-schedule"), lazy=True)

    yield make
    outage.answered()
    empty_queue()


def test_beat_runs_the_portals_scheduler():
    assert symbol_by_name(app.conf.beat_scheduler) is Scheduler


def test_an_outage_is_one_warning_and_one_line_when_it_ends(schedulers, settings, caplog):
    caplog.set_level(logging.INFO)
    down = schedulers(closed_redis_url())
    for entry in entries(down.app, 3) * 2:
        down.apply_entry(entry)

    [told] = [r.getMessage() for r in caplog.records if r.levelno >= logging.WARNING]
    assert told.startswith("The Celery broker (beat) cannot be reached (OperationalError")
    assert "beat skips the periodic tasks" in told
    assert not any(r.exc_info or "Message Error" in r.getMessage() for r in caplog.records)

    up = schedulers(settings.CELERY_BROKER_URL)
    up.apply_entry(entries(up.app, 1)[0])
    assert [q.task for q in queued()] == [HEARTBEAT]
    assert caplog.records[-1].getMessage().startswith("The Celery broker (beat) answers again")


def test_it_does_not_try_while_the_outage_is_fresh(schedulers, settings, monkeypatch):
    down = schedulers(closed_redis_url())
    settings.PORTAL_OUTAGE_RETRY_SECONDS = 60
    tried = []
    send = down.apply_async
    monkeypatch.setattr(down, "apply_async", lambda *a, **k: tried.append(1) or send(*a, **k))

    for entry in entries(down.app, 4):
        down.apply_entry(entry)

    assert len(tried) == 1


def test_any_other_error_keeps_its_traceback(schedulers, settings, monkeypatch, caplog):
    up = schedulers(settings.CELERY_BROKER_URL)

    def broken(*args, **kwargs):
        try:
            raise ValueError("a bad argument")
        except ValueError as error:
            raise beat.SchedulingError(f"Couldn't apply scheduled task: {error}") from error

    monkeypatch.setattr(up, "apply_async", broken)
    up.apply_entry(entries(up.app, 1)[0])

    [error] = [r for r in caplog.records if r.levelno >= logging.WARNING]
    assert error.getMessage().startswith("Message Error") and error.exc_info
