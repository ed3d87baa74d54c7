"""L1: a real Celery worker (with beat) on Redis killed with SIGKILL right after it claimed
a launch, or right after a submission: the lease reaches ``active`` with exactly one cloud
instance within about one sync period, found from the rows by the launch sweep, never by
waiting for the broker (the visibility timeout stays at its production six minutes).
Killed while its termination waits at the cloud: the instance is terminated within the
stale-claim time and two sweeps, by the same sweep.

The production timings are scaled down through settings: a 4 s sync period, a 3 s
stale-claim time and a 1 s sweep (production: 30 s, 25 s and 5 s)."""

import time

import pytest
import redis
from django.conf import settings

from rental.fleet import instances, sync
from rental.loans import admission, ending
from rental.models import Instance, RegionSync, Reservation
from rental.providers.base import CloudState
from tests import factories
from tests.integration.test_chaos import Worker, wait_for
from tests.rental.fleet.conftest import cloud_instances

pytestmark = [pytest.mark.integration, pytest.mark.django_db(transaction=True)]
Status = Reservation.Status
SYNC_PERIOD = 4
# Starting a fresh worker process (Django, Celery, beat) takes a few seconds here.
MARGIN = 8


def scaled_worker(tmp_path) -> Worker:
    worker = Worker(tmp_path / "worker.log")
    worker.env.update(
        {
            "PORTAL_SYNC_INTERVAL": str(SYNC_PERIOD),
            "PORTAL_LAUNCH_STALE_SECONDS": "3",
            "PORTAL_LAUNCH_SWEEP_INTERVAL": "1",
            "PORTAL_SYNC_CLAIM_SECONDS": "4",
            "PORTAL_BROKER_VISIBILITY_TIMEOUT": "360",
        }
    )
    return worker


def submit(f0):
    return admission.submit_reservation(
        actor=f0.alice,
        project=f0.alpha,
        gpu_model=f0.model,
        gpu_count=1,
        duration_hours=4,
        priority="experiment",
        market="on_demand",
    )


def settle(f0, lease, killed_at: float) -> float:
    wait_for(
        lambda: Reservation.objects.get(pk=lease.pk).status == Status.ACTIVE,
        timeout=60,
        what="the lease to become active after the kill",
    )
    elapsed = time.monotonic() - killed_at
    alive = [c for c in cloud_instances(f0.account) if c.state != CloudState.TERMINATED]
    assert len(alive) == 1
    assert Instance.objects.get(reservation=lease).external_id == alive[0].external_id
    return elapsed


def test_it_launches_within_a_sync_period_after_the_worker_died_holding_the_claim(cloud, tmp_path):
    redis.Redis.from_url(settings.CELERY_BROKER_URL).flushdb()
    f0 = factories.fixture_f0(endpoint_url=cloud.url)
    worker = scaled_worker(tmp_path)
    # Every describe is held: the launch's look-up by tag stops right after its claim.
    cloud.delay("DescribeInstances", 30, times=999)
    worker.start()
    try:
        lease = submit(f0)
        wait_for(
            lambda: Instance.objects.filter(
                reservation=lease, state=Instance.State.LAUNCHING, claimed_at__isnull=False
            ).exists(),
            timeout=60,
            what="the worker to claim the launch",
        )
        worker.kill()
        killed_at = time.monotonic()
        cloud.clear_faults()
        worker.start()
        elapsed = settle(f0, lease, killed_at)
    finally:
        worker.stop()
        cloud.clear_faults()
    print(f"claimed, killed: active {elapsed:.1f} s after the kill")  # noqa: T201
    assert elapsed <= SYNC_PERIOD + 3 + 1 + MARGIN


def test_it_launches_within_a_sync_period_after_the_worker_died_after_a_submission(cloud, tmp_path):
    redis.Redis.from_url(settings.CELERY_BROKER_URL).flushdb()
    f0 = factories.fixture_f0(endpoint_url=cloud.url)
    worker = scaled_worker(tmp_path)
    # The worker may take the launch message; it never reaches the cloud before it dies.
    cloud.delay("DescribeInstances", 30, times=999)
    worker.start()
    try:
        # A worker that has started and takes messages: its beat has sent a sync and the
        # worker claimed the region (the sync then waits on the held describe), however
        # long the start took on this machine.
        wait_for(
            lambda: RegionSync.objects.filter(claimed_until__isnull=False).exists(),
            timeout=60,
            what="the worker to take its first sync",
        )
        lease = submit(f0)
        time.sleep(0.2)
        worker.kill()
        killed_at = time.monotonic()
        cloud.clear_faults()
        worker.start()
        elapsed = settle(f0, lease, killed_at)
    finally:
        worker.stop()
        cloud.clear_faults()
    print(f"submitted, killed: active {elapsed:.1f} s after the kill")  # noqa: T201
    assert elapsed <= SYNC_PERIOD + 3 + 1 + MARGIN


def test_it_terminates_within_the_stale_claim_time_after_the_worker_died_terminating(
    cloud, tmp_path
):
    """The worker dies while its TerminateInstances waits at the cloud: its message stays
    invisible for the broker's six minutes and no sync runs (a one-hour period), so only
    the sweep can send the termination again, within the stale-claim time and two sweeps."""
    redis.Redis.from_url(settings.CELERY_BROKER_URL).flushdb()
    f0 = factories.fixture_f0(endpoint_url=cloud.url)
    lease = submit(f0)
    instances.provision_instance(instance_id=lease.instances.get().pk)
    sync.sync_instances()
    assert Reservation.objects.get(pk=lease.pk).status == Status.ACTIVE
    worker = scaled_worker(tmp_path)
    worker.env["PORTAL_SYNC_INTERVAL"] = "3600"
    cloud.delay("TerminateInstances", 30, when="before", times=1)
    worker.start()
    try:
        ending.end_reservation(actor=f0.alice, reservation=Reservation.objects.get(pk=lease.pk))
        assert cloud.wait_until_held("TerminateInstances", timeout=60)
        worker.kill()
        killed_at = time.monotonic()
        cloud.clear_faults()
        worker.start()
        wait_for(
            lambda: Instance.objects.get(reservation=lease).state == Instance.State.TERMINATED,
            timeout=60,
            what="the instance to be terminated after the kill",
        )
        elapsed = time.monotonic() - killed_at
    finally:
        worker.stop()
        cloud.clear_faults()
    alive = [c for c in cloud_instances(f0.account) if c.state == CloudState.RUNNING]
    assert alive == []
    print(f"terminating, killed: terminated {elapsed:.1f} s after the kill")  # noqa: T201
    assert elapsed <= 3 + 2 * 1 + MARGIN
