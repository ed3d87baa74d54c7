"""Storage lines (B8): data volumes and stopped instances' disks, per GB-second.

A GB-month is 30 days (2,592,000 s). An interval's billed time is counted once in whole
seconds from its start to its end (or now while it lasts) and then split at period
boundaries like usage (B6): billed second k belongs to the period holding its beginning.

    amount = Σ (size GB × seconds in the period) × price per GB-month / 2,592,000

summed exactly per project and price and kind, then rounded once per line (B2). Example:
500 GB for 3 days (259,200 s) at 0.10 per GB-month is 500 × 259,200 × 0.10 / 2,592,000
= 5.00. Rental's intervals are read only through rental.selectors.
"""

from collections import defaultdict
from dataclasses import dataclass
from datetime import datetime
from decimal import ROUND_HALF_UP, Decimal
from typing import Any

from django.utils.translation import gettext as _

from billing.apportion import Line
from billing.money import quantize
from billing.periods import SECOND, whole_seconds
from rental import billing_reads

STORAGE = "storage"
MONTH_SECONDS = 30 * 24 * 3600  # a GB-month, for storage prices
QUANTITY_PLACES = Decimal("0.000001")
KIND_ORDER = {"volume": 0, "disk": 1}


def gb_seconds_cost(gb_seconds: int, rate_per_gb_month: Decimal) -> Decimal:
    """The exact, unrounded cost of GB-seconds at a price per GB-month."""
    return Decimal(gb_seconds) * rate_per_gb_month / MONTH_SECONDS


def seconds_in(row: Any, *, start: datetime, end: datetime, now: datetime) -> int:
    """Whole seconds of the interval ``row`` billed in [start, end): counted once from its
    start to its end (``now`` while open), then split at the boundaries (B6)."""
    duration = max(whole_seconds((row.end or now) - row.start), 0)

    def before(moment: datetime) -> int:
        return min(max(-((row.start - moment) // SECOND), 0), duration)

    return before(end) - before(start)


@dataclass
class StorageLine(Line):
    """A ``storage`` line: its quantity is GB-months, its unit price per GB-month."""

    gb_seconds: int = 0

    @property
    def quantity(self) -> Decimal:  # type: ignore[override]
        return (Decimal(self.gb_seconds) / MONTH_SECONDS).quantize(
            QUANTITY_PLACES, rounding=ROUND_HALF_UP
        )


@dataclass(frozen=True)
class StorageItem:
    """One interval as the drill-down shows it."""

    interval_id: int
    project_id: int
    kind: str
    name: str
    volume_id: int | None
    instance_id: int | None
    reservation_id: int | None
    size_gb: int
    rate: Decimal
    start: datetime
    end: datetime | None
    seconds: int

    @property
    def gb_seconds(self) -> int:
        return self.size_gb * self.seconds

    @property
    def exact_cost(self) -> Decimal:
        return gb_seconds_cost(self.gb_seconds, self.rate)


def items(
    *,
    start: datetime,
    end: datetime,
    now: datetime,
    project_ids: list[int] | None = None,
    kind: str = "",
    rate: Decimal | None = None,
) -> list[StorageItem]:
    """The storage intervals billed in [start, end), in one query."""
    result = []
    for row in billing_reads.storage_intervals_for_period(
        start=start, end=end, project_ids=project_ids
    ):
        if (kind and row.kind != kind) or (rate is not None and row.rate_per_gb_month != rate):
            continue
        seconds = seconds_in(row, start=start, end=end, now=now)
        if seconds:
            result.append(
                StorageItem(
                    interval_id=row.id,
                    project_id=row.project_id,
                    kind=row.kind,
                    name=row.name or "",
                    volume_id=row.volume_id,
                    instance_id=row.instance_id,
                    reservation_id=row.reservation_id,
                    size_gb=row.size_gb,
                    rate=row.rate_per_gb_month,
                    start=row.start,
                    end=row.end,
                    seconds=seconds,
                )
            )
    return result


def _description(kind: str) -> str:
    return _("Data volumes") if kind == "volume" else _("Stopped instances' disks")


def storage_lines(*, start: datetime, end: datetime, now: datetime) -> dict[int, list[Line]]:
    """Per project, one ``storage`` line per kind (volumes, stopped disks) and price."""
    grouped: dict[int, dict[tuple[str, Decimal], list[StorageItem]]] = defaultdict(
        lambda: defaultdict(list)
    )
    for item in items(start=start, end=end, now=now):
        grouped[item.project_id][(item.kind, item.rate)].append(item)
    lines: dict[int, list[Line]] = {}
    for project_id in sorted(grouped):
        for (kind, rate), members in sorted(
            grouped[project_id].items(), key=lambda kv: (KIND_ORDER.get(kv[0][0], 9), kv[0][1])
        ):
            gb_seconds = sum(member.gb_seconds for member in members)
            amount = quantize(gb_seconds_cost(gb_seconds, rate))
            lines.setdefault(project_id, []).append(
                StorageLine(
                    project_id=project_id,
                    kind=STORAGE,
                    amount=amount,
                    description=_("%(what)s at %(rate)s per GB-month")
                    % {"what": _description(kind), "rate": rate.normalize()},
                    unit_price=rate,
                    gb_seconds=gb_seconds,
                    references={
                        "storage": kind,
                        "rate": str(rate),
                        "gb_seconds": gb_seconds,
                        "items": len(members),
                        "month_seconds": MONTH_SECONDS,
                        "formula": "GB × seconds × price per GB-month / 2,592,000 (30 days)",
                        "from": start.isoformat(),
                        "to": end.isoformat(),
                    },
                )
            )
    return lines
