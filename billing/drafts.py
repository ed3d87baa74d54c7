"""The open month's computed lines of every project, kept as of the last spend refresh.

A project's lines depend on every project's usage (B5 splits), so computing one project's
draft statement means computing the company's month: a dozen queries and every project's
figures. The spend refresh computes exactly that every minute (``billing.spend``); it now
keeps the lines too, one ``DraftLines`` row per project, and a statement page reads its
own row. Invalidation, all of it:

- each refresh rewrites every row of the current period (``as_of`` = its now) and removes
  the rows of projects that no longer have lines and of earlier periods;
- manual lines (adjustments, credits) are never kept here: readers add them live;
- rows older than ``PORTAL_SPEND_SNAPSHOT_MAX_AGE_SECONDS``, or written after the moment
  asked for, are not used: the reader computes the month in full, as before.

So a draft statement is at most one refresh old (the page says as of when), and what a
row holds is exactly what ``compute_period`` gave at ``as_of`` (``tests/billing``).
"""

from dataclasses import dataclass, field, fields
from datetime import datetime, timedelta
from decimal import Decimal
from typing import Any

from django.conf import settings
from django.db import transaction

from billing.apportion import Line
from billing.models import DraftLines
from billing.requesters import RequesterSpend
from billing.statements import PeriodLines, compute_period
from billing.storage import StorageLine

DECIMAL_FIELDS = frozenset({"amount", "unit_price"})
KINDS: dict[str, type[Line]] = {"line": Line, "storage": StorageLine}


def line_data(line: Line) -> dict[str, Any]:
    """A computed line as JSON data that ``line_from`` turns back into an equal line."""
    data: dict[str, Any] = {"type": "storage" if isinstance(line, StorageLine) else "line"}
    for item in fields(line):
        value = getattr(line, item.name)
        data[item.name] = str(value) if item.name in DECIMAL_FIELDS else value
    return data


def line_from(data: dict[str, Any]) -> Line:
    values = {key: value for key, value in data.items() if key != "type"}
    for name in DECIMAL_FIELDS:
        values[name] = Decimal(values[name])
    return KINDS[data["type"]](**values)


def store(
    computed: PeriodLines,
    *,
    now: datetime,
    requesters: dict[int, list[RequesterSpend]] | None = None,
) -> int:
    """Keep every project's computed lines of the period as of ``now``, and its spend per
    requester as of the same moment. Returns the rows."""
    requesters = requesters or {}
    period = computed.start.date()
    rows = [
        DraftLines(
            period=period,
            project_key=project_id if project_id is not None else DraftLines.PLATFORM,
            as_of=now,
            covered_end=computed.covered_end,
            lines=[line_data(line) for line in lines],
            line_count=len(lines),
            total=sum((line.amount for line in lines), Decimal("0.00")),
            requesters=[spend.data() for spend in requesters.get(project_id, [])]
            if project_id is not None
            else [],
            pools={str(model): figures for model, figures in computed.pools.items()}
            if project_id is None
            else {},
        )
        for project_id, lines in computed.lines.items()
    ]
    if None not in computed.lines:
        rows.append(
            DraftLines(
                period=period,
                project_key=DraftLines.PLATFORM,
                as_of=now,
                covered_end=computed.covered_end,
                pools={str(model): figures for model, figures in computed.pools.items()},
            )
        )
    with transaction.atomic():
        DraftLines.objects.bulk_create(
            rows,
            update_conflicts=True,
            unique_fields=["period", "project_key"],
            update_fields=[
                "as_of",
                "covered_end",
                "lines",
                "pools",
                "line_count",
                "total",
                "requesters",
            ],
            batch_size=500,
        )
        DraftLines.objects.filter(period=period, as_of__lt=now).delete()
        DraftLines.objects.filter(period__lt=period).delete()
    return len(rows)


@dataclass(frozen=True)
class Kept:
    """The kept lines of some projects (None: the platform's) with the period's figures."""

    start: datetime
    as_of: datetime
    covered_end: datetime
    lines: dict[int | None, list[Line]]
    pools: dict[int, dict[str, str]]
    requesters: dict[int, list[RequesterSpend]] = field(default_factory=dict)

    def for_project(self, project_id: int | None) -> list[Line]:
        return self.lines.get(project_id, [])


def read(*, start: datetime, now: datetime, project_ids: list[int] | None) -> Kept | None:
    """The kept lines of ``project_ids`` (every project: None) in the period starting
    ``start``, in one query; None when they are missing, too old, or newer than ``now``."""
    rows = DraftLines.objects.filter(period=start.date())
    if project_ids is not None:
        rows = rows.filter(project_key__in=[DraftLines.PLATFORM, *project_ids])
    found = list(
        rows.values_list(
            "project_key", "as_of", "covered_end", "lines", "pools", "requesters", named=True
        )
    )
    header = next((row for row in found if row.project_key == DraftLines.PLATFORM), None)
    max_age = timedelta(seconds=settings.PORTAL_SPEND_SNAPSHOT_MAX_AGE_SECONDS)
    if header is None or not now - max_age <= header.as_of <= now:
        return None
    if any(row.as_of != header.as_of for row in found):
        return None  # rows of two refreshes: not one moment
    return Kept(
        start=start,
        as_of=header.as_of,
        covered_end=header.covered_end,
        lines={
            None if row.project_key == DraftLines.PLATFORM else row.project_key: [
                line_from(data) for data in row.lines
            ]
            for row in found
            if row.lines
        },
        pools={int(model): figures for model, figures in header.pools.items()},
        requesters={
            row.project_key: [RequesterSpend.from_data(data) for data in row.requesters]
            for row in found
            if row.project_key != DraftLines.PLATFORM
        },
    )


@dataclass(frozen=True)
class KeptTotal:
    """A project's kept lines as the finance page lists them: how many, and their sum."""

    line_count: int
    total: Decimal


def read_totals(*, start: datetime, now: datetime) -> tuple[dict[int, KeptTotal], Kept] | None:
    """Every project's kept line count and total (the lines themselves not read), and the
    platform's kept lines, in two queries; None when they are missing or not fresh."""
    rows = list(
        DraftLines.objects.filter(period=start.date())
        .exclude(project_key=DraftLines.PLATFORM)
        .values_list("project_key", "as_of", "line_count", "total")
    )
    platform = read(start=start, now=now, project_ids=[])
    if platform is None or any(as_of != platform.as_of for _key, as_of, _n, _t in rows):
        return None
    return {key: KeptTotal(count, total) for key, _as_of, count, total in rows}, platform


def kept_or_computed(
    *, start: datetime, now: datetime, project_ids: list[int] | None
) -> Kept | PeriodLines:
    """The period's lines as kept at the last refresh when fresh, else computed now."""
    return read(start=start, now=now, project_ids=project_ids) or compute_period(
        period=start, now=now
    )
