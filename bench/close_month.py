"""Close a month at scale: 2,000,000 usage intervals over 300 projects, then twice that.

    DATABASE_URL=postgres://postgres@127.0.0.1:5432/gpu_portal_bench_close \\
        .venv/bin/python bench/close_month.py [--intervals 2000000] [--projects 300] [--reset]

For each size the database is emptied and filled (``bench.generate`` for people,
pools, quotas and leases; the usage intervals by one INSERT … SELECT in PostgreSQL,
with microsecond starts, runs across both month boundaries, short user-ended runs
that owe a top-up and preempted ones that do not), analysed, and then measured:
computing the month (median of ``--runs``), closing it (statements and locked lines
written; emptied by TRUNCATE between runs, which the row guard does not see), and the
statement and finance pages (p95 wall time and SQL queries). Goals: closing ≤ 3 s at
2,000,000 intervals, and ≤ 2.2× when the data doubles.
"""

import argparse
import statistics
import sys
import time
from datetime import UTC, datetime
from decimal import Decimal
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from bench.run import Refused, drop_database, hardware_line, prepare_database  # noqa: E402

MONTH = datetime(2026, 4, 1, tzinfo=UTC)
AFTER = datetime(2026, 5, 3, tzinfo=UTC)

USAGE_SQL = """
SELECT setseed(0.42);
INSERT INTO rental_usagerecord
    (instance_id, project_id, gpu_model_id, tier, market, gpu_count, start, "end", rate, end_reason,
     currency, exchange_rate)
SELECT i.id, r.project_id, r.gpu_model_id, r.tier, i.market, i.gpu_count,
       s.start, s.start + s.length, i.rate_per_hour / i.gpu_count, s.reason,
       i.currency, i.exchange_rate
FROM rental_instance i
JOIN rental_reservation r ON r.id = i.reservation_id
CROSS JOIN LATERAL (
    SELECT timestamptz '2026-03-31 20:00:00+00'
               + (g * interval '1 second' * (31 * 86400 + 8 * 3600) / %(per_instance)s)
               + random() * interval '1 second' AS start,
           CASE WHEN random() < 0.05 THEN random() * interval '59 seconds'
                ELSE random() * interval '2 hours' END AS length,
           CASE WHEN random() < 0.1 THEN 'preempted' ELSE 'user' END AS reason
    FROM generate_series(0, %(per_instance)s - 1) AS g
) AS s
WHERE i.id IN (SELECT id FROM rental_instance ORDER BY id LIMIT %(instances)s);
"""


def fill(*, intervals: int, projects: int) -> int:
    """People, pools and leases from ``bench.generate``, then ``intervals`` usage runs."""
    from django.db import connection

    from bench.generate import generate
    from rental.models import Instance, Pool, Quota, UsageRecord

    generate(projects=projects, leases_per_project=12, seed=7, now=AFTER)
    UsageRecord.objects.all().delete()
    # Committed capacity with a monthly cost, so every statement has shared lines.
    for pool in Pool.objects.all():
        guaranteed = sum(
            Quota.objects.filter(gpu_model=pool.gpu_model).values_list("guaranteed", flat=True)
        )
        pool.capacity = max(pool.capacity, guaranteed + 8)
        pool.committed_gpus = guaranteed + 4
        pool.committed_monthly_cost = Decimal("120000.00")
        pool.save()
    instances = Instance.objects.count()
    per_instance = -(-intervals // instances)
    needed = -(-intervals // per_instance)
    with connection.cursor() as cursor:
        cursor.execute(USAGE_SQL, {"per_instance": per_instance, "instances": needed})
        cursor.execute("ANALYZE")
    return UsageRecord.objects.count()


def timed(call, runs: int) -> tuple[float, list[float]]:
    times = []
    for _ in range(runs):
        began = time.perf_counter()
        call()
        times.append(time.perf_counter() - began)
    return statistics.median(times), times


def measure(*, intervals: int, projects: int, runs: int) -> dict[str, object]:
    from django.core.management import call_command
    from django.db import connection
    from django.test import Client
    from django.test.utils import CaptureQueriesContext

    from billing import services
    from billing.statements import compute_period
    from portal.models import Project

    call_command("flush", interactive=False, verbosity=0)
    began = time.perf_counter()
    count = fill(intervals=intervals, projects=projects)
    generated = time.perf_counter() - began

    compute_s, _ = timed(lambda: compute_period(period=MONTH, now=AFTER), runs)

    def close() -> None:
        with connection.cursor() as cursor:
            # The bill's reconciliation items point at lines too (none in this bench).
            cursor.execute(
                "TRUNCATE billing_costimportitem, billing_linedispute, billing_statementline, "
                "billing_statement"
            )
        services.close_period(period=MONTH, now=AFTER)

    close_s, _ = timed(close, runs)
    assert services.recompute_closed(period=MONTH, now=AFTER) == {}

    from django.contrib.auth import get_user_model

    admin = get_user_model().objects.filter(is_staff=True).first()
    client = Client()
    client.force_login(admin)
    slug = Project.objects.order_by("slug").values_list("slug", flat=True).first()
    pages = {
        "statement page (closed month)": f"/billing/projects/{slug}/statement/?period=2026-04",
        "finance page (closed month)": "/billing/finance/?period=2026-04",
        "finance CSV (closed month)": "/billing/finance/?period=2026-04&format=csv",
    }
    results: dict[str, object] = {
        "intervals": count,
        "generate_s": generated,
        "compute_s": compute_s,
        "close_s": close_s,
    }
    for label, path in pages.items():
        with CaptureQueriesContext(connection) as captured:
            response = client.get(path)
        assert response.status_code == 200, (label, response.status_code)
        queries = len(captured.captured_queries)
        _, times = timed(lambda path=path: client.get(path), max(runs * 4, 10))
        times.sort()
        p95 = times[min(len(times) - 1, int(len(times) * 0.95))]
        results[label] = (queries, p95)
    return results


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--intervals", type=int, default=2_000_000)
    parser.add_argument("--projects", type=int, default=300)
    parser.add_argument("--runs", type=int, default=3)
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
    from django.conf import settings
    from django.core.management import call_command

    settings.EMAIL_BACKEND = "django.core.mail.backends.locmem.EmailBackend"

    call_command("migrate", verbosity=0)
    try:
        sizes = [args.intervals, args.intervals * 2]
        results = [measure(intervals=n, projects=args.projects, runs=args.runs) for n in sizes]
        print(hardware_line())
        print(f"{'':40} | {sizes[0]:>12,} | {sizes[1]:>12,} | growth")
        for key in ("intervals", "generate_s", "compute_s", "close_s"):
            first, second = results[0][key], results[1][key]
            growth = f"{second / first:.2f}×" if first else "—"
            print(f"{key:40} | {first:>12,.2f} | {second:>12,.2f} | {growth}")
        for key in results[0]:
            if isinstance(results[0][key], tuple):
                (q1, t1), (q2, t2) = results[0][key], results[1][key]
                print(
                    f"{key + ' p95 s (queries)':40} | {t1:>7.2f} ({q1:>2}) | {t2:>7.2f} ({q2:>2})"
                    f" | {t2 / t1:.2f}×"
                )
    finally:
        if created and not args.keep:
            from django.db import connections

            connections.close_all()
            drop_database(url)
    return 0


if __name__ == "__main__":
    sys.exit(main())
