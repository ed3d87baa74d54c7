"""Spot interruption seen early (L7): the agent relays the instance metadata's notice.

The lease becomes preempted (reason spot_interrupted) and its usage closes at the
announced interruption; the instance is terminated at that moment, not before, so the
engineer keeps the two minutes to save a checkpoint. With automatic retry asked for, the
remaining time is requested again.
"""

import logging
from datetime import datetime, timedelta
from decimal import Decimal

from django.conf import settings
from django.db import transaction
from django.utils.translation import gettext_noop

from portal import audit
from portal.errors import DomainError
from portal.notifications import Event, notify
from portal.phrases import Phrase, Text, sentences
from rental import jobs
from rental.loans.admission import submit_reservation
from rental.loans.messages import lease_name
from rental.loans.usage import close_usage
from rental.models import Instance, Market, Reservation, TerminationReason

logger = logging.getLogger(__name__)
Status = Reservation.Status


def interruption_at(notice: dict, *, now: datetime) -> datetime:
    """The announced moment, never in the past and never later than the notice period."""
    latest = now + timedelta(seconds=settings.PORTAL_PREEMPTION_NOTICE_SECONDS)
    return min(max(notice.get("time") or now, now), latest)


def interruption_notice(*, instance: Instance, notice: dict, now: datetime) -> bool:
    """Within the caller's transaction. Returns whether the lease was preempted by it."""

    if instance.market != Market.SPOT or notice.get("action") not in ("terminate", "stop"):
        return False
    lease = Reservation.objects.select_for_update().get(pk=instance.reservation_id)
    if lease.status not in (Status.PROVISIONING, Status.ACTIVE):
        return False
    at = interruption_at(notice, now=now)
    reason = TerminationReason.SPOT_INTERRUPTED
    lease.status = Status.ENDING
    lease.end_reason = reason
    lease.ended_at = at
    lease.status_message = Phrase(gettext_noop("The cloud reclaimed the spot capacity."))
    lease.save()
    for each in lease.instances.select_for_update():
        if each.state in (Instance.State.LAUNCHING, Instance.State.RUNNING):
            close_usage(each, at=at, reason=reason)
            each.state = Instance.State.STOPPING
            each.termination_reason = reason
            each.save(update_fields=["state", "termination_reason"])
            _terminate_at(each.pk, at)
    audit.record(
        actor=None,
        verb="lease.spot_interrupted",
        obj=lease,
        project=lease.project_id,
        source="api",
        at=now,
        after={"interruption_at": at.isoformat()},
    )
    body: Text = Phrase(
        gettext_noop("Spot interruption announced for %(at)s UTC; save your work now."), at=at
    )
    retry = _requeue(lease, now=now) if lease.requeue_on_preemption else None
    if retry is not None:
        body = sentences(body, asks_again(retry))
    notify(
        [lease.requester],
        subject=Phrase(gettext_noop("Spot interruption: %(lease)s"), lease=lease_name(lease)),
        body=body,
        link=lease.get_absolute_url(),
        event=Event.PREEMPTED,
        project=lease.project_id,
    )
    return True


def _terminate_at(instance_id: int, at: datetime) -> None:
    # Noted at the notice's end, so that the sweep never sends it before (recovery.py).
    Instance.objects.filter(pk=instance_id).update(terminate_sent_at=at)
    jobs.terminate_on_commit(instance_id, eta=at)


def asks_again(retry: Reservation) -> Phrase:
    return Phrase(gettext_noop("Lease #%(id)s asks for the remaining time again."), id=retry.pk)


def _requeue(lease: Reservation, *, now: datetime) -> Reservation | None:
    hours = Decimal((lease.end - now).total_seconds()) / 3600
    if hours <= 0:
        return None
    try:
        with transaction.atomic():
            return submit_reservation(
                actor=lease.requester,
                project=lease.project,
                gpu_model=lease.gpu_model,
                gpu_count=lease.gpu_count,
                duration_hours=max(Decimal("0.01"), hours.quantize(Decimal("0.01"))),
                priority=lease.priority,
                market=lease.market,
                offering=lease.offering,
                image=lease.image,
                purpose=lease.purpose,
                requeue_on_preemption=True,
                now=now,
                source="api",
            )
    except DomainError as error:
        logger.info("re-queueing lease %s refused: %s", lease.pk, error.code)
        return None


SPOT_REASON_MARKERS = ("spotinstancetermination", "spot instance", "spot interruption")


def reason_from_cloud(instance: Instance, state_reason: str) -> str:
    """The termination reason the sync records for an instance the cloud ended: a spot
    instance whose state reason names a spot termination was interrupted; otherwise ""
    (the provider ended it)."""
    text = (state_reason or "").lower()
    if instance.market == Market.SPOT and any(m in text for m in SPOT_REASON_MARKERS):
        return TerminationReason.SPOT_INTERRUPTED
    return ""


def after_sync_interruption(*, instance_id: int, now: datetime) -> None:
    """Within the sync's transaction, after the interrupted instance was marked
    terminated: re-queue the lease's remaining time when its requester asked for it.
    Runs once: the sync never looks at a terminated instance again."""
    instance = Instance.objects.select_related("reservation").get(pk=instance_id)
    lease = instance.reservation
    if instance.termination_reason != TerminationReason.SPOT_INTERRUPTED:
        return
    if not lease.requeue_on_preemption or lease.status not in (Status.ENDING, Status.PREEMPTED):
        return
    retry = _requeue(lease, now=now)
    if retry is not None:
        notify(
            [lease.requester],
            subject=Phrase(gettext_noop("Spot interruption: %(lease)s"), lease=lease_name(lease)),
            body=asks_again(retry),
            link=retry.get_absolute_url(),
            event=Event.PREEMPTED,
            project=lease.project_id,
        )
