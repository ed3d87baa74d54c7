"""Building a period's statement lines for every project from usage, in bulk.

Reads usage, pools and reserved leases through rental's selectors (one query each,
plain rows), adds each pool's committed cost for the period (B4, prorated per second
while the period is open, with upfront payments amortized by B3) and apportions it
(B5, ``billing.apportion``). The result is deterministic: the same usage gives the
same lines, in the same order, to the last digit.
"""

from collections import defaultdict
from collections.abc import Iterator
from dataclasses import dataclass, field
from datetime import UTC, date, datetime, timedelta
from decimal import Decimal

from django.db import connection
from django.utils.translation import gettext as _

from billing import own_hardware, rollups
from billing.apportion import (
    SHARED_RESIDUAL,
    UNBILLED,
    Line,
    PoolPeriod,
    ReservedWindow,
    UsageKey,
    apportion_pool,
    effective_price,
)
from billing.currency import RateTable, billing_currency, describe_rates
from billing.models import UpfrontPayment
from billing.money import gpu_seconds_cost, largest_remainder, quantize
from billing.periods import (
    SECOND,
    aggregate_billed_seconds,
    billed_seconds,
    period_end,
    period_start,
    whole_seconds,
)
from billing.storage import storage_lines
from portal.models import Project
from rental import billing_reads
from rental.models import GpuModel


def month_seconds(start: datetime) -> int:
    return whole_seconds(period_end(start) - start)


def _months(first: date, count: int) -> list[datetime]:
    months = []
    year, month = first.year, first.month
    for _index in range(count):
        months.append(datetime(year, month, 1, tzinfo=UTC))
        year, month = year + month // 12, month % 12 + 1
    return months


def amortized_share(payment: UpfrontPayment | object, month: datetime) -> Decimal:
    """This month's part of an upfront payment: the amount split over the term's months by
    their length in seconds, by largest remainder (B3), so the parts sum to the payment
    (a leap February is one day longer than a common one)."""
    months = _months(payment.first_month, payment.months)  # type: ignore[attr-defined]
    if month not in months:
        return Decimal("0.00")
    parts = largest_remainder(
        payment.amount,  # type: ignore[attr-defined]
        {m: month_seconds(m) for m in months},
        tie_break={m: m.strftime("%Y-%m") for m in months},
    )
    return parts[month]


def fixed_cost(
    *, monthly: Decimal, payments: list, start: datetime, covered_end: datetime
) -> tuple[Decimal, dict[str, str]]:
    """F for [start, covered_end): the month's committed cost (monthly charge plus amortized
    upfront payments), prorated per second over the month when only part of it is covered
    (B4). Rounded once, to cents. Returns F and its figures for the explanation."""
    month_total = monthly + sum(
        (amortized_share(payment, start) for payment in payments), Decimal("0.00")
    )
    full = month_seconds(start)
    covered = min(max(whole_seconds(covered_end - start), 0), full)
    prorated = quantize(month_total * covered / full) if covered < full else month_total
    return prorated, {
        "monthly": str(monthly),
        "amortized": str(month_total - monthly),
        "month_total": str(month_total),
        "covered_seconds": str(covered),
        "month_seconds": str(full),
    }


def _window_seconds(start: datetime, end: datetime, lo: datetime, hi: datetime) -> int:
    """Whole seconds of the window [start, end) that begin inside [lo, hi)."""
    duration = max(whole_seconds(end - start), 0)

    def before(moment: datetime) -> int:
        return min(max(-((start - moment) // SECOND), 0), duration)

    return before(hi) - before(lo)


@dataclass
class PeriodLines:
    """Every computed line of a period: per project id, and the platform's under None."""

    start: datetime
    end: datetime
    covered_end: datetime
    lines: dict[int | None, list[Line]] = field(default_factory=dict)
    pools: dict[int, dict[str, str]] = field(default_factory=dict)

    def for_project(self, project_id: int | None) -> list[Line]:
        return self.lines.get(project_id, [])

    def total(self) -> Decimal:
        return sum(
            (line.amount for lines in self.lines.values() for line in lines), Decimal("0.00")
        )


def _summed_usage(
    *, start: datetime, covered_end: datetime, now: datetime, in_database: bool, live_only: bool
) -> Iterator[tuple[dict, int]]:
    """The period's usage runs (or only those not rolled up) summed per usage key, as
    (key fields, GPU-seconds) pairs: in the database on PostgreSQL (one aggregate query),
    row by row elsewhere (the SQLite demo); both follow the same rule, to the second."""
    if in_database:
        records = (
            billing_reads.usage_for_rollup(start=start, end=covered_end)
            if live_only
            else billing_reads.usage_for_period(start=start, end=covered_end)
        )
        for row in aggregate_billed_seconds(records, start=start, end=covered_end, now=now):
            yield row, int(row["gpu_seconds"] or 0)
    else:
        for run in billing_reads.usage_rows_for_period(
            start=start, end=covered_end, not_rolled_up=live_only
        ):
            seconds = billed_seconds(run, start=start, end=covered_end, now=now) * run.gpu_count
            yield run._asdict(), seconds


def compute_period(
    *,
    period: date | datetime,
    now: datetime,
    in_database: bool | None = None,
    from_usage: bool = False,
) -> PeriodLines:
    """All computed lines of a period as of ``now`` (the part elapsed while it is open).

    Usage comes from the period's rollups plus the runs not rolled up yet
    (``billing.rollups``); ``from_usage`` reads every run of the month instead, as closing
    does, and so does a computation as of a moment the rollups have passed. Both give the
    same lines, to the digit. Manual lines (adjustments and credits) are not computed;
    they live in the database.
    """
    if in_database is None:
        in_database = connection.vendor == "postgresql"
    start = period_start(period)
    end = period_end(start)
    covered_end = min(end, max(now, start))
    terms = billing_reads.pool_terms()
    usage: dict[int, dict[int, dict[UsageKey, int]]] = defaultdict(
        lambda: defaultdict(lambda: defaultdict(int))
    )

    def summed(live_only: bool) -> Iterator[tuple[dict, int]]:
        return _summed_usage(
            start=start,
            covered_end=covered_end,
            now=now,
            in_database=in_database,
            live_only=live_only,
        )

    found = (
        None if from_usage else rollups.read_usage(start=start, now=now, live=lambda: summed(True))
    )
    for row, seconds in found if found is not None else summed(False):
        if seconds:
            usage[row["gpu_model_id"]][row["project_id"]][_usage_key(row)] += seconds
    windows: dict[int, list[ReservedWindow]] = defaultdict(list)
    rates = RateTable()
    for row in billing_reads.reserved_windows_for_period(start=start, end=covered_end):
        seconds = _window_seconds(row["start"], row["end"], start, covered_end)
        if seconds:
            windows[row["gpu_model_id"]].append(
                ReservedWindow(
                    reservation_id=row["id"],
                    project_id=row["project_id"],
                    gpu_model_id=row["gpu_model_id"],
                    gpu_count=row["gpu_count"],
                    market=row["market"],
                    rate=row["rate"],
                    seconds=seconds,
                    **_window_exchange(rates, row),
                )
            )
    payments: dict[int, list[UpfrontPayment]] = defaultdict(list)
    for payment in (
        UpfrontPayment.objects.select_related(None)
        .only("pool__gpu_model_id", "amount", "first_month", "months")
        .select_related("pool")
    ):
        payments[payment.pool.gpu_model_id].append(payment)
    unbilled = _unbilled_by_model(start=start, covered_end=covered_end)
    # Own servers' purchase price, written off month by month, is committed cost too (B4).
    owned = own_hardware.amortisation_by_model(
        own_hardware.own_hosts(), start=start, covered_end=covered_end, rates=rates
    )
    model_ids = sorted(set(usage) | set(windows) | set(terms) | set(unbilled) | set(owned))
    project_ids = {p for model in usage.values() for p in model} | {
        p for term in terms.values() for p in term.guarantees
    }
    project_ids |= {w.project_id for ws in windows.values() for w in ws}
    labels = dict(Project.objects.filter(pk__in=project_ids).values_list("pk", "slug"))
    result = PeriodLines(start=start, end=end, covered_end=covered_end)
    names = dict(GpuModel.objects.filter(pk__in=model_ids).values_list("pk", "name"))
    elapsed = whole_seconds(covered_end - start)
    for model_id in model_ids:
        term = terms.get(model_id)
        if term is None:
            f, figures = Decimal("0.00"), {}
        else:
            f, figures = fixed_cost(
                monthly=term.committed_monthly_cost,
                payments=payments.get(model_id, []),
                start=start,
                covered_end=covered_end,
            )
        if owned.get(model_id):
            f += owned[model_id]
            figures = {**figures, "own_hardware": str(owned[model_id])}
        pool = PoolPeriod(
            gpu_model_id=model_id,
            gpu_model_name=names.get(model_id, str(model_id)),
            committed_gpus=term.committed_gpus if term else 0,
            fixed_cost=f,
            mode=term.apportionment if term else "hybrid",
            residual=term.residual if term else "shared",
            guarantees=term.guarantees if term else {},
            elapsed_seconds=elapsed,
        )
        lines = apportion_pool(pool, usage.get(model_id, {}), windows.get(model_id, []), labels)
        if model_id in unbilled:
            lines.append(_unbilled_line(pool, *unbilled[model_id]))
        if not lines:
            continue
        result.pools[model_id] = {**figures, "F": str(f), "mode": pool.mode}
        for line in lines:
            if line.kind != "usage" or line.amount or line.gpu_seconds:
                line.references = {
                    **line.references,
                    "gpu_seconds": line.gpu_seconds,
                    **_period_refs(start, covered_end),
                }
                result.lines.setdefault(line.project_id, []).append(line)
    for project_lines in result.lines.values():
        project_lines.sort(key=_line_order)
        describe_rates(project_lines, rates)
    _add_storage_lines(result, now=now)
    return result


def _unbilled_by_model(
    *, start: datetime, covered_end: datetime
) -> dict[int, tuple[int, Decimal, int]]:
    """Cloud time after billing stopped, per GPU model: GPU-seconds in the period, their
    exact cost in the billing currency (at the rate of the instance's last usage), and
    how many instances ran it."""
    found: dict[int, tuple[int, Decimal, int]] = {}
    currency = billing_currency()
    for row in billing_reads.unbilled_for_period(start=start, end=covered_end):
        seconds = _window_seconds(row["start"], row["end"], start, covered_end) * row["gpu_count"]
        if not seconds:
            continue
        exchange = row["exchange_rate"] if row["currency"] != currency else Decimal(1)
        before = found.get(row["gpu_model_id"], (0, Decimal(0), 0))
        found[row["gpu_model_id"]] = (
            before[0] + seconds,
            before[1] + gpu_seconds_cost(seconds, row["rate"], exchange),
            before[2] + 1,
        )
    return found


def _unbilled_line(pool: PoolPeriod, gpu_seconds: int, cost: Decimal, instances: int) -> Line:
    """The pool's cloud time after billing stopped: the platform's, no project's."""
    amount = quantize(cost)
    return Line(
        project_id=None,
        kind=SHARED_RESIDUAL,
        amount=amount,
        description=_("%(model)s: platform overhead (%(why)s)")
        % {"model": pool.gpu_model_name, "why": _("cloud time after billing stopped")},
        gpu_model_id=pool.gpu_model_id,
        gpu_seconds=gpu_seconds,
        unit_price=effective_price(amount, gpu_seconds),
        references={"why": UNBILLED, "instances": instances},
    )


def _usage_key(row: dict) -> UsageKey:
    """A usage line's key, with the currency and exchange rate captured at launch."""
    converted = row["currency"] != billing_currency() and bool(row["exchange_rate_ref_id"])
    return UsageKey(
        row["gpu_model_id"],
        row["market"],
        row["tier"],
        row["rate"],
        currency=row["currency"] if converted else "",
        exchange_rate=row["exchange_rate"] if converted else Decimal(1),
        exchange_rate_id=row["exchange_rate_ref_id"] if converted else 0,
    )


def _window_exchange(rates: RateTable, row: dict) -> dict:
    """A reserved window converts at the rate in force when it began (it has no launch of
    its own). Its launch needs a rate, so a charged window whose currency has none at all
    cannot arise; it would raise rather than bill an unconverted amount."""
    currency = row.get("offering__currency") or billing_currency()
    if currency == billing_currency():
        return {}
    # A booking made before its currency had any rate: the first rate recorded for it.
    rate = rates.in_force(currency, row["start"]) or rates.first(currency)
    if rate is None:
        raise ValueError(
            f"reservation {row['id']} is priced in {currency}, which has no exchange rate "
            f"in force at {row['start']:%Y-%m-%d %H:%M}"
        )
    return {
        "currency": currency,
        "exchange_rate": rate.units_per_billing_unit,
        "exchange_rate_id": rate.pk,
    }


def _add_storage_lines(result: PeriodLines, *, now: datetime) -> None:
    """B8: each project's storage lines, after its GPU lines."""
    for project_id, lines in storage_lines(
        start=result.start, end=result.covered_end, now=now
    ).items():
        result.lines.setdefault(project_id, []).extend(lines)


KIND_ORDER = {
    "committed_share": 0,
    "usage": 1,
    "reservation": 2,
    "shared_residual": 3,
    "storage": 4,
    "adjustment": 5,
    "credit": 6,
}


def _line_order(line: Line) -> tuple:
    return (
        line.gpu_model_id or 0,
        KIND_ORDER.get(line.kind, 9),
        line.market,
        line.tier,
        line.unit_price,
        line.description,
    )


def _period_refs(start: datetime, covered_end: datetime) -> dict[str, str]:
    return {"from": start.isoformat(), "to": covered_end.isoformat()}


def end_of(period: date | datetime) -> datetime:
    return period_end(period_start(period))


def grace_passed(period: date | datetime, *, now: datetime, grace: timedelta) -> bool:
    return now >= end_of(period) + grace
