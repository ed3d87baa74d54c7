"""Periods and billed time: whole seconds counted once, then split at period boundaries
(B1, B6). Integer arithmetic on timedeltas only; no float on a money path."""

import re
from datetime import UTC, date, datetime, timedelta
from typing import Any

from django.conf import settings
from django.db.models import (
    Case,
    DateTimeField,
    DecimalField,
    DurationField,
    ExpressionWrapper,
    F,
    Func,
    Q,
    Sum,
    Value,
    When,
)
from django.db.models.functions import Ceil, Coalesce, Floor, Greatest, Least
from django.utils import timezone
from django.utils.translation import gettext as _

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


# What a statement's usage line is per: the rate, and the currency and exchange rate
# captured with it at launch.
GROUP_FIELDS = (
    "project_id",
    "gpu_model_id",
    "market",
    "tier",
    "rate",
    "currency",
    "exchange_rate",
    "exchange_rate_ref_id",
)


def aggregate_billed_seconds(
    records: Any,
    *,
    start: datetime,
    end: datetime,
    now: datetime,
    fields: tuple[str, ...] = GROUP_FIELDS,
) -> Any:
    """The same rule as ``billed_seconds``, summed in the database (PostgreSQL) per
    ``fields`` (``GROUP_FIELDS`` unless told): rows of those fields and ``gpu_seconds``.
    ``records`` is a queryset of usage from rental's selectors.

    EXTRACT(EPOCH …) of a timestamp difference is exact (numeric, to the microsecond), so
    floor and ceiling give the same whole seconds as the integer arithmetic above.
    """
    numeric = DecimalField(max_digits=30, decimal_places=6)

    class Epoch(Func):
        template = "EXTRACT(EPOCH FROM %(expressions)s)"
        output_field = numeric

    def since_start(moment: Any) -> Any:
        return Epoch(ExpressionWrapper(moment - F("start"), output_field=DurationField()))

    def at(moment: datetime) -> Any:
        return Value(moment, output_field=DateTimeField())

    minimum = settings.PORTAL_MINIMUM_BILLED_SECONDS

    def duration() -> Any:
        return Greatest(
            Floor(since_start(Coalesce(F("end"), at(now)))), Value(0), output_field=numeric
        )

    def before(moment: datetime) -> Any:
        return Least(Greatest(Ceil(since_start(at(moment))), Value(0)), duration())

    last_instant_inside = Q(end__gt=F("start")) & Q(end__gt=start, end__lte=end) | Q(
        end=F("start"), start__gte=start, start__lt=end
    )
    # Most runs lie wholly inside the period and are not short: their seconds are simply
    # floor(end − start); only the others pay for the split and the top-up (CASE is lazy).
    wholly_inside = Q(start__gte=start, end__isnull=False, end__lte=end)
    short = Q(end__isnull=False, end__lt=F("start") + timedelta(seconds=minimum))
    return (
        records.order_by()
        .annotate(
            billing_inside=Case(
                When(wholly_inside, then=duration()),
                default=ExpressionWrapper(before(end) - before(start), output_field=numeric),
                output_field=numeric,
            ),
            billing_top_up=Case(
                When(
                    short & ~Q(end_reason__in=list(PLATFORM_ENDED)) & last_instant_inside,
                    then=ExpressionWrapper(Value(minimum) - duration(), output_field=numeric),
                ),
                default=Value(0),
                output_field=numeric,
            ),
        )
        .values(*fields)
        .annotate(
            gpu_seconds=Sum(
                ExpressionWrapper(
                    (F("billing_inside") + F("billing_top_up")) * F("gpu_count"),
                    output_field=numeric,
                )
            )
        )
        .order_by(*fields)
    )


PERIOD = re.compile(r"^(\d{4})-(\d{2})$")


def parse_period(value: str | None) -> date | None:
    """``YYYY-MM`` → the first day of that month; empty → None (the current month).
    Raises ValueError with a message a person can act on."""
    if not value:
        return None
    match = PERIOD.match(value.strip())
    if match:
        year, month = int(match[1]), int(match[2])
        if 2000 <= year <= 2999 and 1 <= month <= 12:
            return date(year, month, 1)
    raise ValueError(
        _("“%(value)s” is not a month. Give the period as YYYY-MM, e.g. %(example)s.")
        % {"value": value[:20], "example": timezone.now().strftime("%Y-%m")}
    )
