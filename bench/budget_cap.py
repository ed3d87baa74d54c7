"""The budget cap's admission check at scale: 2,000,000 usage intervals over 300 projects.

    DATABASE_URL=postgres://postgres@127.0.0.1:5432/gpu_portal_bench_cap \\
        .venv/bin/python bench/budget_cap.py [--intervals 2000000] [--projects 300] [--reset]

Fills the database as ``bench/close_month.py`` does, gives every project a budget, then
measures on the open month (``now`` is 20 April):
- the full computation the check used to run for each submission (``month_to_date`` for
  one project: it apportions every pool over the whole month, median of ``--runs``);
- the periodic refresh that now runs it once for every project (``billing.spend``);
- the check itself, reading the snapshot (median and p95 of ``--checks`` calls, queries);
- that every snapshot equals the full computation, to the cent.
"""

import argparse
import statistics
import sys
import time
from datetime import UTC, datetime, timedelta
from decimal import Decimal
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from bench.run import Refused, drop_database, hardware_line, prepare_database  # noqa: E402

NOW = datetime(2026, 4, 20, 12, 0, 7, tzinfo=UTC)


def measure(*, intervals: int, projects: int, runs: int, checks: int) -> dict[str, object]:
    from django.core.management import call_command
    from django.db import connection
    from django.test.utils import CaptureQueriesContext

    from bench.close_month import fill
    from billing import spend
    from billing.admission import budget_cap
    from billing.models import Budget, SpendSnapshot
    from billing.selectors import month_to_date
    from portal.models import Project

    call_command("flush", interactive=False, verbosity=0)
    count = fill(intervals=intervals, projects=projects)
    ids = list(Project.objects.order_by("pk").values_list("pk", flat=True))
    Budget.objects.bulk_create(
        [Budget(project_id=pk, monthly_amount=Decimal("50000.00"), thresholds=[]) for pk in ids]
    )
    probe = ids[len(ids) // 2]

    def full() -> None:
        month_to_date(project_ids=[probe], now=NOW)

    times = []
    for _ in range(runs):
        began = time.perf_counter()
        full()
        times.append(time.perf_counter() - began)
    full_s = statistics.median(times)

    times = []
    for _ in range(runs):
        began = time.perf_counter()
        spend.refresh(now=NOW)
        times.append(time.perf_counter() - began)
    refresh_s = statistics.median(times)

    everything = month_to_date(project_ids=ids, now=NOW)
    stored = dict(SpendSnapshot.objects.values_list("project_id", "amount"))
    mismatched = [pk for pk in ids if stored.get(pk) != everything.get(pk, Decimal("0.00"))]

    def check(pk: int) -> object:
        return budget_cap(
            project=pk,
            gpu_model=None,
            gpu_count=1,
            tier="burst",
            market="on_demand",
            starts_at=NOW,
            ends_at=NOW + timedelta(hours=1),
            is_reservation=False,
            now=NOW + timedelta(seconds=30),
        )

    with CaptureQueriesContext(connection) as captured:
        check(probe)
    times = []
    for index in range(checks):
        began = time.perf_counter()
        check(ids[index % len(ids)])
        times.append(time.perf_counter() - began)
    times.sort()
    return {
        "intervals": count,
        "full_ms": full_s * 1000,
        "refresh_ms": refresh_s * 1000,
        "check_median_ms": statistics.median(times) * 1000,
        "check_p95_ms": times[min(len(times) - 1, int(len(times) * 0.95))] * 1000,
        "check_queries": len(captured.captured_queries),
        "mismatched_projects": len(mismatched),
    }


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--intervals", type=int, default=2_000_000)
    parser.add_argument("--projects", type=int, default=300)
    parser.add_argument("--runs", type=int, default=3)
    parser.add_argument("--checks", type=int, default=2000)
    parser.add_argument("--reset", action="store_true")
    parser.add_argument("--keep", action="store_true")
    args = parser.parse_args(argv)
    import os

    os.environ.setdefault("DJANGO_SETTINGS_MODULE", "portal.settings")
    os.environ.setdefault("DEBUG", "false")
    url = os.environ.get("DATABASE_URL", "")
    try:
        created = prepare_database(url, reset=args.reset)
    except Refused as refused:
        print(f"bench: {refused}", file=sys.stderr)
        return 2
    import django

    django.setup()
    from django.core.management import call_command

    call_command("migrate", verbosity=0)
    try:
        result = measure(
            intervals=args.intervals, projects=args.projects, runs=args.runs, checks=args.checks
        )
        print(hardware_line())
        for key, value in result.items():
            print(
                f"{key:24} {value:>14,.2f}"
                if isinstance(value, float)
                else f"{key:24} {value:>14,}"
            )
    finally:
        if created and not args.keep:
            from django.db import connections

            connections.close_all()
            drop_database(url)
    return 0 if result["mismatched_projects"] == 0 else 1


if __name__ == "__main__":
    sys.exit(main())
