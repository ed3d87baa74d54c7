"""Reservation rules: entitlement over time and the R2 sweep. Pure, over plain numbers.

A project's entitlement at t is E(t) = max(G, GPUs it has reserved at t). A booking is
admitted iff Σ E(t) ≤ C at every instant of its window. The sweep walks start/end
events in time order, ends before starts at the same instant, so back-to-back
bookings [09:00, 17:00) and [17:00, 18:00) never overlap.

What a project "has reserved at t" is its bookings at t plus its leases running in a tier
nobody may take back (guaranteed, reserved) that still run at t: a booking starts beside
them, not in their place. Without bookings that is at most G (Q2), so E(t) = G.
"""

from collections import defaultdict
from collections.abc import Iterable, Iterator
from dataclasses import dataclass
from datetime import datetime


@dataclass(frozen=True)
class Booking:
    project_id: int
    gpus: int
    start: datetime
    end: datetime


@dataclass(frozen=True)
class Segment:
    """[start, end) over which every project's reservations are constant."""

    start: datetime
    end: datetime | None  # None: until the last booking ends (then Σ G)
    entitled: int  # Σ E
    reserved_beyond_guarantee: int  # Σ max(0, r − G)


@dataclass(frozen=True)
class Conflict:
    start: datetime
    end: datetime
    needed: int  # the largest Σ E in [start, end)
    capacity: int


def segments(
    bookings: Iterable[Booking], guarantees: dict[int, int], *, since: datetime
) -> Iterator[Segment]:
    """Σ E(t) piecewise from ``since`` on, sweeping start/end events (ends first)."""
    events: dict[datetime, list[tuple[int, int, int]]] = defaultdict(list)
    for booking in bookings:
        if booking.end <= since or booking.gpus <= 0:
            continue
        # 0 sorts before 1: at one instant, ends are applied before starts.
        events[max(booking.start, since)].append((1, booking.project_id, booking.gpus))
        events[booking.end].append((0, booking.project_id, -booking.gpus))
    reserved: dict[int, int] = defaultdict(int)
    floor = sum(guarantees.values())
    # Σ max(0, r − G), kept as each project's r changes: a sweep of n events costs n
    # steps, not n × projects.
    beyond = 0

    times = sorted(events)
    if not times or times[0] > since:
        times = [since, *times]
    for index, at in enumerate(times):
        for _order, project, delta in sorted(events.get(at, [])):
            guarantee = guarantees.get(project, 0)
            before = max(0, reserved[project] - guarantee)
            reserved[project] += delta
            beyond += max(0, reserved[project] - guarantee) - before
        following = times[index + 1] if index + 1 < len(times) else None
        yield Segment(
            start=at, end=following, entitled=floor + beyond, reserved_beyond_guarantee=beyond
        )


def added_conflict(
    bookings: Iterable[Booking],
    guarantees: dict[int, int],
    *,
    capacity: int,
    added: Booking,
) -> Conflict | None:
    """A lease admitted now in a tier nobody may take back: the first maximal interval
    of its window where it raises Σ E(t) above C. Only its own project's E(t) can grow,
    and only where that project has bookings (elsewhere its leases fit in G), so a pool
    already over C elsewhere (degraded, Q1) refuses nothing that this lease did not
    cause."""
    others = list(bookings)
    before = {
        segment.start: segment.entitled
        for segment in segments(others, guarantees, since=added.start)
    }
    conflict_start: datetime | None = None
    conflict_end: datetime | None = None
    needed = 0
    without = 0
    for segment in segments([*others, added], guarantees, since=added.start):
        if segment.start >= added.end:
            break
        without = before.get(segment.start, without)
        end = min(segment.end, added.end) if segment.end else added.end
        if segment.entitled > capacity and segment.entitled > without:
            if conflict_start is None:
                conflict_start = segment.start
            conflict_end = end
            needed = max(needed, segment.entitled)
        elif conflict_start is not None:
            break
    if conflict_start is None or conflict_end is None:
        return None
    return Conflict(start=conflict_start, end=conflict_end, needed=needed, capacity=capacity)


def first_conflict(
    bookings: Iterable[Booking],
    guarantees: dict[int, int],
    *,
    capacity: int,
    window_start: datetime,
    window_end: datetime,
) -> Conflict | None:
    """R2: the first maximal interval inside [window_start, window_end) where Σ E > C,
    with the most GPUs it would need; None when the booking fits everywhere."""
    conflict_start: datetime | None = None
    conflict_end: datetime | None = None
    needed = 0
    for segment in segments(bookings, guarantees, since=window_start):
        if segment.start >= window_end:
            break
        end = min(segment.end, window_end) if segment.end else window_end
        if segment.entitled > capacity:
            if conflict_start is None:
                conflict_start = segment.start
            conflict_end = end
            needed = max(needed, segment.entitled)
        elif conflict_start is not None:
            break
    if conflict_start is None or conflict_end is None:
        return None
    return Conflict(start=conflict_start, end=conflict_end, needed=needed, capacity=capacity)


def span_text(conflict: Conflict) -> str:
    """An interval as a person reads it: one day's hours, or two dates."""
    start, end = conflict.start, conflict.end
    if start.date() == end.date():
        return f"{start:%Y-%m-%d} [{start:%H:%M}, {end:%H:%M})"
    return f"[{start:%Y-%m-%d %H:%M}, {end:%Y-%m-%d %H:%M})"
