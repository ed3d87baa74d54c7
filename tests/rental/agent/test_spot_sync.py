"""L7 seen by the sync: a spot instance the cloud terminated with a spot state reason
becomes preempted (spot_interrupted), its usage closes at the interruption, and the
remaining time is asked for again when the requester wanted that."""

from datetime import timedelta

from django.utils import timezone

from rental.fleet.sync import SyncRow, apply_sync
from rental.models import Instance, Reservation, UsageRecord
from rental.providers.base import CloudInstance, CloudState
from tests.rental.agent.conftest import running_lease


def cloud_view(instance, *, state_reason, at):
    return CloudInstance(
        external_id=instance.external_id,
        state=CloudState.TERMINATED,
        market=instance.market,
        region="us-east-1",
        zone="us-east-1a",
        instance_type="test.a100x1",
        public_address="",
        private_address="",
        launched_at=instance.running_at,
        state_reason=state_reason,
        state_changed_at=at,
        tags=(),
    )


SPOT_REASON = "Server.SpotInstanceTermination: Spot instance termination"


def test_it_marks_a_spot_interruption_preempted_and_asks_again(f0):
    run = running_lease(f0, market="spot", priority="experiment")
    Reservation.objects.filter(pk=run.lease.pk).update(requeue_on_preemption=True)
    now = timezone.now().replace(microsecond=0)
    at = now - timedelta(seconds=20)

    apply_sync(
        rows=[SyncRow(run.instance.pk, run.instance.external_id)],
        cloud=[cloud_view(run.instance, state_reason=SPOT_REASON, at=at)],
        now=now,
    )

    lease = Reservation.objects.get(pk=run.lease.pk)
    assert (lease.status, lease.end_reason) == (Reservation.Status.PREEMPTED, "spot_interrupted")
    instance = Instance.objects.get(pk=run.instance.pk)
    assert (instance.state, instance.termination_reason) == ("terminated", "spot_interrupted")
    usage = UsageRecord.objects.get(instance=instance)
    assert (usage.end, usage.end_reason) == (at, "spot_interrupted")
    retry = Reservation.objects.exclude(pk=lease.pk).get()
    assert (retry.market, retry.requeue_on_preemption) == ("spot", True)


def test_it_leaves_other_terminations_to_the_provider_reason(f0):
    run = running_lease(f0, market="spot")
    now = timezone.now().replace(microsecond=0)
    view = cloud_view(run.instance, state_reason="Client.UserInitiatedShutdown", at=now)
    apply_sync(rows=[SyncRow(run.instance.pk, run.instance.external_id)], cloud=[view], now=now)
    assert Instance.objects.get(pk=run.instance.pk).termination_reason == "provider"
    assert Reservation.objects.count() == 1

    other = running_lease(f0, market="on_demand")
    on_demand = cloud_view(other.instance, state_reason=SPOT_REASON, at=now)
    apply_sync(
        rows=[SyncRow(other.instance.pk, other.instance.external_id)], cloud=[on_demand], now=now
    )
    assert Instance.objects.get(pk=other.instance.pk).termination_reason == "provider"
