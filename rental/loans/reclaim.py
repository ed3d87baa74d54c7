"""Reclaim services: preempt victims with notice, end them when it runs out, re-queue
them, and start the lease that needed the GPUs (Q6, Q7, Q8).

The due times are rows (``notice_due_at`` on victims, ``reclaim_due_at`` on the lease
waiting for them), so a worker restart loses nothing: ``process_due`` finds every
row whose time has come, and acts as of that row's due time, to the second.
"""

from datetime import datetime, timedelta

from django.conf import settings
from django.db import transaction
from django.db.models import Q
from django.utils import timezone
from django.utils.translation import gettext as _

from portal import audit
from portal.errors import QuotaExceeded
from rental import jobs
from rental.loans import messages, reservations
from rental.loans.admission_checks import HELD_PREFIX
from rental.loans.admission_rules import Standing, decide
from rental.loans.ending import end_locked
from rental.loans.placement import apply_decision
from rental.loans.reclaim_rules import (
    BURST,
    GUARANTEED,
    RESERVED,
    Candidate,
    choose_victims,
)
from rental.loans.standing import CLAIMING, NOTICED, lock_pool, read_standing
from rental.models import Pool, Reservation, TerminationReason, Tier

Status = Reservation.Status

MODE_BY_TIER = {Tier.GUARANTEED: GUARANTEED, Tier.BURST: BURST, Tier.RESERVED: RESERVED}


def notice_seconds() -> int:
    return settings.PORTAL_PREEMPTION_NOTICE_SECONDS


def candidates(pool: Pool, *, exclude: int) -> list[Candidate]:
    rows = (
        Reservation.objects.filter(
            gpu_model_id=pool.gpu_model_id,
            status__in=(Status.PROVISIONING, Status.ACTIVE),
            notice_due_at__isnull=True,
        )
        .exclude(pk=exclude)
        .values_list("pk", "project_id", "gpu_count", "tier", "market", "priority", "start")
    )
    return [Candidate(*row) for row in rows]


def reclaim_for(*, pool: Pool, lease: Reservation, standing: Standing, now: datetime) -> bool:
    """Within the caller's transaction, pool locked: take GPUs back for a queued ``lease``
    (Q6 for a guaranteed one, Q7 for a burst one, R4 for a reservation). The victims are
    told now and ended at now + notice; ``lease`` starts then. False when no set of
    victims would make room (the lease keeps waiting)."""
    mode = MODE_BY_TIER.get(lease.tier)
    if mode is None:
        return False
    short = (
        standing.used_guaranteed + lease.gpu_count - standing.guaranteed
        if lease.tier == Tier.GUARANTEED
        else 0
    )
    victims = choose_victims(
        candidates(pool, exclude=lease.pk),
        need=lease.gpu_count,
        free=standing.free,
        project_id=lease.project_id,
        priority=lease.priority,
        mode=mode,
        guarantee_short=short,
    )
    if not victims:
        return False
    due = now + timedelta(seconds=notice_seconds())
    figures = {"need": lease.gpu_count, "free": standing.free, "guarantee_short": max(short, 0)}
    for victim in Reservation.objects.select_for_update().filter(
        pk__in=[v.id for v in victims], notice_due_at__isnull=True
    ):
        preempt(victim=victim, needed_by=lease, now=now, due=due, figures=figures)
    lease.reclaim_due_at = due
    lease.status_code = "reclaiming"
    lease.status_message = _(
        "Taking %(n)s GPUs back from %(count)s lower-ranked leases; starts at %(due)s UTC."
    ) % {
        "n": sum(v.gpus for v in victims),
        "count": len(victims),
        "due": due.strftime("%Y-%m-%d %H:%M:%S"),
    }
    lease.save()
    jobs.process_due_at(due)
    return True


def preempt(
    *,
    victim: Reservation,
    needed_by: Reservation,
    now: datetime,
    due: datetime,
    figures: dict[str, int] | None = None,
) -> None:
    """Tell a victim at T that it ends at T + notice (Q8); its GPUs count as used until then.
    ``figures`` (GPUs needed, free in the pool, missing from the guarantee when the victims
    were chosen) go into the audit event, so every preemption can be checked afterwards."""
    victim.notice_due_at = due
    victim.preempted_for = needed_by
    victim.status_code = "preempting"
    victim.status_message = _(
        "Preempted: lease #%(lease)s of %(project)s needs %(n)s GPUs in tier %(tier)s. "
        "This lease ends at %(due)s UTC."
    ) % {
        "lease": needed_by.pk,
        "project": needed_by.project,
        "n": needed_by.gpu_count,
        "tier": needed_by.get_tier_display().lower(),
        "due": due.strftime("%Y-%m-%d %H:%M:%S"),
    }
    victim.save()
    audit.record(
        actor=None,
        verb="lease.preempted",
        obj=victim,
        project=victim.project_id,
        source="worker",
        at=now,
        after={
            "needed_by": needed_by.pk,
            "ends_at": due.isoformat(),
            "tier": victim.tier,
            **(figures or {}),
        },
    )
    messages.preempted(victim, needed_by=needed_by, due=due)


def requeue(*, victim: Reservation, at: datetime) -> Reservation | None:
    """A preempted lease whose requester asked for it waits again with its original
    submission time (Q8), for the time it had left."""
    left = victim.end - at
    if left < timedelta(seconds=1):
        return None
    again = Reservation.objects.create(
        project_id=victim.project_id,
        requester_id=victim.requester_id,
        gpu_model_id=victim.gpu_model_id,
        gpu_count=victim.gpu_count,
        offering_id=victim.offering_id,
        instance_count=victim.instance_count,
        market=victim.market,
        priority=victim.priority,
        image_id=victim.image_id,
        purpose=victim.purpose,
        start=at,
        end=at + left,
        submitted_at=victim.submitted_at,
        requeue_on_preemption=victim.requeue_on_preemption,
        approved_by_id=victim.approved_by_id,
        approved_at=victim.approved_at,
        requeued_from=victim,
        status=Status.QUEUED,
        tier=victim.tier,
        status_code="requeued",
        status_message=_("Preempted and queued again with its original submission time."),
    )
    audit.record(
        actor=None,
        verb="lease.requeued",
        obj=again,
        project=again.project_id,
        source="worker",
        at=at,
        after={"from": victim.pk, "submitted_at": victim.submitted_at.isoformat()},
    )
    messages.requeued(again)
    return again


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
    from rental.loans.queue import admit_in_pool

    pool = lock_pool(gpu_model_id)
    done = 0
    starting = Reservation.objects.select_for_update().filter(
        reservations.starting_soon(now), gpu_model_id=gpu_model_id
    )
    for lease in starting.order_by("start", "pk"):
        reservations.begin(pool=pool, lease=lease, now=now)
        done += 1
    victims = Reservation.objects.select_for_update().filter(
        NOTICED, gpu_model_id=gpu_model_id, notice_due_at__lte=now
    )
    for victim in victims.order_by("notice_due_at", "pk"):
        at = victim.notice_due_at
        end_locked(victim, reason=TerminationReason.PREEMPTED, at=at)
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
            requeue(victim=victim, at=at)
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
        try:
            decision = decide(
                read_standing(pool, lease.project_id, priority=lease.priority),
                gpu_count=lease.gpu_count,
                priority=lease.priority,
                market=lease.market,
                approved=lease.approved_at is not None,
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
    admit_in_pool(pool, now=now)
    return done
