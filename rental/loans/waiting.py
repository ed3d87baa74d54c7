"""Why a waiting lease waits: its place in its pool's queue, why the lease before it is
ahead, its project's usage figure in a fair pool (Q5) and, in words, what would let it
start. The lease page, the pool page and the API read it here."""

from dataclasses import dataclass
from datetime import datetime
from decimal import ROUND_HALF_UP, Decimal

from django.utils.translation import gettext as _

from rental.loans.admission_checks import is_held
from rental.loans.queue import CEILING_BOOKED, PoolQueue, pool_queue
from rental.loans.queue_rules import (
    AHEAD_FAIR_SHARE,
    AHEAD_GUARANTEE,
    AHEAD_OVER_GUARANTEE,
    AHEAD_PRIORITY,
    ahead_because,
)
from rental.models import Priority, Reservation

Status = Reservation.Status


@dataclass(frozen=True)
class Wait:
    position: int | None = None  # 1-based place in the queue, only while queued
    queued: int = 0  # how many leases wait in that queue
    hint: str = ""
    ahead: str = ""  # why the lease just before it is ahead, in words
    usage: str = ""  # in a fair pool: its project's usage figure, in words


def lease_wait(lease: Reservation, *, now: datetime | None = None) -> Wait:
    """The queue place (one read of the pool's queue, only for a queued lease), why the
    lease before it is ahead, its project's figure in a fair pool, and the hint."""
    position, queued, ahead, usage = None, 0, "", ""
    if lease.status == Status.QUEUED:
        queue = pool_queue(lease.gpu_model_id, now=now)
        places = queue.places if queue is not None else {}
        position, queued = places.get(lease.pk), len(places)
        if queue is not None and position is not None:
            leases = queue.leases
            if position > 1:
                ahead = ahead_words(queue, leases[position - 2], lease)
            usage = usage_words(queue, lease.project_id, lease.project.name)
    return Wait(position=position, queued=queued, hint=wait_hint(lease), ahead=ahead, usage=usage)


def figure(value: Decimal, places: str = "0.1") -> str:
    """A usage figure as pages show it: GPU-hours per share to a tenth."""
    return str(value.quantize(Decimal(places), rounding=ROUND_HALF_UP))


def usage_words(queue: PoolQueue, project_id: int, project_name: str) -> str:
    """A fair pool's figure of one project with a waiting lease, in words; "" otherwise."""
    value = queue.order.usage.get(project_id)
    if value is None:
        return ""
    return _(
        "Fair share: %(project)s used %(usage)s decayed GPU-hours of this pool per "
        "guaranteed GPU (half-life %(hours)s hours); the lower, the earlier its burst "
        "requests go among those of the same priority."
    ) % {
        "project": project_name,
        "usage": figure(value),
        "hours": figure(queue.pool.fair_share_half_life_hours, "0.01").rstrip("0").rstrip("."),
    }


def ahead_words(queue: PoolQueue, first: Reservation, second: Reservation) -> str:
    """Why ``first``, just before ``second`` in ``queue``, goes first, in words."""
    names = {"ahead": first.project.name, "behind": second.project.name}
    if first.reclaim_due_at is not None:
        return _("Ahead: a request of %(ahead)s that is already taking GPUs back.") % names
    one, other = queue.order.waiting[first.pk], queue.order.waiting[second.pk]
    why = ahead_because(one, other)
    if why == AHEAD_GUARANTEE:
        return _("Ahead: a request of %(ahead)s within its project's guarantee.") % names
    if why == AHEAD_PRIORITY:
        return _(
            "Ahead: a request of %(ahead)s with a higher priority (%(first)s before %(second)s)."
        ) % {
            **names,
            "first": Priority(first.priority).label,
            "second": Priority(second.priority).label,
        }
    if why == AHEAD_FAIR_SHARE:
        values = (one.fair_usage or Decimal(0), other.fair_usage or Decimal(0))
        shown = figure(values[0]), figure(values[1])
        if shown[0] == shown[1]:  # apart only beyond the tenth: show what tells them apart
            shown = figure(values[0], "0.000001"), figure(values[1], "0.000001")
        return _(
            "Ahead: same priority, project %(ahead)s used %(first)s decayed GPU-hours per "
            "guaranteed GPU, %(behind)s %(second)s."
        ) % {**names, "first": shown[0], "second": shown[1]}
    if why == AHEAD_OVER_GUARANTEE:
        return (
            _(
                "Ahead: same priority, project %(ahead)s runs fewer GPUs beyond its guarantee "
                "(per weight) than %(behind)s."
            )
            % names
        )
    at = first.submitted_at.strftime("%Y-%m-%d %H:%M:%S")
    if one.fair_usage is not None and not one.guaranteed_eligible:
        return _(
            "Ahead: a request of %(ahead)s of the same priority and the same usage figure, "
            "sent earlier (at %(at)s UTC)."
        ) % {**names, "at": at}
    return _(
        "Ahead: a request of %(ahead)s of the same priority, sent earlier (at %(at)s UTC)."
    ) % {**names, "at": at}


def wait_hint(lease: Reservation) -> str:
    """What would let a waiting lease start, in words (no reason codes on pages)."""
    if lease.status == Status.QUEUED and lease.reclaim_due_at:
        return _("It starts at %(at)s UTC, when the leases it preempted have ended.") % {
            "at": lease.reclaim_due_at.strftime("%Y-%m-%d %H:%M:%S")
        }
    if lease.status == Status.QUEUED and is_held(lease.status_code):
        return _(
            "It keeps its place in the queue and starts by itself once the reason above no "
            "longer holds (for a budget: a new month, or a higher budget) and %(n)s GPUs "
            "are free."
        ) % {"n": lease.gpu_count}
    if lease.status == Status.QUEUED and lease.status_code == CEILING_BOOKED:
        return _(
            "It keeps its place in the queue and starts by itself once it fits under the "
            "project's ceiling beside its bookings (when one of its leases ends or a booking "
            "is over) and %(n)s GPUs are free."
        ) % {"n": lease.gpu_count}
    if lease.status == Status.QUEUED:
        return _(
            "It starts by itself as soon as %(n)s GPUs of the pool are free: when a lease "
            "ends or is preempted, or when the pool's capacity is raised."
        ) % {"n": lease.gpu_count}
    if lease.status == Status.PENDING_APPROVAL:
        return _("A manager of %(project)s must approve it.") % {"project": lease.project.name}
    # A booking (scheduled) needs no hint: its reason already says when it starts.
    return ""


@dataclass(frozen=True)
class QueueRow:
    """One waiting lease as the pool page lists it, in the order admission takes them."""

    place: int
    lease: Reservation
    usage: Decimal | None  # its project's figure in a fair pool
    ahead: str  # why the row above goes first, in words ("" for the first)


def queue_rows(queue: PoolQueue, start: int = 0, stop: int | None = None) -> list[QueueRow]:
    """The rows of places ``start + 1`` to ``stop`` (all of them by default): a page of
    the queue words only its own rows."""
    leases = queue.leases
    return [
        QueueRow(
            place=place,
            lease=lease,
            usage=queue.order.usage.get(lease.project_id),
            ahead=ahead_words(queue, leases[place - 2], lease) if place > 1 else "",
        )
        for place, lease in enumerate(leases[start:stop], start=start + 1)
    ]
