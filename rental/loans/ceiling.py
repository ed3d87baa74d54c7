"""L over time: a project's ceiling holds at every instant, its bookings included.

Its non-spot leases count to their end and its bookings over their windows, swept as R2
sweeps (``reservation_rules.first_conflict`` with the ceiling for the capacity and no
guarantees). A booking over L beside the leases still running at its start, and a lease
admitted now that would pass L when a booking starts, go to the manager; the queue,
an extension and a move of a booking ask the same question (``ceiling_conflict``).
"""

from datetime import datetime, timedelta

from django.conf import settings
from django.db.models import Q
from django.utils.translation import gettext_noop

from portal.phrases import Phrase, Text, sentences
from rental.loans.admission_rules import Decision
from rental.loans.reservation_rules import Booking, Conflict, first_conflict, span_text
from rental.loans.standing import CLAIMING, HOLDING_GPUS, NOTICED
from rental.models import Market, Pool, Reservation, Tier

Status = Reservation.Status


# What counts against a project's ceiling L over time: its non-spot leases holding or
# claiming GPUs, to their end (as U counts them, Q2, but once the notices are over: a
# victim's GPUs go to the lease that claims them), and its bookings over their windows.
IN_CEILING = ~Q(tier=Tier.SPOT) & (
    (HOLDING_GPUS & ~NOTICED) | CLAIMING | Q(status=Status.SCHEDULED)
)


def queued_window(end: datetime) -> datetime:
    """Where a lease that is not admitted at once may end: one that takes GPUs back
    starts when its victims' notice is over and keeps its length (Q8), so L over time is
    checked up to a notice past its window."""
    return end + timedelta(seconds=settings.PORTAL_PREEMPTION_NOTICE_SECONDS)


def ceiling_conflict(
    pool: Pool | int,
    *,
    project_id: int,
    ceiling: int,
    gpus: int,
    start: datetime,
    end: datetime,
    exclude: int | None = None,
) -> Conflict | None:
    """L over time: the first interval of [start, end) where the project would run more
    than ``ceiling`` GPUs with ``gpus`` more, its running leases counted to their end and
    its bookings over their windows; None when it stays within L throughout. Without
    bookings that is Q2's U + n ≤ L; with them, a lease admitted now must leave a booking
    its place under L, and a booking the leases that will still run at its start."""
    gpu_model_id = pool if isinstance(pool, int) else pool.gpu_model_id
    rows = Reservation.objects.filter(
        IN_CEILING, project_id=project_id, gpu_model_id=gpu_model_id, start__lt=end, end__gt=start
    )
    if exclude is not None:
        rows = rows.exclude(pk=exclude)
    use = [Booking(project_id, *row) for row in rows.values_list("gpu_count", "start", "end")]
    return first_conflict(
        [*use, Booking(project_id, gpus, start, end)],
        {},
        capacity=ceiling,
        window_start=start,
        window_end=end,
    )


def over_ceiling_message(conflict: Conflict) -> Phrase:
    return Phrase(
        gettext_noop(
            "Over the project's ceiling then: %(span)s it would run %(needed)s GPUs, its "
            "ceiling is %(ceiling)s (its bookings count over their windows)."
        ),
        span=span_text(conflict),
        needed=conflict.needed,
        ceiling=conflict.capacity,
    )


def over_ceiling_for_manager(conflict: Conflict) -> Text:
    return sentences(
        over_ceiling_message(conflict), Phrase(gettext_noop("A manager must approve."))
    )


def over_ceiling_figures(conflict: Conflict) -> dict:
    return {
        "needed": conflict.needed,
        "ceiling": conflict.capacity,
        "from": conflict.start.isoformat(),
        "until": conflict.end.isoformat(),
    }


def keep_ceiling(
    pool: Pool,
    decision: Decision,
    *,
    project_id: int,
    ceiling: int,
    gpus: int,
    market: str,
    start: datetime,
    end: datetime,
    booked: bool,
    may_reclaim: bool = True,
) -> Decision:
    """A lease admitted now, beside its project's bookings (``booked``: some overlap its
    window, ``queued_window`` long for a queued one), goes to the manager where it would
    take the project over L when a booking starts (``ceiling_conflict``). Without
    bookings Q2 has decided already."""
    if (
        not booked
        or market == Market.SPOT
        or decision.status not in (Status.PROVISIONING, Status.QUEUED)
    ):
        return decision
    if decision.status == Status.QUEUED and may_reclaim:  # a booking keeps its window
        end = queued_window(end)
    conflict = ceiling_conflict(
        pool, project_id=project_id, ceiling=ceiling, gpus=gpus, start=start, end=end
    )
    if conflict is None:
        return decision
    return Decision(
        status=Status.PENDING_APPROVAL,
        tier=Tier.BURST,
        code="over_ceiling",
        message=over_ceiling_for_manager(conflict),
    )


def booking_decision(
    pool: Pool, *, project_id: int, ceiling: int, gpus: int, start: datetime, end: datetime
) -> Decision:
    """A booking within the auto-approve limits: ``scheduled`` (R2 is checked when it is
    written), or to the manager where the project would run more than L during its window
    (``ceiling_conflict``). Today's standing does not matter: the booking runs later."""
    conflict = ceiling_conflict(
        pool, project_id=project_id, ceiling=ceiling, gpus=gpus, start=start, end=end
    )
    if conflict is None:
        return Decision(status=Status.SCHEDULED, tier=Tier.RESERVED)
    return Decision(
        status=Status.PENDING_APPROVAL,
        tier=Tier.BURST,
        code="over_ceiling",
        message=over_ceiling_for_manager(conflict),
    )
