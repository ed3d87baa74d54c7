"""Ending leases: by their user, at their end, or by preemption at the end of a notice."""

from datetime import datetime

from django.db import transaction
from django.utils import timezone
from django.utils.translation import gettext as _

from portal import access, audit
from portal.errors import InvalidTransition, NotPermitted
from rental import jobs
from rental.loans.standing import lock_pool, pool_use
from rental.loans.usage import stop_billing_and_terminate
from rental.models import Instance, Reservation, TerminationReason

Status = Reservation.Status

# How a lease is called once the platform has finished ending it, by why it ended.
FINAL_STATUS_BY_REASON = {
    TerminationReason.IDLE: Status.REAPED,
    TerminationReason.PREEMPTED: Status.PREEMPTED,
    TerminationReason.SPOT_INTERRUPTED: Status.PREEMPTED,
    TerminationReason.FAILED: Status.FAILED,
}

# A lease that has not started: withdrawing it is a cancellation.
WAITING = (Status.PENDING_APPROVAL, Status.QUEUED, Status.SCHEDULED)

# An instance in these states holds nothing in the cloud any more.
GONE = (Instance.State.TERMINATED, Instance.State.FAILED)


def ended_status(end_reason: str) -> str:
    """What a lease is called once the platform has finished ending it."""
    return FINAL_STATUS_BY_REASON.get(end_reason, Status.ENDED)


def end_locked(reservation: Reservation, *, reason: str, at: datetime) -> str:
    """Within the caller's transaction, ``reservation`` locked: a waiting lease is
    cancelled; a running one's usage closes at ``at`` and its instances are terminated
    by the worker. Returns the status it had. Raises InvalidTransition when it is over."""
    before = reservation.status
    if reservation.status in WAITING:
        reservation.status = Status.CANCELLED
        reservation.ended_at = at
        reservation.end_reason = reason
        reservation.reclaim_due_at = None
        reservation.save(
            update_fields=["status", "ended_at", "end_reason", "reclaim_due_at", "updated_at"]
        )
        call_off_notices(reservation)
    elif reservation.status in (Status.PROVISIONING, Status.ACTIVE):
        reservation.end_reason = reason
        reservation.ended_at = at
        instances = list(reservation.instances.select_for_update())
        for instance in instances:
            stop_billing_and_terminate(instance, reason=reason, at=at)
        # Ending until the cloud confirms each instance gone; at once when none had
        # launched (one write either way, the lease row locked throughout).
        up = any(instance.state not in GONE for instance in instances)
        reservation.status = Status.ENDING if up else ended_status(reason)
        reservation.save(update_fields=["status", "end_reason", "ended_at", "updated_at"])
    else:
        raise InvalidTransition(
            _("This lease is %(status)s and cannot be ended.")
            % {"status": reservation.get_status_display().lower()}
        )
    return before


def call_off_notices(claimer: Reservation) -> None:
    """A waiting lease was withdrawn: its victims' notices are called off, except those
    other waiting leases still count on. A notice frees GPUs for every claim in the pool,
    not only its own claimer's (a later claim may have been admitted on what a notice
    freed beyond its claimer's need), so a notice is called off only while the claims
    left still fit: running + max(claimed − noticed, 0) ≤ C (Q8). The biggest go first;
    a kept notice ends as told."""
    victims = list(
        Reservation.objects.select_for_update()
        .filter(preempted_for=claimer, status__in=(Status.PROVISIONING, Status.ACTIVE))
        .order_by("-gpu_count", "pk")
    )
    if not victims:
        return
    use = pool_use(lock_pool(claimer.gpu_model_id))  # the claimer is already not claiming
    noticed, called_off = use.noticed, []
    for victim in victims:
        if use.running + max(use.claimed - (noticed - victim.gpu_count), 0) <= use.capacity:
            noticed -= victim.gpu_count
            called_off.append(victim.pk)
    Reservation.objects.filter(pk__in=called_off).update(
        notice_due_at=None, preempted_for=None, status_code="", status_message=""
    )


@transaction.atomic
def end_reservation(
    *,
    actor,
    reservation: Reservation,
    reason: str = TerminationReason.USER,
    now: datetime | None = None,
    source: str = "web",
) -> Reservation:
    """End a lease: a waiting one is cancelled; a running one's usage closes at ``now`` and
    its instances are terminated by the worker. Ending twice is refused, never billed twice."""
    if actor is not None and not access.can_act_on_lease(actor, reservation):
        raise NotPermitted(
            _("Only the engineer who asked for this lease or a manager of %(project)s can end it.")
            % {"project": reservation.project}
        )
    now = now or timezone.now()
    if reservation.status in WAITING:
        # Withdrawing a claim changes the pool's standing (call_off_notices): lock the
        # pool before the row, in the order every admission takes them.
        lock_pool(reservation.gpu_model_id)
    reservation = Reservation.objects.select_for_update().get(pk=reservation.pk)
    before = end_locked(reservation, reason=reason, at=now)
    audit.record(
        actor=actor,
        verb="lease.ended",
        obj=reservation,
        project=reservation.project_id,
        source=source if actor else "worker",
        at=now,
        before={"status": before},
        after={"status": reservation.status, "reason": reason},
    )
    jobs.admit_queued_on_commit(reservation.gpu_model_id)
    return reservation


@transaction.atomic
def cancel_reservation(
    *,
    actor,
    reservation: Reservation,
    now: datetime | None = None,
    source: str = "web",
) -> Reservation:
    """Withdraw a request that has not started (waiting for approval, queued or booked
    ahead; free before the start, R3). A lease that runs is refused: it is ended, not
    cancelled, so a script that meant to withdraw a request never ends running work."""
    if not access.can_act_on_lease(actor, reservation):
        raise NotPermitted(
            _(
                "Only the engineer who asked for this lease or a manager of %(project)s "
                "can cancel it."
            )
            % {"project": reservation.project}
        )
    locked = Reservation.objects.select_for_update().get(pk=reservation.pk)
    if locked.status not in WAITING:
        raise InvalidTransition(
            _("This lease is %(status)s; only a request that has not started can be cancelled.")
            % {"status": locked.get_status_display().lower()},
            code="not_cancellable",
        )
    return end_reservation(actor=actor, reservation=locked, now=now, source=source)


def end_expired_leases(*, now: datetime | None = None) -> int:
    """End every running lease whose time is up; usage closes at the lease's end, not now."""
    now = now or timezone.now()
    due = Reservation.objects.filter(
        status__in=(Status.PROVISIONING, Status.ACTIVE), end__lte=now
    ).values_list("pk", flat=True)
    ended = 0
    for pk in list(due):
        reservation = Reservation.objects.get(pk=pk)
        try:
            end_reservation(
                actor=None,
                reservation=reservation,
                reason=TerminationReason.LEASE_END,
                now=min(reservation.end, now),
                source="worker",
            )
        except InvalidTransition:
            continue  # ended meanwhile by someone else
        ended += 1
    return ended
