"""Ending instances in the cloud: the terminate call (``terminate_instance``, sent on
commit once billing has stopped, ``rental.loans.usage``), and the row, its lease, its
volumes and its stopped disk closed when the cloud confirms (``mark_terminated``, or in
bulk from the sync, ``mark_terminated_many``). Launching is in ``instances.py``."""

import logging
from datetime import datetime, timedelta

from django.conf import settings
from django.db import transaction
from django.db.models import F
from django.utils import timezone
from django.utils.translation import gettext_noop

from portal import audit
from portal.models import AuditEvent
from portal.notifications import Event, admins, notify
from portal.phrases import Phrase
from rental import jobs
from rental.catalog import volumes
from rental.fleet import unbilled, volume_cloud
from rental.fleet.cloud import LaunchRetry, provider_for
from rental.loans.ending import GONE, ended_status
from rental.loans.locks import lock_leases_of
from rental.loans.messages import lease_name
from rental.loans.usage import close_usage, stop_billing_and_terminate
from rental.models import Instance, ProviderAccount, Reservation, TerminationReason, UsageRecord
from rental.providers.base import TAG_IDEMPOTENCY_KEY, CloudState, Provider, ProviderError

logger = logging.getLogger(__name__)
State = Instance.State
Status = Reservation.Status


def finish_if_all_terminated(reservation_id: int) -> None:
    lease = Reservation.objects.select_for_update().get(pk=reservation_id)
    if lease.status != Status.ENDING:
        return
    if lease.instances.exclude(state__in=GONE).exists():
        return
    lease.status = ended_status(lease.end_reason)
    lease.save(update_fields=["status", "updated_at"])


def terminate_instance(*, instance_id: int, now: datetime | None = None) -> None:
    """Terminate an instance the portal has stopped billing. Idempotent: terminating an
    instance already gone is harmless, and a delivery after the first does nothing."""
    now = now or timezone.now()
    instance = Instance.objects.select_related("account").get(pk=instance_id)
    if instance.state != State.STOPPING:
        return
    # The claim the sweep reads: this termination is being worked on (recovery.py).
    Instance.objects.filter(pk=instance_id).update(terminate_sent_at=now)
    provider = provider_for(instance)
    try:
        if instance.external_id:
            ids = [instance.external_id]
        else:
            ids = [
                cloud.external_id
                for cloud in provider.describe(
                    region=instance.region,
                    tag_filter={TAG_IDEMPOTENCY_KEY: instance.idempotency_key},
                )
                if cloud.state != CloudState.TERMINATED
            ]
            if not ids and launch_may_be_in_flight(instance, now=now):
                # Nothing carries the key yet, but the launch's answer may still come:
                # its record_launch (or the sync, once the claim is stale) ends this.
                return
            if ids:
                Instance.objects.filter(pk=instance_id, external_id="").update(external_id=ids[0])
        _detach_volumes(instance, provider)
        provider.terminate(ids, region=instance.region)
    except ProviderError as exc:
        logger.warning("terminating instance %s failed: %s", instance_id, exc.kind)
        _count_terminate_failure(instance, exc)
        if exc.retryable:
            raise LaunchRetry(exc.message) from exc
        return  # the next sync sends it again
    mark_terminated(instance_id=instance_id, at=now)


def _count_terminate_failure(instance: Instance, exc: ProviderError) -> None:
    """A failed terminate: counted; at PORTAL_TERMINATE_MAX_ATTEMPTS admins are told, once,
    that the instance may still be billing. The sync keeps sending it."""
    Instance.objects.filter(pk=instance.pk).update(
        last_error=exc.message[:500], terminate_failures=F("terminate_failures") + 1
    )
    failures = Instance.objects.values_list("terminate_failures", flat=True).get(pk=instance.pk)
    if failures == settings.PORTAL_TERMINATE_MAX_ATTEMPTS:
        tell_admins_still_billing(
            external_id=instance.external_id or instance.idempotency_key,
            account=instance.account,
            region=instance.region,
            failures=failures,
            error=exc.message,
        )


def tell_admins_still_billing(
    *, external_id: str, account: ProviderAccount, region: str, failures: int, error: str
) -> None:
    notify(
        admins(),
        subject=Phrase(
            gettext_noop("Could not terminate %(id)s: it may still be billing"), id=external_id
        ),
        body=Phrase(
            gettext_noop(
                "Instance %(id)s in account %(account)s (%(region)s) could not be terminated "
                "after %(n)s tries and may still be running and billing. Terminate it in the "
                "provider's console. Last error: %(error)s"
            ),
            id=external_id,
            account=account.name,
            region=region,
            n=failures,
            error=error,
        ),
    )


def _detach_volumes(instance: Instance, provider: Provider) -> None:
    volume_cloud.detach_before_terminate(instance, provider)


def _storage_after_termination(ended: dict[int, datetime]) -> None:
    """Data volumes are released (never deleted) and stopped disks stop billing (B8)."""
    volumes.instance_ended(ended)


def launch_may_be_in_flight(instance: Instance, *, now: datetime) -> bool:
    """Whether a worker may still be waiting for this instance's RunInstances answer: it
    was claimed for launch less than the stale-claim time ago."""
    stale = now - timedelta(seconds=settings.PORTAL_LAUNCH_STALE_SECONDS)
    return instance.claimed_at is not None and instance.claimed_at >= stale


@transaction.atomic
def mark_terminated(*, instance_id: int, at: datetime, reason: str = "") -> None:
    lock_leases_of([instance_id])  # the lock order: the lease before its instances
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
    unbilled.record_unbilled({instance.pk: at})
    _storage_after_termination({instance.pk: at})
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
        lease.status_message = Phrase(gettext_noop("The provider ended the instance."))
        lease.save()
        for other in lease.instances.select_for_update().exclude(pk=instance.pk):
            stop_billing_and_terminate(other, reason=reason, at=at)
        notify(
            [lease.requester],
            subject=Phrase(
                gettext_noop("Ended by the provider: %(lease)s"), lease=lease_name(lease)
            ),
            link=lease.get_absolute_url(),
            event=Event.PREEMPTED,
            project=lease.project_id,
        )
    finish_if_all_terminated(lease.pk)
    jobs.admit_queued_on_commit(lease.gpu_model_id)


def mark_terminated_many(ended: dict[int, datetime]) -> None:
    """``mark_terminated`` for many rows in a few bulk queries (the sync's case: a describe
    taken after the rows were read says they are gone). Within the caller's transaction;
    ``ended`` maps row ids to the cloud's termination time."""
    if not ended:
        return
    lock_leases_of(ended)  # the lock order: leases before their instances
    instances = list(
        Instance.objects.select_for_update()
        .filter(pk__in=list(ended))
        .exclude(state__in=(State.TERMINATED, State.FAILED))
        .select_related("reservation")
    )
    if not instances:
        return
    why: dict[int, tuple[str, datetime]] = {}
    for instance in instances:
        reason = instance.termination_reason or TerminationReason.PROVIDER
        why[instance.pk] = (reason, ended[instance.pk])
        instance.state = State.TERMINATED
        instance.termination_reason = reason
        instance.terminated_at = ended[instance.pk]
    records = list(
        UsageRecord.objects.select_for_update().filter(instance_id__in=list(why), end__isnull=True)
    )
    for record in records:
        reason, at = why[record.instance_id]
        record.end, record.end_reason = max(at, record.start), reason
    UsageRecord.objects.bulk_update(records, ["end", "end_reason"], batch_size=1000)
    unbilled.record_unbilled({pk: at for pk, (_reason, at) in why.items()})
    Instance.objects.bulk_update(
        instances, ["state", "termination_reason", "terminated_at"], batch_size=1000
    )
    _storage_after_termination({pk: at for pk, (_reason, at) in why.items()})
    AuditEvent.objects.bulk_create(
        (
            AuditEvent(
                at=ended[instance.pk],
                verb="instance.terminated",
                object_type=Instance._meta.label_lower,
                object_id=str(instance.pk),
                project_id=instance.reservation.project_id,
                before={},
                after={"reason": why[instance.pk][0]},
                source="worker",
            )
            for instance in instances
        ),
        batch_size=1000,
    )
    lease_ids = {instance.reservation_id for instance in instances}
    first_end: dict[int, tuple[datetime, str]] = {}
    for instance in instances:
        reason, at = why[instance.pk]
        if instance.reservation_id not in first_end or at < first_end[instance.reservation_id][0]:
            first_end[instance.reservation_id] = (at, reason)
    changed_leases = []
    for lease in Reservation.objects.select_for_update().filter(pk__in=lease_ids):
        if lease.status not in (Status.PROVISIONING, Status.ACTIVE):
            continue
        # Ended outside the portal (L3): the lease ends with it.
        at, reason = first_end[lease.pk]
        lease.status, lease.end_reason, lease.ended_at = Status.ENDING, reason, at
        lease.status_message = Phrase(gettext_noop("The provider ended the instance."))
        changed_leases.append(lease)
        for other in lease.instances.select_for_update().exclude(pk__in=list(why)):
            stop_billing_and_terminate(other, reason=reason, at=at)
        notify(
            [lease.requester],
            subject=Phrase(
                gettext_noop("Ended by the provider: %(lease)s"), lease=lease_name(lease)
            ),
            link=lease.get_absolute_url(),
            event=Event.PREEMPTED,
            project=lease.project_id,
        )
    Reservation.objects.bulk_update(
        changed_leases, ["status", "end_reason", "ended_at", "status_message"]
    )
    unfinished = set(
        Instance.objects.filter(reservation_id__in=lease_ids)
        .exclude(state__in=GONE)
        .values_list("reservation_id", flat=True)
    )
    finished = []
    for lease in Reservation.objects.filter(pk__in=lease_ids - unfinished, status=Status.ENDING):
        lease.status = ended_status(lease.end_reason)
        finished.append(lease)
    Reservation.objects.bulk_update(finished, ["status"])
    gpu_models = set(
        Reservation.objects.filter(pk__in=lease_ids).values_list("gpu_model_id", flat=True)
    )
    for gpu_model_id in gpu_models:
        jobs.admit_queued_on_commit(gpu_model_id)
