"""Periods and billed time: whole seconds counted once, then split at period boundaries
(B1, B6). Integer arithmetic on timedeltas only; no float on a money path."""

from datetime import UTC, date, datetime, timedelta
from typing import Any

from django.conf import settings

from rental.models.leases import PLATFORM_ENDED


def period_start(moment: datetime | date) -> datetime:
    return datetime(moment.year, moment.month, 1, tzinfo=UTC)


def period_end(start: datetime) -> datetime:
    return datetime(start.year + start.month // 12, start.month % 12 + 1, 1, tzinfo=UTC)


SECOND = timedelta(seconds=1)


def whole_seconds(span: timedelta) -> int:
    """Whole seconds in a span, floored, in integer arithmetic (no float on a money path)."""
    return span // SECOND


def _seconds_before(record_start: datetime, moment: datetime, duration: int) -> int:
    """How many of the run's billed seconds begin before ``moment``.

    Billed second k (0 ≤ k < duration) covers [start + k s, start + (k + 1) s); it belongs
    to the period that holds its beginning. So the count is ceil(moment − start), clamped.
    """
    offset = moment - record_start
    before = -((-offset) // SECOND)  # ceiling, in integers
    return min(max(before, 0), duration)


def billed_seconds(record: Any, *, start: datetime, end: datetime, now: datetime) -> int:
    """Seconds of ``record`` billed in [start, end) (B1, B6).

    The run's billed time is counted once, in whole seconds, from its start to its
    end (or ``now`` while it runs); those seconds are then split at the period
    boundaries, so the parts over any set of periods always sum to the whole (a
    2-hour run from 23:00:00.5 bills 7,200 s, not 3,599 + 3,600). A closed run
    shorter than the minimum that the platform did not end is topped up to the
    minimum, once, in the period where the run ended.
    """
    run_end = record.end or now
    duration = max(whole_seconds(run_end - record.start), 0)
    inside = _seconds_before(record.start, end, duration) - _seconds_before(
        record.start, start, duration
    )
    if record.end is None or record.end_reason in PLATFORM_ENDED:
        return inside
    minimum = settings.PORTAL_MINIMUM_BILLED_SECONDS
    if duration >= minimum:
        return inside
    # The run ended in the period holding its last instant (a zero-length run: its start).
    last = record.end - timedelta(microseconds=1) if record.end > record.start else record.start
    if start <= last < end:
        return inside + (minimum - duration)
    return inside
