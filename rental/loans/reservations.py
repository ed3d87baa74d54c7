"""Reservation services: book GPUs ahead (R1, R2), move or resize a booking, and start it
at start − notice by telling the victims it needs (R4). Cancelling before the start is
free (R3): ``end_reservation`` cancels a scheduled lease.

Each writer locks the pool row, reads the bookings with one query, decides with the pure
sweep of ``reservation_rules.py`` and writes; a refusal writes nothing.
"""

from collections import defaultdict
from dataclasses import replace
from datetime import datetime, timedelta
from decimal import Decimal

from django.conf import settings
from django.db import transaction
from django.db.models import Q
from django.utils import timezone
from django.utils.translation import gettext as _
from django.utils.translation import gettext_noop

from portal import access, audit
from portal.errors import Conflict, InvalidInput, InvalidTransition, NotPermitted, QuotaExceeded
from portal.models import Project
from portal.phrases import Phrase
from rental import jobs, selectors
from rental.loans import messages
from rental.loans.admission_rules import Decision, Standing, decide
from rental.loans.ceiling import ceiling_conflict, over_ceiling_figures, over_ceiling_message
from rental.loans.placement import apply_decision
from rental.loans.reclaim import candidates, preempt
from rental.loans.reclaim_rules import RESERVED, choose_victims
from rental.loans.reservation_rules import (
    Booking,
    added_conflict,
    first_conflict,
    span_text,
)
from rental.loans.standing import (
    BOOKED,
    CLAIMING,
    lock_pool,
    read_standing,
)
from rental.loans.validation import cheapest_offering
from rental.models import GpuModel, Market, Pool, Priority, Quota, Reservation, Tier

Status = Reservation.Status


def notice() -> timedelta:
    return timedelta(seconds=settings.PORTAL_PREEMPTION_NOTICE_SECONDS)


def validate_window(*, start: datetime, end: datetime, market: str, now: datetime) -> None:
    """R1 for a booking: its dates (``validate_dates``), and on-demand."""
    validate_dates(start=start, end=end, now=now)
    if market == Market.SPOT:
        raise InvalidInput(
            _("Spot capacity cannot be booked ahead; choose on-demand or start now."),
            code="spot_not_bookable",
            field="market",
        )


def validate_dates(*, start: datetime, end: datetime, now: datetime) -> None:
    """R1 for the dates: the start is not past, the end after it, within the maximum."""
    if start < now:
        raise Conflict(_("The start is in the past."), code="start_in_past", field="start")
    if end <= start:
        raise InvalidInput(_("The end must be after the start."), field="duration_hours")
    if end - start > timedelta(hours=settings.PORTAL_MAX_LEASE_HOURS):
        raise Conflict(
            _("A lease may last at most %(max)s hours.") % {"max": settings.PORTAL_MAX_LEASE_HOURS},
            code="over_max_lease",
            field="duration_hours",
        )


def window_end(start: datetime, seconds: int) -> datetime:
    """``start`` + ``seconds``, or a field error when that is past the last time a date
    can hold (a start typed in year 9999)."""
    try:
        return start + timedelta(seconds=seconds)
    except OverflowError:
        raise InvalidInput(
            _("The start is too far ahead."), code="start_too_far", field="start"
        ) from None


# Leases admitted now that count in their project's E(t) until they end: the tiers
# nobody may take back, running or about to run on GPUs being freed for them. A lease
# under notice no longer counts: its GPUs go to the lease that preempted it.
KEPT = Q(tier__in=(Tier.GUARANTEED, Tier.RESERVED), is_reservation=False) & (
    Q(status__in=(Status.PROVISIONING, Status.ACTIVE), notice_due_at__isnull=True) | CLAIMING
)


def bookings(pool: Pool | int, *, exclude: int | None = None) -> list[Booking]:
    """What counts in the projects' E(t): every booking, and every lease admitted now in
    a tier nobody may take back, over its window."""
    gpu_model_id = pool if isinstance(pool, int) else pool.gpu_model_id
    rows = Reservation.objects.filter(
        Q(is_reservation=True, status__in=BOOKED) | KEPT, gpu_model_id=gpu_model_id
    )
    if exclude is not None:
        rows = rows.exclude(pk=exclude)  # an update does not count its own old window
    return [Booking(*row) for row in rows.values_list("project_id", "gpu_count", "start", "end")]


def guarantees(pool: Pool | int) -> dict[int, int]:
    gpu_model_id = pool if isinstance(pool, int) else pool.gpu_model_id
    return dict(
        Quota.objects.filter(gpu_model_id=gpu_model_id).values_list("project_id", "guaranteed")
    )


def check_window(
    pool: Pool,
    *,
    project_id: int,
    gpus: int,
    start: datetime,
    end: datetime,
    exclude: int | None = None,
    field: str = "start",
) -> None:
    """R2 under the pool lock: refuse with the conflicting interval and its figures, on
    ``field`` (a booking's ``start``; an extension's ``hours``, the longer window)."""
    booked = [*bookings(pool, exclude=exclude), Booking(project_id, gpus, start, end)]
    conflict = first_conflict(
        booked, guarantees(pool), capacity=pool.capacity, window_start=start, window_end=end
    )
    if conflict is not None:
        raise QuotaExceeded(
            _(
                "No room for this booking: %(span)s would need %(needed)s of %(capacity)s GPUs "
                "(each project counts the larger of its guarantee and its bookings, R2)."
            )
            % {
                "span": span_text(conflict),
                "needed": conflict.needed,
                "capacity": conflict.capacity,
            },
            code="reservation_conflict",
            field=field,
            figures={
                "needed": conflict.needed,
                "capacity": conflict.capacity,
                "from": conflict.start.isoformat(),
                "until": conflict.end.isoformat(),
            },
        )


def check_beside_bookings(
    pool: Pool,
    *,
    project_id: int,
    gpus: int,
    start: datetime,
    end: datetime,
    exclude: int | None = None,
    field: str = "duration_hours",
) -> None:
    """A lease admitted now in a tier nobody may take back (guaranteed), or a running one
    extended, must leave every booking its room at its start (R2, R4): refused with the
    interval and its figures where it would raise Σ E(t) above C. Only its own project's
    bookings can make that happen."""
    conflict = added_conflict(
        bookings(pool, exclude=exclude),
        guarantees(pool),
        capacity=pool.capacity,
        added=Booking(project_id, gpus, start, end),
    )
    if conflict is not None:
        raise QuotaExceeded(
            Phrase(
                gettext_noop(
                    "The project's bookings hold its guarantee then: %(span)s would need "
                    "%(needed)s of %(capacity)s GPUs (R2)."
                ),
                span=span_text(conflict),
                needed=conflict.needed,
                capacity=conflict.capacity,
            ),
            code="guarantee_booked",
            field=field,
            figures={"needed": conflict.needed, "capacity": conflict.capacity},
        )


def keep_bookings(
    pool: Pool,
    decision: Decision,
    standing: Standing,
    *,
    project_id: int,
    gpus: int,
    priority: str,
    market: str,
    start: datetime,
    end: datetime,
    approved: bool = False,
    booked: bool | None = None,
) -> Decision:
    """A lease admitted now runs guaranteed only where that leaves its project's bookings
    their room (R2, R4). Where it would not, a non-production lease runs as burst, which
    R4 takes back at the booking's start; a production one (never burst) is refused.
    ``booked``: whether the project has bookings in the window, when already read."""
    if decision.tier != Tier.GUARANTEED or decision.status not in (
        Status.PROVISIONING,
        Status.QUEUED,
    ):
        return decision
    if booked is None:
        booked = booked_between(project_id, pool.gpu_model_id, start, end)
    if not booked:
        return decision
    try:
        check_beside_bookings(pool, project_id=project_id, gpus=gpus, start=start, end=end)
    except QuotaExceeded as refused:
        if priority == Priority.PRODUCTION:
            raise QuotaExceeded(
                Phrase(
                    gettext_noop(
                        "Production leases run only within the project's guarantee. %(why)s"
                    ),
                    why=refused.text,
                ),
                code="guarantee_booked",
                field="priority",
                figures=refused.figures,
            ) from None
        no_room_in_guarantee = replace(
            standing, guaranteed=min(standing.guaranteed, standing.used_guaranteed), displaceable=0
        )
        burst = decide(
            no_room_in_guarantee,
            gpu_count=gpus,
            priority=priority,
            market=market,
            approved=approved,
        )
        return replace(
            burst,
            message=burst.message
            or Phrase(gettext_noop("Runs as burst. %(why)s"), why=refused.text),
        )
    return decision


def decide_waiting(
    pool: Pool,
    standing: Standing,
    lease: Reservation,
    *,
    start: datetime,
    end: datetime,
    booked: bool | None = None,
) -> Decision:
    """A waiting lease decided again (the queue, a claim whose notice is over): Q2, then
    beside its project's bookings over [start, end) (R2). Raises QuotaExceeded."""
    approved = lease.approved_at is not None
    decision = decide(
        standing,
        gpu_count=lease.gpu_count,
        priority=lease.priority,
        market=lease.market,
        approved=approved,
    )
    return keep_bookings(
        pool,
        decision,
        standing,
        project_id=lease.project_id,
        gpus=lease.gpu_count,
        priority=lease.priority,
        market=lease.market,
        start=start,
        end=end,
        approved=approved,
        booked=booked,
    )


def booked_windows(gpu_model_id: int) -> dict[int, list[tuple[datetime, datetime]]]:
    """Every project's bookings in the pool as windows, in one read: for a pass that asks
    ``booked_between`` of many leases (the queue)."""
    windows: dict[int, list[tuple[datetime, datetime]]] = defaultdict(list)
    rows = Reservation.objects.filter(
        gpu_model_id=gpu_model_id, is_reservation=True, status__in=BOOKED
    ).values_list("project_id", "start", "end")
    for project_id, start, end in rows:
        windows[project_id].append((start, end))
    return windows


def overlaps(windows: list[tuple[datetime, datetime]], start: datetime, end: datetime) -> bool:
    """Whether one of ``windows`` overlaps [start, end)."""
    return any(begins < end and ends > start for begins, ends in windows)


def booked_between(project_id: int, gpu_model_id: int, start: datetime, end: datetime) -> bool:
    """Whether the project has a booking overlapping [start, end)."""
    return Reservation.objects.filter(
        project_id=project_id,
        gpu_model_id=gpu_model_id,
        is_reservation=True,
        status__in=BOOKED,
        start__lt=end,
        end__gt=start,
    ).exists()


def preview_booking(
    *,
    project: Project,
    gpu_model: GpuModel,
    gpu_count: int,
    market: str,
    start: datetime,
    hours: Decimal | None,
    now: datetime | None = None,
) -> None:
    """The request form's preview of a booking: R1 and R2 without locks (may race)."""
    now = now or timezone.now()
    if hours is None:
        return
    end = window_end(start, int(hours * 3600))
    validate_window(start=start, end=end, market=market, now=now)
    pool = Pool.objects.filter(gpu_model=gpu_model).first()
    if pool is not None:
        check_window(pool, project_id=project.pk, gpus=gpu_count, start=start, end=end)


@transaction.atomic
def reschedule_reservation(
    *,
    actor,
    reservation: Reservation,
    start: datetime | None = None,
    end: datetime | None = None,
    gpu_count: int | None = None,
    now: datetime | None = None,
    source: str = "web",
) -> Reservation:
    """Move or resize a scheduled booking. R2 is checked without its own old window; a
    refused change leaves the lease exactly as it was. A started one cannot move (R3)."""
    if not access.can_act_on_lease(actor, reservation):
        raise NotPermitted(
            _("Only the engineer who booked it or a manager of the project can change a booking.")
        )
    now = now or timezone.now()
    pool = lock_pool(reservation.gpu_model_id)
    lease = Reservation.objects.select_for_update().get(pk=reservation.pk)
    if lease.status != Status.SCHEDULED or lease.reclaim_due_at is not None:
        raise InvalidTransition(
            _("Only a booking that has not started can be moved or resized."),
            code="reservation_started",
        )
    new_start = start or lease.start
    new_end = end or (new_start + (lease.end - lease.start))
    gpus = lease.gpu_count if gpu_count is None else gpu_count
    if not isinstance(gpus, int) or isinstance(gpus, bool) or gpus < 1:
        raise InvalidInput(_("Ask for at least one GPU."), field="gpu_count")
    quota = selectors.quota_for(lease.project_id, lease.gpu_model_id)
    if gpus > (quota.ceiling if quota else 0):
        raise InvalidInput(
            _("At most %(ceiling)s GPUs: the project's ceiling.")
            % {"ceiling": quota.ceiling if quota else 0},
            code="over_ceiling",
            field="gpu_count",
            figures={"asked": gpus, "ceiling": quota.ceiling if quota else 0},
        )
    # A booking is on-demand (R1 when it was booked): only its new dates are checked.
    validate_dates(start=new_start, end=new_end, now=now)
    check_window(
        pool,
        project_id=lease.project_id,
        gpus=gpus,
        start=new_start,
        end=new_end,
        exclude=lease.pk,
    )
    over = ceiling_conflict(
        pool,
        project_id=lease.project_id,
        ceiling=quota.ceiling if quota else 0,
        gpus=gpus,
        start=new_start,
        end=new_end,
        exclude=lease.pk,
    )
    if over is not None and lease.approved_at is None:
        raise QuotaExceeded(
            over_ceiling_message(over),
            code="over_ceiling",
            field="start",
            figures=over_ceiling_figures(over),
        )
    if gpus != lease.gpu_count:
        lease.offering = cheapest_offering(
            gpu_model=lease.gpu_model, gpu_count=gpus, market=lease.market
        )
        lease.instance_count = gpus // lease.offering.gpus_per_instance
    before = {
        "start": lease.start.isoformat(),
        "end": lease.end.isoformat(),
        "gpus": lease.gpu_count,
    }
    lease.start, lease.end, lease.gpu_count = new_start, new_end, gpus
    lease.status_message = booked_message(new_start)
    lease.save()
    audit.record(
        actor=actor,
        verb="lease.rescheduled",
        obj=lease,
        project=lease.project_id,
        source=source,
        at=now,
        before=before,
        after={"start": new_start.isoformat(), "end": new_end.isoformat(), "gpus": gpus},
    )
    jobs.process_due_at(new_start - notice())
    return lease


def booked_message(start: datetime) -> Phrase:
    """A booking's reason: the one sentence its page and the lease list say about when it
    starts, to the minute as the forms take it."""
    return Phrase(
        gettext_noop("Booked: the GPUs are held for it from %(at)s UTC."),
        at=start.replace(second=0, microsecond=0),
    )


def schedule(*, pool: Pool, reservation: Reservation, now: datetime) -> None:
    """Within the caller's transaction, pool locked: admit a booking by R2 (refusal raises
    and rolls back) and make it ``scheduled``."""
    check_window(
        pool,
        project_id=reservation.project_id,
        gpus=reservation.gpu_count,
        start=reservation.start,
        end=reservation.end,
        exclude=reservation.pk,
    )
    reservation.status = Status.SCHEDULED
    reservation.tier = Tier.RESERVED
    reservation.status_code = "scheduled"
    reservation.status_message = booked_message(reservation.start)
    reservation.save()
    jobs.process_due_at(reservation.start - notice())


def begin(*, pool: Pool, lease: Reservation, now: datetime) -> None:
    """R4, at start − notice: hold the booking's GPUs and tell the victims it needs (spot,
    then burst, Q6 order) so the GPUs are free at the start."""
    standing = read_standing(pool, lease.project_id)
    due = max(lease.start, now)
    victims = choose_victims(
        candidates(pool, exclude=lease.pk),
        need=lease.gpu_count,
        free=standing.free,
        project_id=lease.project_id,
        priority=lease.priority,
        mode=RESERVED,
    )
    if victims is None:
        # No set of spot and burst leases frees enough: hold nothing yet, try again at the
        # next sweep; from the start on it waits in the queue instead.
        if now >= lease.start:
            start(pool=pool, lease=lease, at=now)
        return
    for victim in Reservation.objects.select_for_update().filter(
        pk__in=[v.id for v in victims], notice_due_at__isnull=True
    ):
        preempt(
            victim=victim,
            needed_by=lease,
            now=now,
            due=due,
            figures={"need": lease.gpu_count, "free": standing.free, "guarantee_short": 0},
        )
    lease.reclaim_due_at = due
    lease.status_message = Phrase(
        gettext_noop("Starting at %(at)s UTC; its GPUs are being freed."), at=due
    )
    lease.save()
    audit.record(
        actor=None,
        verb="lease.reservation_starting",
        obj=lease,
        project=lease.project_id,
        source="worker",
        at=now,
        after={"victims": [v.id for v in victims], "starts_at": due.isoformat()},
    )
    jobs.process_due_at(due)


def start(*, pool: Pool, lease: Reservation, at: datetime) -> None:
    """At the start: run within the guarantee when it fits, else in tier ``reserved``."""
    standing = read_standing(pool, lease.project_id)
    if lease.gpu_count > standing.free:
        lease.status = Status.QUEUED
        lease.status_code = "no_capacity"
        lease.status_message = Phrase(
            gettext_noop(
                "The booked GPUs are not free yet (%(free)s of %(capacity)s); it starts as soon "
                "as they are."
            ),
            free=max(standing.free, 0),
            capacity=standing.capacity,
        )
        lease.save()
        return
    tier = (
        Tier.GUARANTEED
        if standing.used_guaranteed + lease.gpu_count <= standing.guaranteed
        else Tier.RESERVED
    )
    apply_decision(lease, Decision(status=Status.PROVISIONING, tier=tier), now=at)
    audit.record(
        actor=None,
        verb="lease.admitted",
        obj=lease,
        project=lease.project_id,
        source="worker",
        at=at,
        after={"tier": tier, "reservation": True},
    )
    messages.starting(lease)


def starting_soon(now: datetime) -> Q:
    return Q(
        status=Status.SCHEDULED,
        is_reservation=True,
        reclaim_due_at__isnull=True,
        start__lte=now + notice(),
    )
