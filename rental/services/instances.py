"""Instance transitions: launch, mark running, sync with the cloud, terminate.

Provider calls are never made inside a database transaction: each function
reads and claims rows, commits, calls the cloud, then records the result in a
second short transaction. Every claim is a conditional update, so a duplicate
task delivery finds nothing to do.
"""

import logging
from collections import defaultdict
from datetime import datetime, timedelta
from decimal import Decimal

from django.conf import settings
from django.db import transaction
from django.db.models import F
from django.utils import timezone
from django.utils.translation import gettext as _

from portal import audit
from portal.notifications import notify
from rental.models import Instance, Reservation, TerminationReason, UsageRecord
from rental.providers.base import (
    TAG_IDEMPOTENCY_KEY,
    TAG_INSTALLATION,
    TAG_PROJECT,
    TAG_REQUESTER,
    TAG_RESERVATION,
    CloudInstance,
    CloudState,
    LaunchSpec,
    Provider,
    ProviderError,
)
from rental.providers.registry import get_provider

logger = logging.getLogger(__name__)
State = Instance.State
Status = Reservation.Status

# How a lease is called once the platform has finished ending it, by why it ended.
FINAL_STATUS_BY_REASON = {
    TerminationReason.IDLE: Status.REAPED,
    TerminationReason.PREEMPTED: Status.PREEMPTED,
    TerminationReason.SPOT_INTERRUPTED: Status.PREEMPTED,
    TerminationReason.FAILED: Status.FAILED,
}


class LaunchRetry(Exception):
    """A cloud call failed in a way that may succeed later; the task retries with backoff."""


def provider_for(instance: Instance) -> Provider:
    return get_provider(instance.account.config())


def installation_tags() -> dict[str, str]:
    return {TAG_INSTALLATION: settings.PORTAL_INSTALLATION_ID}


def launch_spec(instance: Instance) -> LaunchSpec:
    lease = instance.reservation
    tags = {
        **installation_tags(),
        TAG_PROJECT: lease.project.slug,
        TAG_RESERVATION: str(lease.pk),
        TAG_REQUESTER: lease.requester.get_username(),
    }
    from rental.services import agent

    keys = [key.public_key.strip() for key in lease.requester.ssh_keys.all()]
    user_data = agent.cloud_config(instance, ssh_keys=keys)
    return LaunchSpec(
        region=instance.region,
        instance_type=instance.offering.instance_type,
        image_id=lease.image.image_id if lease.image else "",
        market=instance.market,
        tags=tuple(sorted(tags.items())),
        zone=instance.zone,
        user_data=user_data,
        name=f"gpu-portal {lease.project.slug} lease {lease.pk}",
    )


def _claim_launch(instance_id: int, now: datetime) -> bool:
    claimed = Instance.objects.filter(pk=instance_id, state=State.REQUESTED).update(
        state=State.LAUNCHING, claimed_at=now, launch_attempts=F("launch_attempts") + 1
    )
    if claimed:
        return True
    # A claim whose worker died before recording a cloud id may be taken over once it is
    # stale; the driver's idempotency key makes a second launch find the first instance.
    stale = now - timedelta(seconds=settings.PORTAL_LAUNCH_STALE_SECONDS)
    return bool(
        Instance.objects.filter(
            pk=instance_id, state=State.LAUNCHING, external_id="", claimed_at__lt=stale
        ).update(claimed_at=now, launch_attempts=F("launch_attempts") + 1)
    )


def provision_instance(*, instance_id: int, now: datetime | None = None) -> None:
    """Launch one instance, exactly once however often this is delivered (L1).

    Raises LaunchRetry for capacity, quota, throttling and transient errors; other
    errors fail the lease at once with the provider's message.
    """
    now = now or timezone.now()
    if not _claim_launch(instance_id, now):
        return
    instance = Instance.objects.select_related(
        "reservation__project",
        "reservation__requester",
        "reservation__image",
        "offering",
        "account",
    ).get(pk=instance_id)
    try:
        cloud = provider_for(instance).launch(
            launch_spec(instance), idempotency_key=instance.idempotency_key
        )
    except ProviderError as exc:
        if exc.retryable:
            Instance.objects.filter(pk=instance_id, state=State.LAUNCHING).update(
                state=State.REQUESTED, last_error=exc.message[:500]
            )
            raise LaunchRetry(exc.message) from exc
        fail_instance(instance_id=instance_id, message=exc.message)
        return
    record_launch(instance_id=instance_id, cloud=cloud, now=now)


@transaction.atomic
def record_launch(*, instance_id: int, cloud: CloudInstance, now: datetime) -> None:
    instance = Instance.objects.select_for_update().get(pk=instance_id)
    if instance.external_id:
        return
    _link(instance, cloud, now=now)
    audit.record(
        actor=None,
        verb="instance.launched",
        obj=instance,
        project=instance.reservation.project_id,
        source="worker",
        at=now,
        after={"external_id": cloud.external_id, "zone": cloud.zone},
    )
    if instance.state == State.STOPPING:  # the lease ended while the launch was in flight
        _enqueue_terminate(instance.pk)
    else:
        transaction.on_commit(_enqueue_sync_soon)


def _link(instance: Instance, cloud: CloudInstance, *, now: datetime) -> None:
    instance.external_id = cloud.external_id
    instance.zone = cloud.zone
    instance.public_address = cloud.public_address
    instance.private_address = cloud.private_address
    instance.launched_at = cloud.launched_at or now
    instance.tags = dict(cloud.tags)
    instance.last_error = ""
    instance.save()


@transaction.atomic
def fail_instance(*, instance_id: int, message: str, now: datetime | None = None) -> None:
    """A launch that cannot succeed: the instance and its lease fail with a reason."""
    now = now or timezone.now()
    instance = Instance.objects.select_for_update().get(pk=instance_id)
    if instance.state not in (State.REQUESTED, State.LAUNCHING):
        return
    instance.state = State.FAILED
    instance.termination_reason = TerminationReason.FAILED
    instance.last_error = message[:500]
    instance.terminated_at = now
    instance.save()
    lease = Reservation.objects.select_for_update().get(pk=instance.reservation_id)
    audit.record(
        actor=None,
        verb="instance.failed",
        obj=instance,
        project=lease.project_id,
        source="worker",
        at=now,
        after={"message": message},
    )
    if lease.status in (Status.PROVISIONING, Status.ACTIVE):
        lease.status = Status.ENDING
        lease.end_reason = TerminationReason.FAILED
        lease.status_code = "launch_failed"
        lease.status_message = message[:300]
        lease.ended_at = now
        lease.save()
        for other in lease.instances.select_for_update().exclude(pk=instance.pk):
            stop_billing_and_terminate(other, reason=TerminationReason.FAILED, at=now)
        finish_if_all_terminated(lease.pk)
        notify(
            [lease.requester],
            subject=_("Could not start %(lease)s") % {"lease": lease},
            body=message,
            link=lease.get_absolute_url(),
        )


def close_usage(instance: Instance, *, at: datetime, reason: str) -> None:
    """Close the instance's open usage interval at ``at`` (never before it opened)."""
    for record in UsageRecord.objects.select_for_update().filter(
        instance=instance, end__isnull=True
    ):
        record.end = max(at, record.start)
        record.end_reason = reason
        record.save(update_fields=["end", "end_reason"])


def stop_billing_and_terminate(instance: Instance, *, reason: str, at: datetime) -> None:
    """Within the caller's transaction: usage stops at ``at``; the cloud work follows on
    commit. An instance never launched is simply marked terminated."""
    if instance.state == State.REQUESTED:
        instance.state = State.TERMINATED
        instance.termination_reason = reason
        instance.terminated_at = at
        instance.save()
    elif instance.state in (State.LAUNCHING, State.RUNNING):
        close_usage(instance, at=at, reason=reason)
        instance.state = State.STOPPING
        instance.termination_reason = reason
        instance.save()
        _enqueue_terminate(instance.pk)


def _enqueue_terminate(instance_id: int) -> None:
    from rental import tasks

    transaction.on_commit(lambda: tasks.terminate_instance_task.delay(instance_id))


def _enqueue_sync_soon() -> None:
    from rental import tasks

    tasks.sync_instances_task.apply_async(countdown=2)


def finish_if_all_terminated(reservation_id: int) -> None:
    lease = Reservation.objects.select_for_update().get(pk=reservation_id)
    if lease.status != Status.ENDING:
        return
    if lease.instances.exclude(state__in=(State.TERMINATED, State.FAILED)).exists():
        return
    lease.status = FINAL_STATUS_BY_REASON.get(lease.end_reason, Status.ENDED)
    lease.save()


def terminate_instance(*, instance_id: int, now: datetime | None = None) -> None:
    """Terminate an instance the portal has stopped billing. Idempotent: terminating an
    instance already gone is harmless, and a delivery after the first does nothing."""
    now = now or timezone.now()
    instance = Instance.objects.select_related("account").get(pk=instance_id)
    if instance.state != State.STOPPING:
        return
    provider = provider_for(instance)
    try:
        ids = (
            [instance.external_id]
            if instance.external_id
            else [
                cloud.external_id
                for cloud in provider.describe(
                    region=instance.region,
                    tag_filter={TAG_IDEMPOTENCY_KEY: instance.idempotency_key},
                )
            ]
        )
        provider.terminate(ids, region=instance.region)
    except ProviderError as exc:
        if exc.retryable:
            raise LaunchRetry(exc.message) from exc
        logger.warning("terminating instance %s failed: %s", instance_id, exc.kind)
        Instance.objects.filter(pk=instance_id).update(last_error=exc.message[:500])
        return
    mark_terminated(instance_id=instance_id, at=now)


@transaction.atomic
def mark_terminated(*, instance_id: int, at: datetime, reason: str = "") -> None:
    instance = Instance.objects.select_for_update().get(pk=instance_id)
    if instance.state in (State.TERMINATED, State.FAILED):
        return
    ended_by_portal = bool(instance.termination_reason)  # e.g. an unhealthy one replaced
    reason = instance.termination_reason or reason or TerminationReason.PROVIDER
    close_usage(instance, at=at, reason=reason)
    instance.state = State.TERMINATED
    instance.termination_reason = reason
    instance.terminated_at = at
    instance.agent_token_hash = ""  # the agent's token dies with the instance
    instance.save()
    audit.record(
        actor=None,
        verb="instance.terminated",
        obj=instance,
        project=instance.reservation.project_id,
        source="worker",
        at=at,
        after={"reason": reason},
    )
    lease = Reservation.objects.select_for_update().get(pk=instance.reservation_id)
    if lease.status in (Status.PROVISIONING, Status.ACTIVE) and not ended_by_portal:
        # Ended outside the portal (L3): the lease ends with it.
        lease.status = Status.ENDING
        lease.end_reason = reason
        lease.ended_at = at
        lease.status_message = _("The provider ended the instance.")
        lease.save()
        for other in lease.instances.select_for_update().exclude(pk=instance.pk):
            stop_billing_and_terminate(other, reason=reason, at=at)
        notify(
            [lease.requester],
            subject=_("Ended by the provider: %(lease)s") % {"lease": lease},
            link=lease.get_absolute_url(),
        )
    finish_if_all_terminated(lease.pk)
    gpu_model_id = lease.gpu_model_id

    def admit() -> None:
        from rental import tasks

        tasks.admit_queued_task.delay(gpu_model_id)

    transaction.on_commit(admit)


def mark_running(instance: Instance, cloud: CloudInstance, *, now: datetime) -> None:
    """Within the caller's transaction: the instance runs; billing starts now (B1)."""
    lease = instance.reservation
    instance.state = State.RUNNING
    instance.running_at = now
    instance.public_address = cloud.public_address or instance.public_address
    instance.private_address = cloud.private_address or instance.private_address
    instance.zone = cloud.zone or instance.zone
    instance.save()
    UsageRecord.objects.create(
        instance=instance,
        project_id=lease.project_id,
        gpu_model_id=lease.gpu_model_id,
        tier=lease.tier,
        market=instance.market,
        gpu_count=instance.gpu_count,
        start=now,
        rate=(instance.rate_per_hour / instance.gpu_count).quantize(Decimal("0.000001")),
    )
    audit.record(
        actor=None,
        verb="instance.running",
        obj=instance,
        project=lease.project_id,
        source="worker",
        at=now,
        after={"address": instance.public_address},
    )
    locked = Reservation.objects.select_for_update().get(pk=lease.pk)
    if (
        locked.status == Status.PROVISIONING
        and not locked.instances.exclude(
            state__in=(State.RUNNING, State.STOPPING, State.TERMINATED, State.FAILED)
        ).exists()
    ):
        locked.status = Status.ACTIVE
        locked.status_code = ""
        locked.status_message = ""
        locked.save()
        notify(
            [locked.requester],
            subject=_("Ready: %(lease)s") % {"lease": locked},
            body=_("SSH: %(user)s@%(host)s")
            % {"user": instance.ssh_user, "host": instance.public_address},
            link=locked.get_absolute_url(),
        )


def sync_instances(*, now: datetime | None = None) -> int:
    """Bring every live instance's state from the cloud (L3): one paginated describe per
    account and region, never one call per instance. Returns the instances changed."""
    now = now or timezone.now()
    # The rows are read before the describe: an instance is only "gone" if it was linked
    # to its cloud id before the snapshot was taken (a launch recorded meanwhile is not
    # in the snapshot yet, and is still running).
    groups: dict[tuple[int, str], dict[int, str]] = defaultdict(dict)
    live = Instance.objects.filter(state__in=Instance.LIVE).values_list(
        "pk", "account_id", "region", "external_id"
    )
    for pk, account_id, region, external_id in live:
        groups[(account_id, region)][pk] = external_id
    changed = 0
    for (account_id, region), linked in groups.items():
        sample = Instance.objects.select_related("account").get(pk=next(iter(linked)))
        try:
            cloud = provider_for(sample).describe(region=region, tag_filter=installation_tags())
        except ProviderError as exc:
            logger.warning("sync of account %s in %s failed: %s", account_id, region, exc.kind)
            continue
        changed += apply_sync(linked_before=linked, cloud=cloud, now=now)
    _requeue_lost_launches(now)
    return changed


@transaction.atomic
def apply_sync(*, linked_before: dict[int, str], cloud: list[CloudInstance], now: datetime) -> int:
    """Apply one describe snapshot to the rows read just before it was taken;
    ``linked_before`` maps each row to the cloud id it had then ("" if none)."""
    by_id = {item.external_id: item for item in cloud}
    by_key = {item.idempotency_key: item for item in cloud if item.idempotency_key}
    stale = now - timedelta(seconds=settings.PORTAL_LAUNCH_STALE_SECONDS)
    changed = 0
    instances = Instance.objects.select_for_update().filter(
        pk__in=linked_before, state__in=Instance.LIVE
    )
    for instance in instances.select_related("reservation"):
        found = (
            by_id.get(instance.external_id)
            if instance.external_id
            else by_key.get(instance.idempotency_key)
        )
        if found is None:
            if instance.external_id and instance.external_id == linked_before[instance.pk]:
                # Gone from the cloud without a trace: ended outside the portal.
                mark_terminated(instance_id=instance.pk, at=now)
                changed += 1
            elif (
                instance.state == State.LAUNCHING
                and instance.claimed_at
                and (instance.claimed_at < stale)
            ):
                instance.state = State.REQUESTED
                instance.save(update_fields=["state"])
                _enqueue_provision(instance.pk)
                changed += 1
            continue
        if not instance.external_id:
            _link(instance, found, now=now)  # a launch whose worker died before recording it
            changed += 1
        if found.state in (CloudState.SHUTTING_DOWN, CloudState.TERMINATED):
            at = found.state_changed_at or now
            at = min(max(at, instance.running_at or at), now)
            from rental.services import spot

            reason = spot.reason_from_cloud(instance, found.state_reason)
            mark_terminated(instance_id=instance.pk, at=at, reason=reason)
            if reason:
                spot.after_sync_interruption(instance_id=instance.pk, now=now)
            changed += 1
        elif found.state == CloudState.RUNNING and instance.state == State.LAUNCHING:
            mark_running(instance, found, now=now)
            changed += 1
        elif instance.state == State.STOPPING:
            _enqueue_terminate(instance.pk)  # the terminate task may have been lost
    return changed


def _enqueue_provision(instance_id: int) -> None:
    from rental import tasks

    transaction.on_commit(lambda: tasks.provision_instance_task.delay(instance_id))


def _requeue_lost_launches(now: datetime) -> None:
    """A launch task lost by the broker: requested instances of admitted leases that
    nobody claimed in time are sent again (a duplicate would find nothing to claim)."""
    from rental import tasks

    stale = now - timedelta(seconds=settings.PORTAL_LAUNCH_STALE_SECONDS)
    lost = Instance.objects.filter(
        state=State.REQUESTED,
        reservation__status=Status.PROVISIONING,
        reservation__start__lt=stale,
    ).values_list("pk", flat=True)
    for pk in lost:
        tasks.provision_instance_task.delay(pk)
