"""The due-time sweep: bookings starting, victims whose notice is over, leases whose
reclaim completes, then the pool's queue (Q6-Q8, R4). The due times are rows
(``notice_due_at`` on victims, ``reclaim_due_at`` on the lease waiting for them,
``start`` on bookings), so a worker restart loses nothing: ``process_due`` finds every
row whose time has come and acts as of that row's due time, to the second.

It sits above ``reclaim``, ``reservations`` and ``queue``, which it orchestrates, so none
of them needs to import another lazily.
"""

from datetime import datetime

from django.db import transaction
from django.db.models import Q
from django.utils import timezone

from portal import audit
from portal.errors import QuotaExceeded
from rental.loans import ending, messages, queue, reclaim, reservations
from rental.loans.admission_checks import HELD_PREFIX
from rental.loans.placement import apply_decision
from rental.loans.standing import CLAIMING, NOTICED, lock_pool, read_standing
from rental.models import Pool, Reservation, TerminationReason

Status = Reservation.Status


def process_due(*, now: datetime | None = None) -> int:
    """End every victim whose notice is over and start what waited for it; returns how many
    rows were due. Safe to run often and twice: each row is claimed under the pool lock."""
    now = now or timezone.now()
    due = Reservation.objects.filter(
        (NOTICED & Q(notice_due_at__lte=now))
        | (CLAIMING & Q(reclaim_due_at__lte=now))
        | reservations.starting_soon(now)
        # Leases an admission check holds back are asked again on every sweep: the
        # check's answer changes without any event in the pool (a budget raised).
        | Q(status=Status.QUEUED, status_code__startswith=HELD_PREFIX)
    )
    done = 0
    for gpu_model_id in sorted(set(due.values_list("gpu_model_id", flat=True))):
        done += process_pool_due(gpu_model_id=gpu_model_id, now=now)
    return done


@transaction.atomic
def process_pool_due(*, gpu_model_id: int, now: datetime) -> int:
    """One pool's due rows, under its lock. What time has already settled comes first: a
    sweep that runs late (a worker down for an hour) ends the notices that are over and
    starts the leases that waited for them before any booking looks for victims, so a
    booking sees those leases as running (and, if burst or spot, as takeable) instead of
    as claims on GPUs nobody may touch. The victims a late booking tells are due at once
    (no notice is left before its start), so they are settled again after it."""
    pool = lock_pool(gpu_model_id)
    done = settle(pool, now=now)
    starting = Reservation.objects.select_for_update().filter(
        reservations.starting_soon(now), gpu_model_id=gpu_model_id
    )
    for lease in starting.order_by("start", "pk"):
        reservations.begin(pool=pool, lease=lease, now=now)
        done += 1
    done += settle(pool, now=now)
    queue.admit_in_pool(pool, now=now)
    return done


def settle(pool: Pool, *, now: datetime) -> int:
    """End the pool's victims whose notice is over and start the leases waiting for them,
    each as of its own due time; returns how many rows it acted on."""
    gpu_model_id = pool.gpu_model_id
    done = 0
    victims = Reservation.objects.select_for_update().filter(
        NOTICED, gpu_model_id=gpu_model_id, notice_due_at__lte=now
    )
    for victim in victims.order_by("notice_due_at", "pk"):
        at = victim.notice_due_at
        ending.end_locked(victim, reason=TerminationReason.PREEMPTED, at=at)
        audit.record(
            actor=None,
            verb="lease.ended",
            obj=victim,
            project=victim.project_id,
            source="worker",
            at=at,
            after={"status": victim.status, "reason": TerminationReason.PREEMPTED},
        )
        if victim.requeue_on_preemption:
            reclaim.requeue(victim=victim, at=at)
        done += 1
    waiting = Reservation.objects.select_for_update().filter(
        CLAIMING, gpu_model_id=gpu_model_id, reclaim_due_at__lte=now
    )
    for lease in waiting.order_by("reclaim_due_at", "pk"):
        at = lease.reclaim_due_at
        lease.reclaim_due_at = None
        lease.save(update_fields=["reclaim_due_at"])
        if lease.is_reservation:
            reservations.start(pool=pool, lease=lease, at=at)
            done += 1
            continue
        standing = read_standing(pool, lease.project_id, priority=lease.priority)
        try:
            # Decided again, it may now fit the guarantee: only where that leaves its
            # project's bookings their room (R2), as in the queue. It was stored as it
            # will run (reclaim_for), so its window is [start, end).
            decision = reservations.decide_waiting(
                pool, standing, lease, start=lease.start, end=lease.end
            )
        except QuotaExceeded:
            continue
        apply_decision(lease, decision, now=at)
        if lease.status == Status.PROVISIONING:
            audit.record(
                actor=None,
                verb="lease.admitted",
                obj=lease,
                project=lease.project_id,
                source="worker",
                at=at,
                after={"tier": lease.tier, "after_reclaim": True},
            )
            messages.starting(lease)
        done += 1
    return done
