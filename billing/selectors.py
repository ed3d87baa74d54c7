"""Reading what a project owes: draft and closed statements, month-to-date spend.

Usage comes from rental's selectors only. Time is split at period boundaries
(B6); amounts are exact until one rounding per line (B2).
"""

from collections import defaultdict
from collections.abc import Iterable
from dataclasses import dataclass, field
from datetime import date, datetime
from decimal import Decimal
from typing import Any

from django.conf import settings
from django.contrib.auth import get_user_model
from django.utils import timezone

from billing import drafts
from billing.currency import rates_used
from billing.drafts import Kept
from billing.models import Budget, Statement, StatementLine
from billing.money import SECONDS_PER_HOUR, gpu_seconds_cost, quantize
from billing.periods import (  # noqa: F401  (the public names of billed time live here too)
    SECOND,
    billed_seconds,
    period_end,
    period_start,
    whole_seconds,
)
from billing.requesters import RequesterSpend
from billing.statements import PeriodLines, compute_period
from billing.thresholds import readable_thresholds
from rental import billing_reads
from rental.models import GpuModel


@dataclass
class UsageLine:
    gpu_model: GpuModel
    market: str
    rate: Decimal
    gpu_seconds: int = 0
    exchange_rate: Decimal = Decimal(1)

    @property
    def gpu_hours(self) -> Decimal:
        return Decimal(self.gpu_seconds) / SECONDS_PER_HOUR

    @property
    def amount(self) -> Decimal:
        return quantize(gpu_seconds_cost(self.gpu_seconds, self.rate, self.exchange_rate))


def usage_lines(
    *, project_ids: Iterable[int], start: datetime, end: datetime, now: datetime
) -> dict[int, list[UsageLine]]:
    """Per project, one line per GPU model, market, rate and exchange rate, for usage in
    [start, end), in the billing currency."""
    grouped: dict[int, dict[tuple[int, str, Decimal, Decimal], int]] = defaultdict(
        lambda: defaultdict(int)
    )
    # Plain rows, not model instances: this runs over every run of the month.
    runs = billing_reads.usage_for_period(
        start=start, end=end, project_ids=project_ids
    ).values_list(
        "project_id",
        "gpu_model_id",
        "market",
        "rate",
        "exchange_rate",
        "gpu_count",
        "start",
        "end",
        "end_reason",
        named=True,
    )
    for run in runs:
        seconds = billed_seconds(run, start=start, end=end, now=now) * run.gpu_count
        if seconds:
            key = (run.gpu_model_id, run.market, run.rate, run.exchange_rate)
            grouped[run.project_id][key] += seconds
    models = GpuModel.objects.in_bulk({key[0] for lines in grouped.values() for key in lines})
    per_project = {
        project_id: [
            UsageLine(
                gpu_model=models[model_id],
                market=market,
                rate=rate,
                gpu_seconds=seconds,
                exchange_rate=exchange_rate,
            )
            for (model_id, market, rate, exchange_rate), seconds in lines.items()
        ]
        for project_id, lines in grouped.items()
    }
    return {
        project_id: sorted(lines, key=lambda line: (line.gpu_model.name, line.market))
        for project_id, lines in per_project.items()
    }


MANUAL_KINDS = ("adjustment", "credit")


@dataclass
class StatementView:
    """A project's statement for a month: the live draft (computed lines plus the manual
    lines already added to the open period) or the closed statement's stored lines."""

    project_id: int
    period: datetime
    lines: list[Any]
    currency: str
    status: str = "draft"
    statement: Any = None
    pools: dict[int, dict[str, str]] = field(default_factory=dict)
    covered_end: datetime | None = None
    # Spend per requester as kept with the lines (None: not kept; read it when needed).
    requesters: list[RequesterSpend] | None = None

    @property
    def total(self) -> Decimal:
        return sum((line.amount for line in self.lines), Decimal("0.00"))

    @property
    def is_draft(self) -> bool:
        return self.status == "draft"

    @property
    def rates_used(self) -> list:
        """The exchange rates its converted lines used (the "Rates used" section)."""
        return rates_used(self.lines)


def manual_lines(*, project_ids: Iterable[int] | None, period: datetime) -> dict[int, list]:
    """Adjustment and credit lines already added to the open period's draft statements."""
    lines = StatementLine.objects.filter(
        statement__period=period.date(),
        statement__status=Statement.Status.DRAFT,
        kind__in=MANUAL_KINDS,
    ).order_by("id")
    if project_ids is not None:
        lines = lines.filter(statement__project_id__in=list(project_ids))
    per_project: dict[int, list] = defaultdict(list)
    for line in lines.select_related("statement"):
        per_project[line.statement.project_id].append(line)
    return per_project


def draft_statement(
    *,
    project_id: int,
    period: date | datetime | None = None,
    now: datetime | None = None,
    kept: bool = False,
) -> StatementView:
    """A project's statement for a month: the live preview while open (P1), the stored
    lines once closed. ``kept``: the open month's lines as of the last spend refresh may
    serve (``billing.drafts``; at most a refresh old) instead of computing the month."""
    now = now or timezone.now()
    start = period_start(period or now)
    statement = Statement.objects.filter(project_id=project_id, period=start.date()).first()
    if statement is not None and statement.status != Statement.Status.DRAFT:
        return StatementView(
            project_id=project_id,
            period=start,
            lines=list(statement.lines.select_related("gpu_model").order_by("id")),
            currency=statement.currency,
            status=statement.status,
            statement=statement,
        )
    computed = (
        drafts.kept_or_computed(start=start, now=now, project_ids=[project_id])
        if kept
        else compute_period(period=start, now=now)
    )
    lines = computed.for_project(project_id) + manual_lines(
        project_ids=[project_id], period=start
    ).get(project_id, [])
    return StatementView(
        project_id=project_id,
        period=start,
        lines=lines,
        currency=settings.PORTAL_CURRENCY,
        statement=statement,
        pools={
            line.gpu_model_id: computed.pools.get(line.gpu_model_id, {})
            for line in lines
            if getattr(line, "gpu_model_id", None)
        },
        covered_end=computed.covered_end,
        requesters=computed.requesters.get(project_id, []) if isinstance(computed, Kept) else None,
    )


def month_to_date(*, project_ids: Iterable[int], now: datetime | None = None) -> dict[int, Decimal]:
    """Each project's accrued charges this month (BU2 actual), in one pass over the usage."""
    now = now or timezone.now()
    return totals(compute_period(period=period_start(now), now=now), project_ids=project_ids)


def totals(computed: PeriodLines | Kept, *, project_ids: Iterable[int]) -> dict[int, Decimal]:
    """Each project's total of a month's computed lines and its manual lines so far."""
    project_ids = list(project_ids)
    manual = manual_lines(project_ids=project_ids, period=computed.start)
    totals = {}
    for project_id in project_ids:
        lines = computed.for_project(project_id) + manual.get(project_id, [])
        if lines:
            totals[project_id] = sum((line.amount for line in lines), Decimal("0.00"))
    return totals


@dataclass(frozen=True)
class Interval:
    """One usage run as a drill-down shows it: what it billed in the period, and why."""

    usage_id: int
    reservation_id: int
    instance_id: int
    requester: str
    start: datetime
    end: datetime | None
    end_reason: str
    gpu_count: int
    billed_seconds: int
    gpu_seconds: int
    rate: Decimal
    tier: str
    market: str
    currency: str = ""
    exchange_rate: Decimal = Decimal(1)

    @property
    def exact_cost(self) -> Decimal:
        """In the billing currency, at the exchange rate captured at launch."""
        return gpu_seconds_cost(self.gpu_seconds, self.rate, self.exchange_rate)


def intervals(
    *,
    project_id: int,
    period: datetime,
    now: datetime,
    gpu_model_id: int | None = None,
    market: str = "",
    tier: str = "",
    rate: Decimal | None = None,
) -> list[Interval]:
    """The usage runs that make up a project's line in a period, in one query (plus one for
    the requesters' names)."""
    start = period_start(period)
    covered_end = min(period_end(start), max(now, start))
    rows = [
        row
        for row in billing_reads.usage_rows_for_period(
            start=start, end=covered_end, project_ids=[project_id]
        )
        if (gpu_model_id is None or row.gpu_model_id == gpu_model_id)
        and (not market or row.market == market)
        and (not tier or row.tier == tier)
        and (rate is None or row.rate == rate)
    ]
    names = dict(
        get_user_model()
        .objects.filter(pk__in={row.instance__reservation__requester_id for row in rows})
        .values_list("pk", "username")
    )
    result = []
    for row in rows:
        seconds = billed_seconds(row, start=start, end=covered_end, now=now)
        if not seconds:
            continue
        result.append(
            Interval(
                usage_id=row.id,
                reservation_id=row.instance__reservation_id,
                instance_id=row.instance_id,
                requester=names.get(row.instance__reservation__requester_id, "?"),
                start=row.start,
                end=row.end,
                end_reason=row.end_reason,
                gpu_count=row.gpu_count,
                billed_seconds=seconds,
                gpu_seconds=seconds * row.gpu_count,
                rate=row.rate,
                tier=row.tier,
                market=row.market,
                currency=row.currency,
                exchange_rate=row.exchange_rate,
            )
        )
    return result


def lease_cost(*, reservation_id: int, now: datetime | None = None) -> tuple[int, Decimal]:
    """A lease's billed GPU-seconds and cost so far (its final cost once it ended), at the
    rates captured at launch, over all periods, rounded once."""
    now = now or timezone.now()
    seconds = 0
    exact = Decimal(0)
    for row in billing_reads.lease_usage_rows(reservation_id):
        billed = billed_seconds(row, start=row.start, end=(row.end or now) + SECOND * 61, now=now)
        seconds += billed * row.gpu_count
        exact += gpu_seconds_cost(billed * row.gpu_count, row.rate, row.exchange_rate)
    return seconds, quantize(exact)


def budget_settings(*, project_id: int) -> dict[str, Any] | None:
    """A project's budget as configuration (amount, cap policy, thresholds), or None."""
    budget = Budget.objects.filter(project_id=project_id).first()
    if budget is None:
        return None
    return {
        "monthly_amount": budget.monthly_amount,
        "cap_policy": budget.cap_policy,
        "thresholds": readable_thresholds(budget.thresholds)[0],
    }


def gpu_model_names(lines: list[Any]) -> dict[int, str]:
    """GPU model id → name for the statement lines given, in one query."""
    ids = {line.gpu_model_id for line in lines if getattr(line, "gpu_model_id", None)}
    return dict(GpuModel.objects.filter(pk__in=ids).values_list("pk", "name"))
