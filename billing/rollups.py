"""Usage rollups: each period's billed GPU-seconds per project and usage key, kept in step
with the usage, so that one project's statement does not read the whole company's month.

A statement's lines depend on other projects' usage (the unassigned commitment is split by
burst use, ``by_usage`` pools by everyone's GPU-seconds), so a month's figures need every
project's seconds per usage key. Closed runs never change, so their seconds are added once
to ``UsageRollup`` rows per period and the run is marked rolled up, in one transaction; a
reader adds the runs not rolled up yet (open runs, runs closed since the last roll-up: a few
thousand, read through a partial index) with the same rule (``billing.periods``). Every run
is thus counted exactly once: in the rollups or live, never both, never neither.

- The roll-up runs with each spend refresh (every minute) and before a month closes.
- A roll-up takes the period's ``RolledPeriod`` row lock and bumps its version; a reader
  checks the version before and after its reads and reads again when it moved, so rollups
  and live runs are always seen from one moment.
- A computation as of a moment before the latest rolled-up run's end (a replay) cannot
  use the rollups; it reads the month's runs, as closing does.
- Closing a month computes its lines from the runs themselves and checks that the rollups
  give the same lines, to the digit (``billing.services.close_period``).
"""

from collections import defaultdict
from collections.abc import Callable, Iterable
from datetime import datetime
from typing import Any

from django.conf import settings
from django.db import connection, transaction
from django.db.models import Count, F, Max, Min

from billing.models import RequesterRollup, RolledPeriod, UsageRollup
from billing.periods import (
    GROUP_FIELDS,
    aggregate_billed_seconds,
    billed_seconds,
    period_end,
    period_start,
    whole_seconds,
)
from rental import billing_reads
from rental.models.leases import PLATFORM_ENDED

ROLL_UP_BATCH = 20_000
# Reads retried when a roll-up commits between them, before reading the month's runs.
READ_ATTEMPTS = 3

# A rollup row's key: what a statement's usage line is per (the aggregate's groups).
KEY_FIELDS = GROUP_FIELDS
# A requester rollup row's key: a requester's seconds per rate, which their value needs.
REQUESTER_FIELDS = ("project_id", "requester_id", "rate", "currency", "exchange_rate")
# The same, as field paths from a usage run.
REQUESTER_PATHS = ("project_id", billing_reads.REQUESTER, "rate", "currency", "exchange_rate")


def _periods(run: Any) -> Iterable[datetime]:
    """The periods a closed run may bill in: from the one it began in to the one it ended
    in (a run ending exactly at a month's start owes any top-up to the month before)."""
    period = period_start(run.start)
    last = period_start(run.end)
    while period <= last:
        yield period
        period = period_end(period)


def _key(run: Any) -> tuple:
    return tuple(getattr(run, name) for name in KEY_FIELDS)


def _requester_key(run: Any) -> tuple:
    return tuple(getattr(run, name) for name in REQUESTER_PATHS)


def roll_up_usage(*, batch: int = ROLL_UP_BATCH) -> int:
    """Add every closed run not rolled up yet to its periods' rollups, ``batch`` runs a
    transaction. Returns the number of runs rolled up. Safe to run twice at once: runs
    another roll-up has claimed are skipped, and each period's rows are merged under its
    lock."""
    done = after = 0
    while True:
        with transaction.atomic():
            runs = billing_reads.claim_usage_to_roll_up(after=after, limit=batch)
            if runs:
                _add(runs)
                billing_reads.mark_rolled_up(run.id for run in runs)
        done += len(runs)
        if len(runs) < batch:
            return done
        after = runs[-1].id  # onwards: a run skipped here is taken by the next roll-up


def rebuild(*, in_database: bool | None = None) -> int:
    """Every period's rollups again, from the runs marked rolled up: one aggregate query a
    period on PostgreSQL (``billing.periods.aggregate_billed_seconds``, the rule closing
    uses), row by row elsewhere. For a bulk load that writes closed runs already marked
    (the bench), and for an operator who doubts the rollups (``manage.py
    rebuild_usage_rollups``). Run it with the beat stopped: it replaces what a roll-up
    running at the same time would add. Returns the rollup rows written."""
    if in_database is None:
        in_database = connection.vendor == "postgresql"
    with transaction.atomic():
        UsageRollup.objects.all().delete()
        RequesterRollup.objects.all().delete()
        RolledPeriod.objects.all().delete()
        span = billing_reads.rolled_usage().aggregate(first=Min("start"), last=Max("end"))
        if span["first"] is None:
            return 0
        if not in_database:
            after = 0
            while runs := list(
                billing_reads.rolled_usage()
                .filter(id__gt=after)
                .order_by("id")
                .values_list(*billing_reads.USAGE_ROW_FIELDS, billing_reads.REQUESTER, named=True)[
                    :ROLL_UP_BATCH
                ]
            ):
                _add(runs)
                after = runs[-1].id
            return UsageRollup.objects.count()
        written = 0
        period = period_start(span["first"])
        while period <= span["last"]:
            following = period_end(period)
            runs = billing_reads.rolled_usage(start=period, end=following)
            through = runs.aggregate(through=Max("end"))["through"]
            if through is not None:
                rows = [
                    UsageRollup(
                        period=period.date(),
                        runs=row["runs"],
                        gpu_seconds=int(row["gpu_seconds"]),
                        **{name: row[name] for name in KEY_FIELDS},
                    )
                    for row in aggregate_billed_seconds(
                        runs, start=period, end=following, now=following
                    ).annotate(runs=Count("id"))
                    if row["gpu_seconds"]
                ]
                UsageRollup.objects.bulk_create(rows, batch_size=1000)
                RequesterRollup.objects.bulk_create(
                    [
                        RequesterRollup(
                            period=period.date(),
                            runs=row["runs"],
                            gpu_seconds=int(row["gpu_seconds"]),
                            **dict(
                                zip(
                                    REQUESTER_FIELDS,
                                    (row[path] for path in REQUESTER_PATHS),
                                    strict=True,
                                )
                            ),
                        )
                        for row in aggregate_billed_seconds(
                            runs, start=period, end=following, now=following, fields=REQUESTER_PATHS
                        ).annotate(runs=Count("id"))
                        if row["gpu_seconds"]
                    ],
                    batch_size=1000,
                )
                RolledPeriod.objects.create(period=period.date(), through=through, version=1)
                written += len(rows)
            period = following
        return written


def _add(runs: list) -> None:
    """Within the caller's transaction: the runs' billed seconds, merged into the rollups."""
    sums: dict[datetime, dict[tuple, list[int]]] = defaultdict(lambda: defaultdict(lambda: [0, 0]))
    people: dict[datetime, dict[tuple, list[int]]] = defaultdict(
        lambda: defaultdict(lambda: [0, 0])
    )
    through: dict[datetime, datetime] = {}
    minimum = settings.PORTAL_MINIMUM_BILLED_SECONDS
    for run in runs:
        first = period_start(run.start)
        if first == period_start(run.end):
            # Most runs begin and end in one period: all their seconds are billed there,
            # topped up to the minimum when short and not ended by the platform (B1).
            seconds = whole_seconds(run.end - run.start)
            if seconds < minimum and run.end_reason not in PLATFORM_ENDED:
                seconds = minimum
            parts = [(first, seconds)]
        else:
            parts = [
                (period, billed_seconds(run, start=period, end=period_end(period), now=run.end))
                for period in _periods(run)
            ]
        for period, seconds in parts:
            through[period] = max(through.get(period, run.end), run.end)
            if seconds:
                for row in (sums[period][_key(run)], people[period][_requester_key(run)]):
                    row[0] += seconds * run.gpu_count
                    row[1] += 1
    days = sorted(period.date() for period in through)
    RolledPeriod.objects.bulk_create(
        [RolledPeriod(period=day, through=through[period_start(day)]) for day in days],
        ignore_conflicts=True,
    )
    # The periods' locks, in one order, so two roll-ups never wait on each other in a circle.
    states = list(
        RolledPeriod.objects.select_for_update().filter(period__in=days).order_by("period")
    )
    for state in states:
        start = period_start(state.period)
        _merge(state.period, sums.get(start, {}), model=UsageRollup, fields=KEY_FIELDS)
        _merge(state.period, people.get(start, {}), model=RequesterRollup, fields=REQUESTER_FIELDS)
        RolledPeriod.objects.filter(pk=state.pk).update(
            through=max(state.through, through[start]), version=F("version") + 1
        )


def _merge(
    day: Any, sums: dict[tuple, list[int]], *, model: type[Any], fields: tuple[str, ...]
) -> None:
    """One period's new seconds into its rows of ``model`` keyed by ``fields`` (the
    period's lock is held)."""
    if not sums:
        return
    rows = {
        tuple(getattr(row, name) for name in fields): row
        for row in model.objects.filter(period=day).only(*fields, "gpu_seconds", "runs")
    }
    changed, added = [], []
    for key, (seconds, runs) in sums.items():
        row = rows.get(key)
        if row is None:
            added.append(
                model(
                    period=day,
                    gpu_seconds=seconds,
                    runs=runs,
                    **dict(zip(fields, key, strict=True)),
                )
            )
        else:
            row.gpu_seconds += seconds
            row.runs += runs
            changed.append(row)
    model.objects.bulk_update(changed, ["gpu_seconds", "runs"], batch_size=1000)
    model.objects.bulk_create(added, batch_size=1000)


def usable(*, start: datetime, now: datetime, through: datetime | None) -> bool:
    """Whether the rollups can serve a computation of the period starting ``start`` as of
    ``now``: every rolled-up run in it had ended by then (or the period has)."""
    return through is None or now >= through or now >= period_end(start)


def serve(*, start: datetime, now: datetime) -> bool:
    """Whether the period starting ``start`` has rollups that can serve ``now``."""
    through = (
        RolledPeriod.objects.filter(period=start.date()).values_list("through", flat=True).first()
    )
    return through is not None and usable(start=start, now=now, through=through)


def read_usage(
    *,
    start: datetime,
    now: datetime,
    live: Callable[[], Iterable[tuple[dict, int]]],
    stored: Callable[[Any], Iterable[tuple[dict, int]]] | None = None,
) -> list[tuple[dict, int]] | None:
    """The period's usage as (key fields, GPU-seconds) pairs: its rollups (``stored(day)``,
    by default every ``UsageRollup`` row of the period) plus ``live()`` (the runs not
    rolled up, summed by the caller's rule), from one moment. None when the rollups cannot
    serve ``now`` (the caller then reads the month's runs)."""
    stored = stored or _usage_rows
    day = start.date()
    for _attempt in range(READ_ATTEMPTS):
        state = RolledPeriod.objects.filter(period=day).values_list("through", "version").first()
        through, version = state or (None, 0)
        if not usable(start=start, now=now, through=through):
            return None
        found = list(stored(day))
        found += list(live())
        after = RolledPeriod.objects.filter(period=day).values_list("version", flat=True).first()
        if (after or 0) == version:
            return found
    return None


def _usage_rows(day: Any) -> Iterable[tuple[dict, int]]:
    return [
        (row, row["gpu_seconds"])
        for row in UsageRollup.objects.filter(period=day).values(*KEY_FIELDS, "gpu_seconds")
    ]


def requester_rows(day: Any, project_ids: list[int] | None) -> Iterable[tuple[dict, int]]:
    """A period's requester rollups (of ``project_ids``, or every project's) as
    (``REQUESTER_FIELDS``, GPU-seconds) pairs, for ``read_usage(stored=...)``."""
    rows = RequesterRollup.objects.filter(period=day)
    if project_ids is not None:
        rows = rows.filter(project_id__in=project_ids)
    return [(row, row["gpu_seconds"]) for row in rows.values(*REQUESTER_FIELDS, "gpu_seconds")]
