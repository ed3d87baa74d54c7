"""Matching a provider's bill to the portal's instances, and what each difference means.

Each resource on the bill is matched to an instance by its cloud id, else by the portal's
tags (the idempotency key, then the reservation when it has one instance). Per instance the
portal's cost of the month (its usage runs' billed seconds, B1 and B6, × the rate captured
at launch) is set beside the provider's, day by day, and the difference is explained:

- a rate other than the one captured at launch names the catalog offering whose price
  explains it (the offering priced at what was charged, or the instance's own offering and
  its catalog price when none is);
- a day the portal metered that the bill lacks (or the reverse) is named with its figures;
- a resource the portal never knew is listed with what its tags and type say of it;
- an instance the portal metered that is not on the bill (an account's import only).

A difference beyond the threshold, in percent of the larger of the two costs, is flagged;
so are unknown resources, instances missing from the bill and another currency.
"""

from collections import defaultdict
from collections.abc import Iterable
from dataclasses import dataclass
from datetime import UTC, date, datetime, timedelta
from decimal import Decimal

from billing.money import RATE_PLACES, SECONDS_PER_HOUR
from billing.periods import billed_seconds, period_end
from billing.reconcile_models import CostImportItem
from billing.reconcile_parse import Bill, ResourceBill
from portal.models import Project
from rental.models import Instance, Offering
from rental.selectors import usage_for_period

ZERO = Decimal(0)
HUNDRED = Decimal(100)
DAY = timedelta(days=1)
CHUNK = 5_000
Finding = CostImportItem.Finding
INSTANCE_FIELDS = (
    "pk",
    "external_id",
    "idempotency_key",
    "reservation_id",
    "reservation__project_id",
    "offering_id",
    "offering__gpu_model_id",
    "offering__instance_type",
    "rate_per_hour",
    "currency",
    "market",
    "account_id",
)


@dataclass
class PortalSide:
    """What the portal metered of one instance in the month, per day [seconds, cost]."""

    instance: dict
    days: dict[date, list]
    currencies: set[str]

    @property
    def cost(self) -> Decimal:
        return sum((cell[1] for cell in self.days.values()), ZERO)

    @property
    def hours(self) -> Decimal:
        return Decimal(sum(cell[0] for cell in self.days.values())) / SECONDS_PER_HOUR


def _chunks(values: list, size: int = CHUNK) -> Iterable[list]:
    for index in range(0, len(values), size):
        yield values[index : index + size]


def _instances(**lookup: object) -> Iterable[dict]:
    return Instance.objects.filter(**lookup).values(*INSTANCE_FIELDS).order_by()


def match_instances(bill: Bill, *, account_id: int | None) -> dict[str, tuple[dict, str]]:
    """Resource id → (instance row, how it was matched), for the resources matched."""
    scope = {"account_id": account_id} if account_id is not None else {}
    ids = list(bill.resources)
    matched: dict[str, tuple[dict, str]] = {}
    for chunk in _chunks(ids):
        for row in _instances(external_id__in=chunk, **scope):
            matched[row["external_id"]] = (row, "resource_id")
    rest = [bill.resources[rid] for rid in ids if rid not in matched]
    keys = {r.tags["key"]: r.resource_id for r in rest if r.tags.get("key")}
    for chunk in _chunks(list(keys)):
        for row in _instances(idempotency_key__in=chunk, **scope):
            matched[keys[row["idempotency_key"]]] = (row, "idempotency_key")
    by_lease: dict[int, str] = {}
    for resource in rest:
        tag = resource.tags.get("reservation", "")
        if resource.resource_id not in matched and tag.isdigit() and len(tag) < 12:
            by_lease[int(tag)] = resource.resource_id
    rows: dict[int, list[dict]] = defaultdict(list)
    for chunk in _chunks(list(by_lease)):
        for row in _instances(reservation_id__in=chunk, **scope):
            rows[row["reservation_id"]].append(row)
    claimed = {row["pk"] for row, _how in matched.values()}
    for lease_id, candidates in rows.items():
        free = [row for row in candidates if row["pk"] not in claimed]
        if len(free) == 1:  # a lease of several instances cannot say which one
            matched[by_lease[lease_id]] = (free[0], "reservation")
            claimed.add(free[0]["pk"])
    return matched


def portal_side(
    *, instance_ids: set[int], account_id: int | None, start: datetime, now: datetime
) -> dict[int, PortalSide]:
    """The portal's metered seconds and cost per instance and day of the month (the runs'
    billed seconds, B1 and B6, × the rate captured at launch, in the rate's currency)."""
    end = min(period_end(start), now)
    records = usage_for_period(start=start, end=period_end(start)).select_related(None)
    fields = ("instance_id", "gpu_count", "rate", "currency", "start", "end", "end_reason")
    rows: list = []
    if account_id is not None:
        rows = list(
            records.filter(instance__account_id=account_id).values_list(*fields, named=True)
        )
    else:
        for chunk in _chunks(sorted(instance_ids)):
            rows += records.filter(instance_id__in=chunk).values_list(*fields, named=True)
    sides: dict[int, PortalSide] = {}
    for record in rows:
        side = sides.get(record.instance_id)
        if side is None:
            side = sides[record.instance_id] = PortalSide({}, {}, set())
        side.currencies.add(record.currency)
        day = max(
            datetime(record.start.year, record.start.month, record.start.day, tzinfo=UTC), start
        )
        last = min(record.end or now, end)
        while day < end and day <= last:
            seconds = billed_seconds(record, start=day, end=day + DAY, now=now)
            if seconds:
                cell = side.days.setdefault(day.date(), [0, ZERO])
                cell[0] += seconds
                cell[1] += Decimal(seconds * record.gpu_count) * record.rate / SECONDS_PER_HOUR
            day += DAY
    missing = [pk for pk in sides if not sides[pk].instance]
    for chunk in _chunks(missing):
        for row in _instances(pk__in=chunk):
            sides[row["pk"]].instance = row
    return sides


@dataclass
class Catalog:
    """The catalog's offerings, read once: by instance type, with their prices."""

    by_type: dict[str, list[Offering]]
    by_id: dict[int, Offering]

    @classmethod
    def load(cls) -> "Catalog":
        by_type: dict[str, list[Offering]] = defaultdict(list)
        by_id = {}
        for offering in Offering.objects.select_related("gpu_model", "account").order_by("pk"):
            by_type[offering.instance_type].append(offering)
            by_id[offering.pk] = offering
        return cls(by_type, by_id)

    def priced_at(self, rate: Decimal, instance_type: str) -> tuple[Offering, str] | None:
        """The offering whose catalog price per instance-hour is ``rate``: of the same
        instance type first, then any; with the market whose price it is."""
        offerings = self.by_type.get(instance_type, [])
        others = [
            o for type_, group in self.by_type.items() if type_ != instance_type for o in group
        ]
        for offering in [*offerings, *others]:
            for market in ("on_demand", "spot"):
                price = offering.price_per_hour(market)
                if price is not None and _same_rate(price, rate):
                    return offering, market
        return None


def _same_rate(one: Decimal, other: Decimal) -> bool:
    return one.quantize(RATE_PLACES) == other.quantize(RATE_PLACES)


def _money(value: Decimal) -> str:
    return str(value.quantize(RATE_PLACES))


def _is_over(difference: Decimal, portal: Decimal, provider: Decimal, threshold: Decimal) -> bool:
    base = max(abs(portal), abs(provider))
    return abs(difference) * HUNDRED > threshold * base if base else False


def _provider_rate(bill: ResourceBill) -> Decimal | None:
    """The rate charged for most hours (its own figure, or cost / hours without one)."""
    best = None
    for (_market, rate), (hours, cost) in bill.rates.items():
        value = rate if rate is not None else (cost / hours if hours else None)
        if value is not None and (best is None or hours > best[0]):
            best = (hours, value)
    return best[1] if best else None


def _price_details(
    item: CostImportItem, bill: ResourceBill, instance: dict, catalog: Catalog
) -> dict | None:
    """A rate charged that is not the one captured at launch, and the catalog price that
    explains it, or None."""
    captured = instance["rate_per_hour"]
    charged = [
        (rate if rate is not None else cost / hours, market, hours, cost)
        for (market, rate), (hours, cost) in bill.rates.items()
        if hours
    ]
    wrong = [entry for entry in charged if not _same_rate(entry[0], captured)]
    if not wrong:
        return None
    rate, market, hours, _cost = max(wrong, key=lambda entry: entry[2])
    own = catalog.by_id.get(instance["offering_id"])
    found = catalog.priced_at(rate, instance["offering__instance_type"])
    details = {
        "charged": _money(rate),
        "captured": _money(captured),
        "hours": _money(hours),
        "market": market,
    }
    if found is not None:
        offering, price_market = found
        item.explaining_offering = offering
        details.update(
            explained="other_offering" if offering.pk != instance["offering_id"] else "own_now",
            catalog=_money(offering.price_per_hour(price_market)),
            catalog_market=price_market,
        )
    elif own is not None:
        item.explaining_offering = own
        price = own.price_per_hour(instance["market"])
        details.update(
            explained="own_wrong",
            catalog=_money(price) if price is not None else "",
            catalog_market=instance["market"],
        )
    return details


def _unknown_details(item: CostImportItem, bill: ResourceBill, catalog: Catalog) -> dict:
    details: dict = {"tags": dict(bill.tags)}
    rate = _provider_rate(bill)
    offerings = catalog.by_type.get(bill.instance_type, [])
    if offerings:
        same = [o for o in offerings if bill.region and o.region == bill.region] or offerings
        offering = same[0]
        item.gpu_model_id = offering.gpu_model_id
        item.explaining_offering = offering
        market = "spot" if any(key[0] == "spot" for key in bill.rates) else "on_demand"
        price = offering.price_per_hour(market)
        details.update(catalog=_money(price) if price is not None else "", catalog_market=market)
    if rate is not None:
        details["charged"] = _money(rate)
    return details


def build_items(
    bill: Bill,
    *,
    account_id: int | None,
    start: datetime,
    now: datetime,
    threshold: Decimal,
) -> list[CostImportItem]:
    """Every resource on the bill and every instance the portal metered that the bill
    lacks (an account's import), compared and explained; unsaved."""
    matched = match_instances(bill, account_id=account_id)
    by_pk = {row["pk"]: rid for rid, (row, _how) in matched.items()}
    sides = portal_side(instance_ids=set(by_pk), account_id=account_id, start=start, now=now)
    catalog = Catalog.load()
    slugs = dict(Project.objects.values_list("slug", "pk"))
    items = []
    for rid, resource in bill.resources.items():
        item = CostImportItem(
            resource_id=rid,
            instance_type=resource.instance_type,
            project_tag=resource.tags.get("project", ""),
            provider_hours=resource.hours,
            provider_cost=resource.cost,
            provider_rate=_provider_rate(resource),
        )
        days = {
            day.isoformat(): [_money(h), _money(c)] for day, (h, c) in sorted(resource.days.items())
        }
        if rid not in matched:
            item.project_id = slugs.get(item.project_tag)
            item.details = {**_unknown_details(item, resource, catalog), "provider_days": days}
            item.finding = Finding.UNKNOWN
            item.flagged = True
        else:
            row, how = matched[rid]
            _compare(item, resource, row, sides.get(row["pk"]), bill, catalog, threshold)
            item.matched_by = how
            item.details["provider_days"] = days
        item.difference = item.provider_cost - item.portal_cost
        items.append(item)
    for pk, side in sides.items():
        if pk in by_pk or not side.cost:
            continue
        item = CostImportItem(resource_id=side.instance["external_id"] or f"#{pk}")
        _portal_fields(item, side.instance, side)
        item.finding = Finding.PORTAL_ONLY
        item.flagged = True
        item.difference = -item.portal_cost
        item.details = {"portal_days": _portal_days(side, side.days)}
        items.append(item)
    return items


def _portal_fields(item: CostImportItem, row: dict, side: PortalSide | None) -> None:
    item.instance_id = row["pk"]
    item.project_id = row["reservation__project_id"]
    item.gpu_model_id = row["offering__gpu_model_id"]
    item.instance_type = item.instance_type or row["offering__instance_type"]
    item.portal_rate = row["rate_per_hour"]
    if side is not None:
        item.portal_cost = side.cost
        item.portal_hours = side.hours


def _portal_days(side: PortalSide, days: Iterable[date]) -> list:
    return [
        [
            day.isoformat(),
            _money(Decimal(side.days[day][0]) / SECONDS_PER_HOUR),
            _money(side.days[day][1]),
        ]
        for day in sorted(days)
    ]


def _compare(
    item: CostImportItem,
    bill_of: ResourceBill,
    row: dict,
    side: PortalSide | None,
    bill: Bill,
    catalog: Catalog,
    threshold: Decimal,
) -> None:
    _portal_fields(item, row, side)
    details: dict = {}
    findings: list[str] = []
    if side is not None and side.currencies - {bill.currency}:
        item.finding, item.flagged = Finding.CURRENCY, True
        item.details = {
            "portal_currency": sorted(side.currencies)[0],
            "bill_currency": bill.currency,
        }
        return
    price = _price_details(item, bill_of, row, catalog)
    if price is not None:
        findings.append(Finding.PRICE)
        details["price"] = price
    portal_days = {day for day, cell in (side.days.items() if side else ()) if cell[0]}
    bill_days = {day for day, cell in bill_of.days.items() if cell[0] or cell[1]}
    if portal_days - bill_days:
        findings.append(Finding.MISSING_DAY)
        details["missing_days"] = _portal_days(side, portal_days - bill_days)  # type: ignore[arg-type]
    if bill_days - portal_days:
        findings.append(Finding.EXTRA_DAY)
        details["extra_days"] = [
            [day.isoformat(), _money(bill_of.days[day][0]), _money(bill_of.days[day][1])]
            for day in sorted(bill_days - portal_days)
        ]
    over = _is_over(
        item.provider_cost - item.portal_cost, item.portal_cost, item.provider_cost, threshold
    )
    if over and not findings:
        findings.append(Finding.HOURS)
    item.finding = findings[0] if findings else Finding.MATCHES
    details["findings"] = findings
    item.details = details
    item.flagged = over
