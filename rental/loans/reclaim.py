"""Reclaim services: preempt victims with notice, end them when it runs out, re-queue
them, and start the lease that needed the GPUs (Q6, Q7, Q8). When the notices run out
is ``due.py``'s sweep.
"""

from datetime import datetime, timedelta

from django.conf import settings
from django.utils.translation import gettext_noop

from portal import audit
from portal.phrases import Phrase
from rental import jobs
from rental.loans import messages
from rental.loans.admission_rules import Standing
from rental.loans.reclaim_rules import (
    BURST,
    GUARANTEED,
    RESERVED,
    Candidate,
    choose_victims,
)
from rental.models import Pool, Reservation, Tier

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
    # What the project counts against L must fit it once the victims are gone (Q2): the
    # decision let the lease claim only GPUs its own lower-priority leases can give back.
    over = (
        standing.used + lease.gpu_count - standing.ceiling
        if lease.tier == Tier.GUARANTEED and lease.approved_at is None
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
        ceiling_short=over,
    )
    if not victims:
        return False
    due = now + timedelta(seconds=notice_seconds())
    figures = {
        "need": lease.gpu_count,
        "free": standing.free,
        "guarantee_short": max(short, 0),
        "ceiling_short": max(over, 0),
    }
    for victim in Reservation.objects.select_for_update().filter(
        pk__in=[v.id for v in victims], notice_due_at__isnull=True
    ):
        preempt(victim=victim, needed_by=lease, now=now, due=due, figures=figures)
    lease.reclaim_due_at = due
    if not lease.is_reservation:
        # It starts when the notice is over and keeps its length (its window was checked
        # against L up to a notice past it, ceiling.queued_window): stored as it will run,
        # so that what is checked beside it meanwhile counts it where it will be.
        length = lease.end - lease.start
        lease.start, lease.end = due, due + length
    lease.status_code = "reclaiming"
    lease.status_message = Phrase(
        gettext_noop(
            "Taking %(n)s GPUs back from %(count)s lower-ranked leases; starts at %(due)s UTC."
        ),
        n=sum(v.gpus for v in victims),
        count=len(victims),
        due=due,
    )
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
    victim.status_message = Phrase(
        gettext_noop(
            "Preempted: lease #%(lease)s of %(project)s needs %(n)s GPUs in tier %(tier)s. "
            "This lease ends at %(due)s UTC."
        ),
        lease=needed_by.pk,
        project=needed_by.project.name,
        n=needed_by.gpu_count,
        tier=messages.tier_word(needed_by.tier),
        due=due,
    )
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
        status_message=Phrase(
            gettext_noop("Preempted and queued again with its original submission time.")
        ),
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
