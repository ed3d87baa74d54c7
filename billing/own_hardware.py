"""What the company's own GPU servers cost a period: their purchase price written off over
their months of amortisation, as committed cost of the pools of their GPUs (B4).

A host bought for P and written off over N months from its day in service is charged
m = P / N (rounded down to the cent) in each of its amortisation months and the rest,
P − m × (N − 1), in the last, so the months sum to P exactly. An amortisation month runs
from its day in service to the same day a month later. Within it the charge accrues per
second; what a period is charged is what accrued by its (covered) end less what accrued
by its start, each rounded once to the cent, so the periods of the whole term sum to P
to the cent, and a month that is an amortisation month is charged exactly m.

A host with GPUs of several models is split between their pools by GPU count, by largest
remainder (B3). A host priced in another currency is converted at the rate in force at
the start of the period. Power is not here: it is the own offering's price per GPU-hour,
metered like any rate (its usage lines). ``owned_figures`` gives the rent-or-buy report
what owning costs per GPU.
"""

from collections import defaultdict
from dataclasses import dataclass
from datetime import UTC, date, datetime
from decimal import ROUND_DOWN, Decimal

from billing.currency import RateTable, billing_currency
from billing.money import CENT, largest_remainder, quantize, to_billing_currency
from billing.periods import whole_seconds
from rental.catalog.placement_rules import OWN_DRIVER
from rental.models import Offering, OwnHost


@dataclass(frozen=True)
class HostTerms:
    """One own server as billing reads it."""

    name: str
    purchase_price: Decimal
    currency: str
    months: int
    in_service_since: date
    gpus: dict[int, int]  # GPU model id -> GPUs of it (those the catalog knows)


def _month_later(day: date, months: int) -> date:
    """``day`` ``months`` calendar months later, on the last day of a shorter month."""
    index = day.month - 1 + months
    year, month = day.year + index // 12, index % 12 + 1
    for last in (day.day, 30, 29, 28):
        try:
            return date(year, month, last)
        except ValueError:
            continue
    raise AssertionError("every month has 28 days")


def _moment(day: date) -> datetime:
    return datetime(day.year, day.month, day.day, tzinfo=UTC)


def monthly_charges(price: Decimal, months: int) -> list[Decimal]:
    """Each amortisation month's charge: P / N to the cent, rounded down, and the rest in
    the last month, so they sum to P."""
    each = (price / months).quantize(CENT, rounding=ROUND_DOWN)
    return [each] * (months - 1) + [price - each * (months - 1)]


def accrued(host: HostTerms, moment: datetime) -> Decimal:
    """The amortisation accrued from the day in service to ``moment``, rounded once to
    the cent: whole months in full, the month under way per second."""
    charges = monthly_charges(host.purchase_price, host.months)
    total = Decimal(0)
    for index, charge in enumerate(charges):
        begins = _moment(_month_later(host.in_service_since, index))
        ends = _moment(_month_later(host.in_service_since, index + 1))
        if moment >= ends:
            total += charge
            continue
        if moment > begins:
            total += charge * whole_seconds(moment - begins) / whole_seconds(ends - begins)
        break
    return quantize(total)


def host_share(host: HostTerms, *, start: datetime, covered_end: datetime) -> Decimal:
    """What the host costs the period [start, covered_end), in its own currency."""
    return accrued(host, covered_end) - accrued(host, start)


def own_hosts() -> list[HostTerms]:
    """Every own server with a purchase price and GPUs the catalog knows (one query)."""
    return [
        HostTerms(
            name=host.name,
            purchase_price=host.purchase_price,
            currency=host.currency,
            months=host.amortisation_months,
            in_service_since=host.in_service_since,
            gpus=host.gpu_models(),
        )
        for host in OwnHost.objects.filter(purchase_price__gt=0).order_by("account_id", "name")
        if host.amortisation_months > 0
    ]


def amortisation_by_model(
    hosts: list[HostTerms], *, start: datetime, covered_end: datetime, rates: RateTable
) -> dict[int, Decimal]:
    """The period's amortisation per GPU model id, in the billing currency, in cents:
    each host's share split by its GPUs of each model (B3)."""
    by_model: dict[int, Decimal] = defaultdict(lambda: Decimal("0.00"))
    for host in hosts:
        share = host_share(host, start=start, covered_end=covered_end)
        if not share or not host.gpus:
            continue
        if host.currency and host.currency != billing_currency():
            rate = rates.in_force(host.currency, start) or rates.first(host.currency)
            if rate is None:
                raise ValueError(
                    f"No exchange rate for {host.currency}: own server {host.name} "
                    "cannot be charged in the billing currency."
                )
            share = quantize(to_billing_currency(share, rate.units_per_billing_unit))
        parts = largest_remainder(
            share, host.gpus, tie_break={model: f"{model:09d}" for model in host.gpus}
        )
        for model_id, part in parts.items():
            by_model[model_id] += part
    return dict(by_model)


@dataclass(frozen=True)
class OwnedFigures:
    """What a GPU model's own servers cost per GPU: the purchase price written off per
    month (B4) and power per GPU-hour, averaged over their GPUs of the model."""

    gpus: int
    amortisation_per_gpu_month: Decimal
    power_per_gpu_hour: Decimal
    cloud_rate: Decimal | None  # the cheapest cloud offering's on-demand GPU-hour


def owned_figures() -> dict[int, OwnedFigures]:
    """Per GPU model id with own servers, their figures (two queries, for every model)."""
    amortisation: dict[int, Decimal] = defaultdict(Decimal)
    power: dict[int, Decimal] = defaultdict(Decimal)
    gpus: dict[int, int] = defaultdict(int)
    for host in OwnHost.objects.filter(is_active=True).only(
        "gpus", "purchase_price", "amortisation_months", "power_price_per_gpu_hour"
    ):
        counts = host.gpu_models()
        total = sum(counts.values())
        for model_id, count in counts.items():
            gpus[model_id] += count
            power[model_id] += host.power_price_per_gpu_hour * count
            if host.amortisation_months:
                share = host.purchase_price * count / total
                amortisation[model_id] += share / host.amortisation_months
    rates: dict[int, Decimal] = {}
    cloud = Offering.objects.filter(
        gpu_model_id__in=list(gpus), is_available=True, account__is_active=True
    ).exclude(account__driver=OWN_DRIVER)
    for offering in cloud.only("gpu_model_id", "on_demand_price_per_hour", "gpus_per_instance"):
        rate = offering.rate_per_gpu_hour("on_demand")
        if rate is not None and rate < rates.get(offering.gpu_model_id, rate + 1):
            rates[offering.gpu_model_id] = rate
    return {
        model_id: OwnedFigures(
            gpus=count,
            amortisation_per_gpu_month=quantize(amortisation[model_id] / count),
            power_per_gpu_hour=(power[model_id] / count).quantize(Decimal("0.0001")),
            cloud_rate=rates.get(model_id),
        )
        for model_id, count in gpus.items()
        if count
    }
