"""Stop and resume (L9): an on-demand lease's instances stop with their disks kept.

Stopping closes the usage now (GPU billing stops) and the lease's GPUs leave the pool
(``stopped`` is not a holding status). Resuming is a new admission (Q2, Q4) for the time
left; when admitted, the same instances start on the same disks and the sync marks them
running, which opens a new usage interval.
"""

from collections import defaultdict
from datetime import datetime
from decimal import Decimal

from django.conf import settings
from django.db import transaction
from django.utils import timezone
from django.utils.translation import gettext as _
from django.utils.translation import gettext_noop

from portal import access, audit
from portal.errors import InvalidTransition, NotPermitted, QuotaExceeded
from portal.notifications import notify
from portal.phrases import Phrase
from rental import jobs
from rental.catalog import storage
from rental.catalog.capabilities import check_lease_can
from rental.fleet.cloud import provider_for
from rental.loans.admission import admission
from rental.loans.messages import lease_name
from rental.loans.standing import lock_pool
from rental.loans.usage import close_usage
from rental.models import Instance, Market, Reservation, TerminationReason
from rental.providers.base import Capability

Status = Reservation.Status
State = Instance.State


def _check_actor(actor, lease: Reservation) -> None:
    if not access.can_act_on_lease(actor, lease):
        raise NotPermitted(
            _(
                "Only the engineer who asked for this lease or a manager of %(project)s "
                "can stop or resume it."
            )
            % {"project": lease.project}
        )


@transaction.atomic
def stop_lease(
    *, actor, reservation: Reservation, now: datetime | None = None, source: str = "web"
) -> Reservation:

    now = now or timezone.now()
    _check_actor(actor, reservation)
    check_lease_can(reservation, Capability.STOP_START)  # 400: own servers never stop
    lease = Reservation.objects.select_for_update().get(pk=reservation.pk)
    if lease.status != Status.ACTIVE:
        raise InvalidTransition(_("Only an active lease can be stopped."))
    if lease.market != Market.ON_DEMAND:
        raise InvalidTransition(_("Spot leases cannot be stopped; end them instead."))
    instances = list(
        lease.instances.select_for_update().filter(state=State.RUNNING).select_related("offering")
    )
    for instance in instances:
        close_usage(instance, at=now, reason=TerminationReason.USER)
        instance.state = State.STOPPED
        instance.stopped_at = now
        instance.save(update_fields=["state", "stopped_at"])
    storage.open_disks(instances, project_id=lease.project_id, at=now)  # billed as storage (B8)
    lease.status = Status.STOPPED
    lease.status_message = Phrase(
        gettext_noop("Stopped; the disk is kept. Resume to start it again.")
    )
    lease.save()
    audit.record(
        actor=actor,
        verb="lease.stopped",
        obj=lease,
        project=lease.project_id,
        source=source,
        at=now,
        before={"status": Status.ACTIVE},
        after={"status": Status.STOPPED},
    )
    ids = [instance.pk for instance in instances]
    gpu_model_id = lease.gpu_model_id
    jobs.stop_on_commit(ids)
    jobs.admit_queued_on_commit(gpu_model_id)
    return lease


@transaction.atomic
def resume_lease(
    *, actor, reservation: Reservation, now: datetime | None = None, source: str = "web"
) -> Reservation:
    """Admit the stopped lease again for the time it has left; refused (409) with the
    admission's reason when there is no room, the lease staying stopped."""
    now = now or timezone.now()
    _check_actor(actor, reservation)
    pool = lock_pool(reservation.gpu_model_id)
    lease = Reservation.objects.select_for_update().get(pk=reservation.pk)
    if lease.status != Status.STOPPED:
        raise InvalidTransition(_("Only a stopped lease can be resumed."))
    if lease.end <= now:
        raise InvalidTransition(_("This lease has no time left; request a new one."))
    hours = max(Decimal((lease.end - now).total_seconds()) / 3600, Decimal("0.01"))
    decision = admission(
        pool=pool,
        project=lease.project_id,
        gpu_count=lease.gpu_count,
        hours=hours,
        priority=lease.priority,
        market=lease.market,
    )
    if decision.status != Status.PROVISIONING:
        raise QuotaExceeded(
            decision.message or _("There is no room to resume this lease now."),
            code=decision.code or "no_capacity",
        )
    lease.status = Status.PROVISIONING
    lease.tier = decision.tier
    lease.status_message = Phrase(gettext_noop("Resuming on the kept disk."))
    lease.save()
    instances = list(lease.instances.select_for_update().filter(state=State.STOPPED))
    for instance in instances:
        instance.state = State.LAUNCHING
        instance.claimed_at = now
        instance.provisioning_since = now
        instance.stopped_at = None
        instance.save(update_fields=["state", "claimed_at", "provisioning_since", "stopped_at"])
    storage.close_disks({instance.pk: now for instance in instances})
    audit.record(
        actor=actor,
        verb="lease.resumed",
        obj=lease,
        project=lease.project_id,
        source=source,
        at=now,
        before={"status": Status.STOPPED},
        after={"status": Status.PROVISIONING, "tier": lease.tier},
    )
    ids = [instance.pk for instance in instances]
    jobs.start_on_commit(ids)
    return lease


def _by_account_and_region(instance_ids: list[int]) -> dict:
    groups: dict = defaultdict(list)
    for instance in Instance.objects.filter(pk__in=instance_ids).exclude(external_id=""):
        groups[(instance.account_id, instance.region)].append(instance)
    return groups


def cloud_stop(instance_ids: list[int]) -> None:
    """The cloud side of a stop: one StopInstances per account and region."""
    for group in _by_account_and_region(instance_ids).values():
        provider_for(group[0]).stop([i.external_id for i in group], region=group[0].region)


def cloud_start(instance_ids: list[int]) -> None:
    """The cloud side of a resume: one StartInstances per account and region."""
    for group in _by_account_and_region(instance_ids).values():
        provider_for(group[0]).start([i.external_id for i in group], region=group[0].region)


@transaction.atomic
def end_stopped_lease(
    *,
    actor,
    reservation: Reservation,
    reason: str = TerminationReason.USER,
    now: datetime | None = None,
    source: str = "web",
) -> Reservation:
    """End a stopped lease: its instances (and their disks) are terminated. Nothing is
    billed for GPUs: the usage closed when it stopped."""

    now = now or timezone.now()
    if actor is not None:
        _check_actor(actor, reservation)
    lease = Reservation.objects.select_for_update().get(pk=reservation.pk)
    if lease.status != Status.STOPPED:
        raise InvalidTransition(_("Only a stopped lease can be ended this way."))
    lease.status = Status.ENDING
    lease.end_reason = reason
    lease.ended_at = now
    lease.save()
    for instance in lease.instances.select_for_update().filter(state=State.STOPPED):
        instance.state = State.STOPPING
        instance.termination_reason = reason
        instance.save(update_fields=["state", "termination_reason"])
        jobs.terminate_on_commit(instance.pk)
    audit.record(
        actor=actor,
        verb="lease.ended",
        obj=lease,
        project=lease.project_id,
        source=source if actor else "worker",
        at=now,
        before={"status": Status.STOPPED},
        after={"status": Status.ENDING, "reason": reason},
    )
    return lease


def expire_stopped_leases(*, now: datetime | None = None) -> tuple[int, int]:
    """L9 retention: a lease stopped for ``PORTAL_STOPPED_RETENTION_DAYS`` (15) is ended
    and its disk deleted; its requester is warned ``PORTAL_STOPPED_WARNING_DAYS`` (3)
    before. Returns (warned, ended)."""
    now = now or timezone.now()
    retention = timezone.timedelta(days=settings.PORTAL_STOPPED_RETENTION_DAYS)
    warning = timezone.timedelta(days=settings.PORTAL_STOPPED_WARNING_DAYS)
    stopped = Reservation.objects.filter(status=Status.STOPPED)
    ended = 0
    for lease in stopped.filter(instances__stopped_at__lte=now - retention).distinct():
        end_stopped_lease(
            actor=None, reservation=lease, reason=TerminationReason.LEASE_END, now=now
        )
        ended += 1
    warned = 0
    due = stopped.filter(instances__stopped_at__lte=now - retention + warning).exclude(
        status_code="stop_expiry_warned"
    )
    for lease in due.distinct():
        with transaction.atomic():
            claimed = (
                Reservation.objects.filter(pk=lease.pk, status=Status.STOPPED)
                .exclude(status_code="stop_expiry_warned")
                .update(status_code="stop_expiry_warned")
            )
            if claimed:
                notify(
                    [lease.requester],
                    subject=Phrase(
                        gettext_noop("Stopped lease %(lease)s will be deleted soon"),
                        lease=lease_name(lease),
                    ),
                    body=Phrase(
                        gettext_noop(
                            "It has been stopped for %(days)s days; its instance and disk are "
                            "deleted after %(retention)s days. Resume it to keep it."
                        ),
                        days=settings.PORTAL_STOPPED_RETENTION_DAYS
                        - settings.PORTAL_STOPPED_WARNING_DAYS,
                        retention=settings.PORTAL_STOPPED_RETENTION_DAYS,
                    ),
                    link=lease.get_absolute_url(),
                )
                warned += 1
    return warned, ended
