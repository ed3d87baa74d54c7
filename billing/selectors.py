"""Reading what a project owes: billed seconds per usage interval and draft statement lines.

Usage comes from rental's selectors only. Time is split at period boundaries
(B6); amounts are exact until one rounding per line (B2).
"""

from collections import defaultdict
from collections.abc import Iterable
from dataclasses import dataclass
from datetime import UTC, date, datetime, timedelta
from decimal import Decimal
from typing import Any

from django.conf import settings
from django.utils import timezone

from billing.money import SECONDS_PER_HOUR, gpu_seconds_cost, quantize
from rental import selectors as rental_selectors
from rental.models import GpuModel, UsageRecord
from rental.models.leases import PLATFORM_ENDED


def period_start(moment: datetime | date) -> datetime:
    return datetime(moment.year, moment.month, 1, tzinfo=UTC)


def period_end(start: datetime) -> datetime:
    return datetime(start.year + start.month // 12, start.month % 12 + 1, 1, tzinfo=UTC)


def billed_seconds(
    record: UsageRecord | Any, *, start: datetime, end: datetime, now: datetime
) -> int:
    """Seconds of ``record`` billed in [start, end) (B1, B6).

    The run counts to the second from its start to its end (or ``now`` while it
    runs). A closed run shorter than the minimum that the platform did not end is
    topped up to the minimum, in the period where the run ended.
    """
    run_end = record.end or now
    inside = max(0, int((min(run_end, end) - max(record.start, start)).total_seconds()))
    if record.end is None or record.end_reason in PLATFORM_ENDED:
        return inside
    duration = int((record.end - record.start).total_seconds())
    minimum = settings.PORTAL_MINIMUM_BILLED_SECONDS
    if duration >= minimum:
        return inside
    # The run ended in the period holding its last instant (a zero-length run: its start).
    last = record.end - timedelta(microseconds=1) if record.end > record.start else record.start
    if start <= last < end:
        return inside + (minimum - duration)
    return inside


@dataclass
class UsageLine:
    gpu_model: GpuModel
    market: str
    rate: Decimal
    gpu_seconds: int = 0

    @property
    def gpu_hours(self) -> Decimal:
        return Decimal(self.gpu_seconds) / SECONDS_PER_HOUR

    @property
    def amount(self) -> Decimal:
        return quantize(gpu_seconds_cost(self.gpu_seconds, self.rate))


@dataclass
class DraftStatement:
    period: datetime
    lines: list[UsageLine]
    currency: str

    @property
    def total(self) -> Decimal:
        return sum((line.amount for line in self.lines), Decimal("0.00"))


def usage_lines(
    *, project_ids: Iterable[int], start: datetime, end: datetime, now: datetime
) -> dict[int, list[UsageLine]]:
    """Per project, one line per GPU model, market and rate, for usage in [start, end)."""
    grouped: dict[int, dict[tuple[int, str, Decimal], int]] = defaultdict(lambda: defaultdict(int))
    # Plain rows, not model instances: this runs over every run of the month.
    runs = rental_selectors.usage_for_period(
        start=start, end=end, project_ids=project_ids
    ).values_list(
        "project_id",
        "gpu_model_id",
        "market",
        "rate",
        "gpu_count",
        "start",
        "end",
        "end_reason",
        named=True,
    )
    for run in runs:
        seconds = billed_seconds(run, start=start, end=end, now=now) * run.gpu_count
        if seconds:
            grouped[run.project_id][(run.gpu_model_id, run.market, run.rate)] += seconds
    models = GpuModel.objects.in_bulk(
        {model_id for lines in grouped.values() for model_id, _market, _rate in lines}
    )
    per_project = {
        project_id: [
            UsageLine(gpu_model=models[model_id], market=market, rate=rate, gpu_seconds=seconds)
            for (model_id, market, rate), seconds in lines.items()
        ]
        for project_id, lines in grouped.items()
    }
    return {
        project_id: sorted(lines, key=lambda line: (line.gpu_model.name, line.market))
        for project_id, lines in per_project.items()
    }


def draft_statement(
    *, project_id: int, period: date | datetime | None = None, now: datetime | None = None
) -> DraftStatement:
    """The live preview of a project's statement for a month (P1)."""
    now = now or timezone.now()
    start = period_start(period or now)
    end = period_end(start)
    lines = usage_lines(
        project_ids=[project_id], start=start, end=min(end, max(now, start)), now=now
    )
    return DraftStatement(
        period=start, lines=lines.get(project_id, []), currency=settings.PORTAL_CURRENCY
    )


def month_to_date(*, project_ids: Iterable[int], now: datetime | None = None) -> dict[int, Decimal]:
    """Each project's accrued charges this month, in one pass over the usage."""
    now = now or timezone.now()
    start = period_start(now)
    per_project = usage_lines(project_ids=project_ids, start=start, end=now, now=now)
    return {
        project_id: sum((line.amount for line in lines), Decimal("0.00"))
        for project_id, lines in per_project.items()
    }
