"""Scenario 7 end to end: a fake agent process sends one sample a minute to a live portal;
the warning and the reaping happen at the exact sample (L6)."""

import json
import subprocess
import sys
from datetime import timedelta
from pathlib import Path

import pytest
from django.utils import timezone

from portal.models import AuditEvent
from rental.agent import idle
from rental.models import Instance, Reservation, UsageRecord, UtilizationSample
from tests import factories
from tests.notices import told
from tests.rental.agent.conftest import running_lease

FAKE_AGENT = Path(__file__).with_name("fake_agent.py")


@pytest.fixture
def f0t(transactional_db):
    return factories.fixture_f0()


@pytest.fixture
def ten(settings):
    """'10:00' of the scenario: a whole minute two and a half hours ago."""
    return timezone.now().replace(second=0, microsecond=0) - timedelta(hours=2, minutes=30)


def minutes(ten, label: str):
    hours, mins = (int(p) for p in label.split(":"))
    return ten + timedelta(minutes=(hours - 10) * 60 + mins)


def samples(ten, *, until="12:10", active_at=(), missing=()):
    out, moment = [], ten
    while moment <= minutes(ten, until):
        label = f"{10 + (moment - ten).seconds // 3600}:{(moment - ten).seconds // 60 % 60:02d}"
        if label not in missing:
            busy = moment == ten or label in active_at
            gpus = [
                {"index": 0, "utilization": 50.0 if busy else 2.0, "memory_used_mb": 900.0},
                {"index": 1, "utilization": 50.0 if busy else 3.0 - 0.5, "memory_used_mb": 0.0},
            ]
            out.append({"at": moment.strftime("%Y-%m-%dT%H:%M:%SZ"), "gpus": gpus})
        moment += timedelta(minutes=1)
    return out


def send_all(live_server, run, payload, tmp_path):
    path = tmp_path / "samples.json"
    path.write_text(json.dumps(payload))
    done = subprocess.run(
        [
            sys.executable,
            str(FAKE_AGENT),
            f"{live_server.url}/api/v1/agent/heartbeat",
            run.token,
            str(path),
        ],
        capture_output=True,
        text=True,
        timeout=240,
        check=True,
    )
    return done.stdout.splitlines()


@pytest.mark.parametrize(
    ("variant", "warned", "reaped"),
    [
        ({}, "10:20", "10:30"),
        ({"active_at": {"10:20"}}, "10:40", "10:50"),
        ({"missing": {f"10:{m:02d}" for m in range(5, 16)}}, "10:31", "10:41"),
    ],
    ids=["idle-from-10", "busy-at-1020", "missing-1005-1015"],
)
def test_it_warns_and_reaps_a_learning_lease_at_the_exact_sample(
    live_server, f0t, ten, tmp_path, variant, warned, reaped
):
    run = running_lease(f0t, priority="learning", since=ten - timedelta(hours=1), gpus=2)

    lines = send_all(live_server, run, samples(ten, **variant), tmp_path)

    instance = Instance.objects.get(pk=run.instance.pk)
    assert instance.idle_warned_at == minutes(ten, warned)
    assert len(told(f0t.alice, starts="Idle")) == 1
    lease = Reservation.objects.get(pk=run.lease.pk)
    assert lease.end_reason == "idle"
    assert lease.ended_at == minutes(ten, reaped)
    assert lease.status in (Reservation.Status.ENDING, Reservation.Status.REAPED)
    assert (instance.state, instance.termination_reason) == (Instance.State.STOPPING, "idle")
    assert UsageRecord.objects.get(instance=instance).end == minutes(ten, reaped)
    # The sample after the reaping is refused and the agent stops.
    last = UtilizationSample.objects.filter(instance=instance).latest("at")
    assert last.at == minutes(ten, reaped)
    assert lines[-1].endswith("409")


def test_it_reaps_an_experiment_lease_at_sixty(live_server, f0t, ten, tmp_path):
    run = running_lease(f0t, priority="experiment", since=ten - timedelta(hours=1), gpus=2)
    send_all(live_server, run, samples(ten), tmp_path)
    lease = Reservation.objects.get(pk=run.lease.pk)
    assert (lease.end_reason, lease.ended_at) == ("idle", minutes(ten, "11:00"))
    assert Instance.objects.get(pk=run.instance.pk).idle_warned_at == minutes(ten, "10:20")


def test_it_never_reaps_production_and_alerts_its_manager(live_server, f0t, ten, tmp_path):
    run = running_lease(f0t, priority="production", since=ten - timedelta(hours=1), gpus=2)

    lines = send_all(live_server, run, samples(ten, until="12:10"), tmp_path)

    assert all(line.endswith("200") for line in lines)
    lease = Reservation.objects.get(pk=run.lease.pk)
    assert lease.status == Reservation.Status.ACTIVE
    assert Instance.objects.get(pk=run.instance.pk).state == Instance.State.RUNNING
    alerts = told(starts="Idle production lease")
    assert [n.user_id for n in alerts] == [f0t.alpha_manager.pk]
    alert = AuditEvent.objects.get(verb="instance.idle_alerted")
    assert alert.at == minutes(ten, "11:00")


def test_it_starts_again_when_the_engineer_is_still_using_it(live_server, f0t, ten, tmp_path):
    run = running_lease(f0t, priority="learning", since=ten - timedelta(hours=1), gpus=2)
    payload = samples(ten)
    send_all(live_server, run, payload[:26], tmp_path)  # 10:00 … 10:25, warned at 10:20
    instance = Instance.objects.get(pk=run.instance.pk)
    assert instance.idle_warned_at == minutes(ten, "10:20")

    idle.still_using(actor=f0t.alice, instance=instance, now=minutes(ten, "10:25"))
    with pytest.raises(idle.InvalidTransition):  # once per warning
        idle.still_using(actor=f0t.alice, instance=instance, now=minutes(ten, "10:26"))
    send_all(live_server, run, payload[26:], tmp_path)

    instance.refresh_from_db()
    lease = Reservation.objects.get(pk=run.lease.pk)
    # Counted again from 10:26: warned at 10:45, reaped at 10:55.
    assert instance.idle_warned_at == minutes(ten, "10:45")
    assert lease.ended_at == minutes(ten, "10:55")
