"""Measure the list pages and billing reads at growing data sizes.

    DATABASE_URL=postgres://postgres@127.0.0.1:5432/gpu_portal_bench \\
        .venv/bin/python bench/run.py [--sizes 100,1000,10000] [--reset] [--keep]

For each size (total leases) the database is emptied, filled by
``bench.generate``, analysed, and every page is fetched with Django's test
client as a manager, an engineer and an admin: SQL queries on the first fetch,
median wall time over ``--runs`` more. Exits 1 when a page's query count
changes with the size (list pages keep a fixed number of queries), 2 when the
database cannot be used.
"""

import argparse
import logging
import os
import platform
import statistics
import sys
import time
from collections.abc import Callable
from dataclasses import dataclass
from datetime import timedelta
from functools import partial
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

# Production-like rendering (no DEBUG query log); the environment may still override.
os.environ.setdefault("DJANGO_SETTINGS_MODULE", "portal.settings")
os.environ.setdefault("DEBUG", "false")

import dj_database_url  # noqa: E402
import psycopg  # noqa: E402
from psycopg import sql  # noqa: E402

LIVE_PER_PROJECT = 2  # as in bench.generate, which imports Django models
PERSONAS = ("manager", "engineer", "admin")
PROTECTED_DATABASES = {"postgres", "template0", "template1"}


class Refused(Exception):
    pass


@dataclass
class Row:
    """One measured thing (a page as a persona, or a selector) across the sizes."""

    label: str
    queries: dict[int, int]
    ms: dict[int, float]
    status: dict[int, int]


def _server(url: str) -> tuple[dict[str, Any], str]:
    config = dj_database_url.parse(url)
    if config["ENGINE"] != "django.db.backends.postgresql":
        raise Refused(f"DATABASE_URL must point at PostgreSQL, not {config['ENGINE']}.")
    connect = {
        "host": config.get("HOST") or "127.0.0.1",
        "port": config.get("PORT") or 5432,
        "user": config.get("USER") or "postgres",
        "password": config.get("PASSWORD") or None,
    }
    return connect, config["NAME"]


def prepare_database(url: str, *, reset: bool) -> bool:
    """Make sure the bench database exists and is empty; True when this run created it.

    An existing database with any table in it is refused unless ``reset``, which
    drops and recreates it.
    """
    connect, name = _server(url)
    if name in PROTECTED_DATABASES:
        raise Refused(f"will not use the {name!r} database for a bench.")
    with psycopg.connect(dbname="postgres", autocommit=True, **connect) as admin:
        exists = admin.execute("SELECT 1 FROM pg_database WHERE datname = %s", [name]).fetchone()
        if exists:
            with psycopg.connect(dbname=name, **connect) as target:
                tables = target.execute(
                    "SELECT count(*) FROM information_schema.tables WHERE table_schema = 'public'"
                ).fetchone()[0]
            if tables and not reset:
                raise Refused(
                    f"database {name!r} already has {tables} tables; "
                    "pass --reset to drop and recreate it."
                )
            if not tables:
                return False
            admin.execute(sql.SQL("DROP DATABASE {} WITH (FORCE)").format(sql.Identifier(name)))
        admin.execute(sql.SQL("CREATE DATABASE {}").format(sql.Identifier(name)))
    return True


def drop_database(url: str) -> None:
    connect, name = _server(url)
    with psycopg.connect(dbname="postgres", autocommit=True, **connect) as admin:
        admin.execute(
            sql.SQL("DROP DATABASE IF EXISTS {} WITH (FORCE)").format(sql.Identifier(name))
        )


def hardware_line() -> str:
    from django.db import connection

    cpus = len(os.sched_getaffinity(0))
    model = ""
    cpuinfo = Path("/proc/cpuinfo")
    if cpuinfo.exists():
        for line in cpuinfo.read_text().splitlines():
            if line.startswith("model name"):
                model = line.split(":", 1)[1].strip()
                break
    with connection.cursor() as cursor:
        cursor.execute("SHOW server_version")
        postgres = cursor.fetchone()[0]
    import django

    return (
        f"nproc {cpus}{f' ({model})' if model else ''} · Python {platform.python_version()} · "
        f"Django {django.get_version()} · PostgreSQL {postgres}"
    )


def _measure(call: Callable[[], Any], runs: int) -> tuple[int, float, Any]:
    """(queries of the first call, median ms of ``runs`` further calls, the first result)."""
    from django.db import connection
    from django.test.utils import CaptureQueriesContext

    with CaptureQueriesContext(connection) as captured:
        first = call()
    # Read now: the next request clears the connection's query log.
    queries = len(captured.captured_queries)
    times = []
    for _ in range(runs):
        began = time.perf_counter()
        call()
        times.append((time.perf_counter() - began) * 1000)
    return queries, statistics.median(times), first


def measure_size(
    size: int, *, projects: int, seed: int, runs: int, rows: dict[str, Row]
) -> tuple[float, int]:
    """Fill the database for ``size`` leases and measure every page and selector into
    ``rows``; returns the generation time in seconds and the usage record count."""
    from django.core.management import call_command
    from django.db import connection
    from django.test import Client

    from bench.generate import generate
    from billing.selectors import draft_statement, month_to_date, period_start

    call_command("flush", interactive=False, verbosity=0)
    began = time.perf_counter()
    data = generate(projects=projects, leases_per_project=size // projects, seed=seed)
    generated_s = time.perf_counter() - began
    with connection.cursor() as cursor:
        cursor.execute("ANALYZE")

    slug = data.projects[0].slug
    previous_start = period_start(period_start(data.now) - timedelta(days=1))
    previous = previous_start.strftime("%Y-%m")
    pages = [
        ("/leases/", {}),
        ("/leases/?status=ended&page=last", {}),
        ("/leases/_list/", {"HX-Request": "true"}),
        ("/approvals/", {}),
        ("/projects/", {}),
        (f"/projects/{slug}/", {}),
        (f"/billing/projects/{slug}/statement/", {}),
        (f"/billing/projects/{slug}/statement/?period={previous}", {}),
        ("/billing/panels/spend/", {"HX-Request": "true"}),
    ]
    for persona in PERSONAS:
        client = Client()
        client.force_login(getattr(data, persona))
        for path, headers in pages:
            label = f"{path.replace(slug, '<slug>').replace(previous, '<prev>')} · {persona}"
            queries, ms, response = _measure(partial(client.get, path, headers=headers), runs)
            row = rows.setdefault(label, Row(label, {}, {}, {}))
            row.queries[size], row.ms[size], row.status[size] = queries, ms, response.status_code

    project_ids = [project.pk for project in data.projects]
    selectors = [
        (
            "draft_statement(one project, this month)",
            lambda: draft_statement(project_id=project_ids[0]),
        ),
        (
            "draft_statement(one project, previous month)",
            lambda: draft_statement(project_id=project_ids[0], period=previous_start),
        ),
        (
            f"month_to_date({len(project_ids)} projects)",
            lambda: month_to_date(project_ids=project_ids),
        ),
    ]
    for label, call in selectors:
        queries, ms, _ = _measure(call, runs)
        row = rows.setdefault(label, Row(label, {}, {}, {}))
        row.queries[size], row.ms[size], row.status[size] = queries, ms, 0
    return generated_s, data.usage_records


def print_table(rows: dict[str, Row], sizes: list[int]) -> None:
    width = max(len(label) for label in rows) + 2
    head = "".join(f"{f'{size} leases':>20}" for size in sizes)
    print(f"{'page · persona / selector':<{width}}{'HTTP':>5}{head}")
    print(f"{'':<{width}}{'':>5}" + "".join(f"{'queries      ms':>20}" for _ in sizes))
    for row in rows.values():
        status = row.status[sizes[-1]] or ""
        cells = "".join(f"{row.queries[size]:>11} {row.ms[size]:>8.1f}" for size in sizes)
        print(f"{row.label:<{width}}{status!s:>5}{cells}")


def changing(rows: dict[str, Row], sizes: list[int]) -> list[str]:
    """Rows whose query count or HTTP status is not the same at every size."""
    return [
        row.label
        for row in rows.values()
        if len({row.queries[size] for size in sizes}) > 1
        or len({row.status[size] for size in sizes}) > 1
    ]


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--sizes", default="100,1000,10000", help="total leases, comma-separated")
    parser.add_argument("--projects", type=int, default=20, help="projects at every size")
    parser.add_argument("--runs", type=int, default=5, help="timed fetches per page (median)")
    parser.add_argument("--seed", type=int, default=1)
    parser.add_argument("--reset", action="store_true", help="drop a non-empty bench database")
    parser.add_argument("--keep", action="store_true", help="keep the database this run made")
    args = parser.parse_args(argv)
    sizes = sorted({int(size) for size in args.sizes.split(",") if size.strip()})
    # Every page must have rows at every size: an empty page skips its prefetch query.
    smallest = (LIVE_PER_PROJECT + 1) * args.projects
    if not sizes or sizes[0] < smallest:
        parser.error(f"every size needs at least one ended lease per project ({smallest})")

    url = os.environ.get("DATABASE_URL", "")
    if not url:
        print("Set DATABASE_URL to a PostgreSQL database for the bench.", file=sys.stderr)
        return 2
    try:
        created = prepare_database(url, reset=args.reset)
    except (Refused, psycopg.Error) as error:
        print(f"bench: {error}", file=sys.stderr)
        return 2

    import django

    django.setup()
    # The engineer's 404 on /approvals/ is expected; keep the table readable.
    logging.getLogger("django.request").setLevel(logging.ERROR)
    from django.core.management import call_command
    from django.db import connections

    rows: dict[str, Row] = {}
    try:
        call_command("migrate", interactive=False, verbosity=0)
        print(hardware_line())
        for size in sizes:
            generated_s, usage = measure_size(
                size, projects=args.projects, seed=args.seed, runs=args.runs, rows=rows
            )
            print(
                f"size {size}: {args.projects} projects × {size // args.projects} leases, "
                f"{usage} usage records, generated in {generated_s:.1f} s",
                flush=True,
            )
    finally:
        connections.close_all()
        if created and not args.keep:
            drop_database(url)
    print()
    print_table(rows, sizes)
    moved = changing(rows, sizes)
    if moved:
        print("\nQuery count (or status) changes with the data size:", file=sys.stderr)
        for label in moved:
            print(f"  {label}", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
