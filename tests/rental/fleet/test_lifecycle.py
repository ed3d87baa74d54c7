"""The instance lifecycle through the services against the local EC2 endpoint:
launch (L1), sync (L3), end and lease end (L5), usage intervals (B1)."""

from datetime import timedelta

import pytest

from rental.fleet import instances, sync, termination
from rental.fleet.cloud import LaunchRetry, provider_for
from rental.fleet.instances import _claim_launch, launch_spec
from rental.fleet.sync import SyncRow
from rental.loans import admission, ending
from rental.models import Instance, Reservation, TerminationReason, UsageRecord
from rental.providers.base import (
    TAG_IDEMPOTENCY_KEY,
    TAG_INSTALLATION,
    TAG_PROJECT,
    TAG_REQUESTER,
    TAG_RESERVATION,
    CloudState,
)
from tests import factories

Status = Reservation.Status
State = Instance.State


@pytest.fixture
def f0c(db, cloud):
    """F0 whose provider account points at the local EC2 endpoint."""
    return factories.fixture_f0(endpoint_url=cloud.url)


def cloud_instances(f0c):
    account = f0c.account
    return provider_for(Instance(account=account)).describe(
        region="us-east-1", tag_filter={TAG_INSTALLATION: "test"}
    )


def submit(f0c, now, *, gpus=1, hours=2):
    return admission.submit_reservation(
        actor=f0c.alice,
        project=f0c.alpha,
        gpu_model=f0c.model,
        gpu_count=gpus,
        duration_hours=hours,
        priority="experiment",
        market="on_demand",
        now=now,
    )


def launched(f0c, t0, **kwargs):
    lease = submit(f0c, t0, **kwargs)
    for instance in lease.instances.all():
        instances.provision_instance(instance_id=instance.pk, now=t0)
    sync.sync_instances(now=t0 + timedelta(seconds=30))
    return Reservation.objects.get(pk=lease.pk)


def test_it_launches_tags_and_marks_running(f0c, t0):
    lease = submit(f0c, t0)
    instance = lease.instances.get()
    instances.provision_instance(instance_id=instance.pk, now=t0)

    instance.refresh_from_db()
    assert instance.state == State.LAUNCHING
    assert instance.external_id.startswith("i-")
    [cloud] = cloud_instances(f0c)
    assert cloud.external_id == instance.external_id
    assert cloud.tag(TAG_PROJECT) == "alpha"
    assert cloud.tag(TAG_RESERVATION) == str(lease.pk)
    assert cloud.tag(TAG_REQUESTER) == "alice"
    assert cloud.tag(TAG_IDEMPOTENCY_KEY) == instance.idempotency_key
    assert not UsageRecord.objects.exists()  # billing starts at running, not at launch

    running_at = t0 + timedelta(seconds=30)
    sync.sync_instances(now=running_at)

    instance.refresh_from_db()
    lease.refresh_from_db()
    assert (instance.state, instance.running_at) == (State.RUNNING, running_at)
    assert instance.public_address
    assert lease.status == Status.ACTIVE
    usage = UsageRecord.objects.get()
    assert (usage.start, usage.end, usage.gpu_count) == (running_at, None, 1)
    assert str(usage.rate) == "2.500000"
    assert (usage.tier, usage.market) == ("guaranteed", "on_demand")


def test_it_launches_once_when_the_task_is_delivered_twice(f0c, t0):
    instance = submit(f0c, t0).instances.get()
    instances.provision_instance(instance_id=instance.pk, now=t0)
    instances.provision_instance(instance_id=instance.pk, now=t0 + timedelta(seconds=1))
    assert len(cloud_instances(f0c)) == 1


# Scenario 8 (L1)
def test_it_links_the_launch_of_a_worker_that_died_before_recording_it(f0c, t0, cloud):
    instance = submit(f0c, t0).instances.get()
    # The first delivery claims the row and reaches the cloud, then its worker dies.
    assert _claim_launch(instance.pk, t0)
    instance.refresh_from_db()
    provider_for(instance).launch(launch_spec(instance), idempotency_key=instance.idempotency_key)
    # The duplicate delivery finds the row claimed and does nothing.
    instances.provision_instance(instance_id=instance.pk, now=t0 + timedelta(seconds=5))
    assert cloud.count("RunInstances") == 1

    sync.sync_instances(now=t0 + timedelta(seconds=30))

    [only] = cloud_instances(f0c)
    instance.refresh_from_db()
    assert instance.external_id == only.external_id
    assert instance.state == State.RUNNING


def test_it_relaunches_a_stale_claim_without_a_second_instance(f0c, t0, cloud):
    instance = submit(f0c, t0).instances.get()
    assert _claim_launch(instance.pk, t0)
    instance.refresh_from_db()
    provider_for(instance).launch(launch_spec(instance), idempotency_key=instance.idempotency_key)
    later = t0 + timedelta(minutes=5)  # past PORTAL_LAUNCH_STALE_SECONDS
    instances.provision_instance(instance_id=instance.pk, now=later)
    instance.refresh_from_db()
    assert len(cloud_instances(f0c)) == 1
    assert instance.external_id == cloud_instances(f0c)[0].external_id


def test_it_ends_a_lease_closes_usage_and_terminates(f0c, t0):
    lease = launched(f0c, t0)
    ended_at = t0 + timedelta(minutes=47)
    ending.end_reservation(actor=f0c.alice, reservation=lease, now=ended_at)

    usage = UsageRecord.objects.get()
    assert usage.end == ended_at
    assert usage.end_reason == TerminationReason.USER
    instance = lease.instances.get()
    assert instance.state == State.STOPPING

    termination.terminate_instance(instance_id=instance.pk, now=ended_at)
    termination.terminate_instance(instance_id=instance.pk, now=ended_at)  # a duplicate

    instance.refresh_from_db()
    lease.refresh_from_db()
    assert instance.state == State.TERMINATED
    assert lease.status == Status.ENDED
    assert [c.state for c in cloud_instances(f0c)] == [CloudState.TERMINATED]
    assert UsageRecord.objects.get().end == ended_at  # never closed twice


def test_it_ends_leases_at_their_end_not_when_the_task_runs(f0c, t0):
    lease = launched(f0c, t0, hours=1)
    late = lease.end + timedelta(seconds=40)
    assert ending.end_expired_leases(now=late) == 1
    assert ending.end_expired_leases(now=late) == 0
    usage = UsageRecord.objects.get()
    assert usage.end == lease.end
    assert usage.end_reason == TerminationReason.LEASE_END


def test_it_closes_usage_when_the_cloud_ended_the_instance(f0c, t0):
    lease = launched(f0c, t0)
    instance = lease.instances.get()
    provider_for(instance).terminate([instance.external_id], region="us-east-1")

    sync.sync_instances(now=t0 + timedelta(hours=1))

    instance.refresh_from_db()
    lease.refresh_from_db()
    assert instance.state == State.TERMINATED
    assert instance.termination_reason == TerminationReason.PROVIDER
    assert lease.status == Status.ENDED
    usage = UsageRecord.objects.get()
    assert usage.end is not None and usage.start <= usage.end <= t0 + timedelta(hours=1)


def test_it_retries_capacity_errors_and_fails_bad_requests_at_once(f0c, t0, cloud):
    first = submit(f0c, t0).instances.get()
    cloud.inject("RunInstances", "InsufficientInstanceCapacity", "no A100 today")
    with pytest.raises(LaunchRetry):
        instances.provision_instance(instance_id=first.pk, now=t0)
    first.refresh_from_db()
    assert first.state == State.REQUESTED  # free to be claimed by the retry
    assert "no A100 today" in str(first.last_error)

    second = submit(f0c, t0).instances.get()
    cloud.inject("RunInstances", "InvalidParameterValue", "bad image")
    instances.provision_instance(instance_id=second.pk, now=t0)
    second.refresh_from_db()
    assert second.state == State.FAILED
    lease = second.reservation
    lease.refresh_from_db()
    assert lease.status == Status.FAILED
    assert "bad image" in str(lease.status_message)


def test_it_does_not_launch_for_a_lease_ended_before_its_launch(f0c, t0, cloud):
    lease = submit(f0c, t0)
    ending.end_reservation(actor=f0c.alice, reservation=lease, now=t0)
    instances.provision_instance(instance_id=lease.instances.get().pk, now=t0)
    assert cloud.count("RunInstances") == 0
    assert Reservation.objects.get(pk=lease.pk).status == Status.ENDED


def test_it_keeps_a_launch_recorded_while_the_sync_was_describing(f0c, t0, cloud):
    """The sync reads its rows, then describes; a launch recorded in between is not in the
    snapshot, and must not be taken for an instance ended outside the portal."""
    instance = submit(f0c, t0).instances.get()
    rows = [SyncRow(instance.pk, instance.external_id)]  # the sync reads the row: no cloud id
    snapshot = cloud_instances(f0c)  # ... and describes: nothing launched yet
    instances.provision_instance(instance_id=instance.pk, now=t0)  # the launch lands meanwhile

    sync.apply_sync(rows=rows, cloud=snapshot, now=t0 + timedelta(seconds=1))

    instance.refresh_from_db()
    assert instance.state == State.LAUNCHING
    assert not instance.termination_reason
    assert Reservation.objects.get(pk=instance.reservation_id).status == Status.PROVISIONING
    [running] = cloud_instances(f0c)
    assert running.external_id == instance.external_id

    sync.sync_instances(now=t0 + timedelta(seconds=30))  # the next sync sees it running
    instance.refresh_from_db()
    assert instance.state == State.RUNNING
