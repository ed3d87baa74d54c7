"""Redis stopped under a real worker with beat (issue 18, point 1): while it is down the
API answers reads and writes, and the work they ask for waits in the outbox; once Redis
is back, on the same port, the worker and beat reconnect on their own and the outbox
sweep sends that work, each message once, so the lease asked for meanwhile is launched
and the one ended meanwhile is terminated. Beat logs the outage in one line, not a
traceback for each task it could not send.

The launch sweep is held back (a stale-claim time longer than the test) so that only the
outbox can deliver the launch.

By hand, with Redis kept down longer (the issue's drill is 60 s):
REDIS_OUTAGE_SECONDS=60 pytest tests/integration/test_redis_outage.py -s
"""

import os
import time

import pytest
from django.urls import reverse

from rental import jobs
from rental.fleet.cloud import provider_for
from rental.models import Instance, OutboxMessage, Reservation
from rental.providers.base import TAG_INSTALLATION, CloudState
from tests import factories, servers
from tests.api.leases_world import client_for
from tests.fixtures_outages import celery_app
from tests.integration.test_chaos import Worker, launch_state, wait_for

pytestmark = [pytest.mark.integration, pytest.mark.django_db(transaction=True)]
Status = Reservation.Status
LIST = reverse("api:lease-list")
OUTBOX_SWEEP = 1  # seconds (production: 5)
OUTAGE = float(os.environ.get("REDIS_OUTAGE_SECONDS", "0"))  # beyond the calls made in it
# Kombu's worker waits at most 30 s between attempts to reconnect to the broker; then one
# outbox sweep, the launch or termination (two cloud calls) and a sync.
SETTLE = 30 + OUTBOX_SWEEP + 60
BEAT_OUTAGE = "The Celery broker (beat) cannot be reached"  # portal.beat


class RedisServer:
    """A Redis of this test's own, stopped and started again on the same port."""

    def __init__(self, folder) -> None:
        self.folder = folder
        self.port = servers.free_port()
        self.url = f"redis://127.0.0.1:{self.port}/0"
        self.process = None

    def start(self) -> None:
        self.process = servers.redis_server(self.folder, self.port)

    def stop(self) -> None:
        if self.process is not None and self.process.poll() is None:
            self.process.terminate()
            self.process.wait(timeout=20)


@pytest.fixture
def own_redis(tmp_path, monkeypatch, settings):
    server = RedisServer(tmp_path)
    server.start()
    # This process publishes there too (the portal's own app is bound to the run's Redis).
    monkeypatch.setattr(jobs, "app", celery_app(server.url))
    settings.PORTAL_OUTAGE_RETRY_SECONDS = 0
    yield server
    server.stop()
    jobs.broker.answered()


def ask(f0) -> dict:
    return {
        "project": "alpha",
        "gpu_model": f0.model.pk,
        "gpu_count": 1,
        "duration_hours": "4",
        "purpose": "an outage drill",
    }


def status_of(pk: int) -> str:
    return Reservation.objects.get(pk=pk).status


def test_it_keeps_serving_while_redis_is_down_and_does_the_work_once_it_is_back(
    cloud, own_redis, tmp_path
):
    worker = Worker(tmp_path / "worker.log")
    worker.env.update(
        {
            "CELERY_BROKER_URL": own_redis.url,
            "PORTAL_OUTBOX_SWEEP_INTERVAL": str(OUTBOX_SWEEP),
            "PORTAL_OUTAGE_RETRY_SECONDS": "1",
            "PORTAL_LAUNCH_STALE_SECONDS": "600",
        }
    )
    f0 = factories.fixture_f0(endpoint_url=cloud.url)
    client = client_for(f0.alice)
    worker.start()
    try:
        before = client.post(LIST, ask(f0), format="json")
        assert before.status_code == 201, before.content
        first = before.json()["id"]
        wait_for(lambda: status_of(first) == Status.ACTIVE, timeout=SETTLE, what="a first launch")

        own_redis.stop()
        assert client.get(LIST).status_code == 200
        during = client.post(LIST, ask(f0), format="json")
        assert during.status_code == 201, during.content
        second = during.json()["id"]
        ended = client.post(reverse("api:lease-end", kwargs={"pk": first}), format="json")
        assert ended.status_code == 200 and ended.json()["status"] == "ending"
        launch = Instance.objects.get(reservation_id=second)
        stop = Instance.objects.get(reservation_id=first)
        waiting = OutboxMessage.objects.filter(sent_at__isnull=True).order_by("pk")
        asked = [(m.task, m.args) for m in waiting]
        ours = [
            ("rental.tasks.provision_instance_task", [launch.pk]),
            ("rental.tasks.terminate_instance_task", [stop.pk]),
        ]
        assert [message for message in asked if message in ours] == ours  # kept, in order
        kept = list(waiting.values_list("pk", flat=True))

        # Beat has tasks due every second: it finds the broker gone, and says so once.
        wait_for(
            lambda: BEAT_OUTAGE in worker.log.read_text(),
            timeout=SETTLE,
            what="beat to find the broker gone",
        )
        time.sleep(OUTAGE)  # the outage's length, by hand only (0 in the suite)
        own_redis.start()
        back = time.monotonic()
        wait_for(
            lambda: status_of(second) == Status.ACTIVE and status_of(first) == Status.ENDED,
            timeout=SETTLE,
            what=lambda: launch_state(f0.account),
        )
        print(f"settled {time.monotonic() - back:.1f} s after Redis was back")  # noqa: T201
    finally:
        worker.stop()

    assert OutboxMessage.objects.filter(pk__in=kept, sent_at__isnull=True).count() == 0
    # One line for the outage from beat, never a traceback for each task it could not send.
    log = worker.log.read_text()
    assert log.count(BEAT_OUTAGE) == 1
    assert "Message Error" not in log
    assert cloud.count("RunInstances") == 2  # one launch per lease: nothing sent twice ran twice
    states = {
        found.external_id: found.state
        for found in provider_for(launch).describe(
            region="us-east-1", tag_filter={TAG_INSTALLATION: "test"}
        )
    }
    stop.refresh_from_db()
    launch.refresh_from_db()
    assert states[stop.external_id] == CloudState.TERMINATED
    assert states[launch.external_id] == CloudState.RUNNING
