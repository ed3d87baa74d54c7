"""A pool's week for the pools page and the API: per hour, the guaranteed floor Σ G, what
bookings reserve beyond it, and what is free (C − Σ E), swept only over the projects whose
bookings could pass their guarantee."""

from datetime import datetime, timedelta

from django.db.models import F, FilteredRelation, Q, Sum, Value
from django.db.models.functions import Coalesce

from rental.loans.reservation_rules import Booking, segments
from rental.loans.reservations import KEPT, guarantees
from rental.loans.standing import BOOKED
from rental.models import Pool, Reservation


def bookings_past_guarantee(pool: Pool, *, since: datetime, until: datetime) -> list[Booking]:
    """The bookings over [since, until) of the projects whose bookings there add up to more
    than their guarantee, in one query. A project whose overlapping bookings add up to at
    most G never reserves beyond G in that span, so a view of the span need not sweep them:
    Σ max(0, r − G) is the same without them."""
    rows = Reservation.objects.filter(
        Q(is_reservation=True, status__in=BOOKED) | KEPT,
        gpu_model_id=pool.gpu_model_id,
        end__gt=since,
        start__lt=until,
    ).order_by()
    past = (
        rows.alias(
            quota=FilteredRelation(
                "project__quotas", condition=Q(project__quotas__gpu_model_id=pool.gpu_model_id)
            )
        )
        .values("project_id")
        .annotate(booked=Sum("gpu_count"))
        .filter(booked__gt=Coalesce(F("quota__guaranteed"), Value(0)))
        .values("project_id")
    )
    return [
        Booking(*row)
        for row in rows.filter(project_id__in=past).values_list(
            "project_id", "gpu_count", "start", "end"
        )
    ]


def week(pool: Pool, *, since: datetime, days: int = 7, step_hours: int = 1) -> list[dict]:
    """Booked capacity against C over time, for the week view: per step, the guaranteed
    floor Σ G, what bookings reserve beyond it, and what is free (C − Σ E)."""
    guaranteed = guarantees(pool)
    floor = sum(guaranteed.values())
    until = since + timedelta(days=days)
    cuts = []
    for cut in segments(
        bookings_past_guarantee(pool, since=since, until=until), guaranteed, since=since
    ):
        if cut.start >= until:
            break  # segments come in time order: the rest lie past the week
        cuts.append(cut)
    rows = []
    first = 0  # the first segment that may still overlap a step (steps move forward)
    for step in range(days * 24 // step_hours):
        t0 = since + timedelta(hours=step * step_hours)
        t1 = t0 + timedelta(hours=step_hours)
        while first < len(cuts) and cuts[first].end is not None and cuts[first].end <= t0:
            first += 1
        beyond = 0
        for cut in cuts[first:]:
            if cut.start >= t1:
                break
            beyond = max(beyond, cut.reserved_beyond_guarantee)
        rows.append(
            {
                "start": t0,
                "guaranteed": floor,
                "reserved": beyond,
                "free": max(pool.capacity - floor - beyond, 0),
                "over": floor + beyond > pool.capacity,
            }
        )
    return rows
