"""Heartbeat ingestion from many instances, and the samples table after a simulated month.

    DATABASE_URL=postgres://postgres@127.0.0.1:5432/gpu_portal_bench_agent \\
        .venv/bin/python bench/heartbeats.py [--instances 10000] [--rounds 2] [--workers 4]
            [--clients 16] [--month-instances 20] [--reset] [--keep]

Part 1 starts gunicorn (``--workers`` sync workers) on the bench database and sends every
instance's heartbeat (one sample, 4 GPUs) from ``--clients`` threads with keep-alive
connections, ``--rounds`` times; it prints heartbeats per second and the latency
percentiles. Goal: ≥ 500 heartbeats/s and p99 ≤ 50 ms. Exit 1 when the goal is missed.

Part 2 writes a month of one-a-minute samples for ``--month-instances`` instances, a day
at a time, running the hourly rollup, the retention purge and a VACUUM as the beat and
autovacuum would, and prints the sizes of the samples and rollup tables, bytes a row, and
those sizes scaled to 10,000 instances. ``--instances 0`` or ``--month-instances 0`` skips
a part.
"""

import argparse
import http.client
import json
import os
import socket
import statistics
import subprocess
import sys
import threading
import time
from datetime import UTC, datetime, timedelta
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from bench.run import Refused, drop_database, hardware_line, prepare_database  # noqa: E402

GPUS = 4


def make_instances(count: int) -> list[str]:
    """``count`` running instances with agent tokens; returns the tokens."""
    from decimal import Decimal

    from django.utils import timezone

    from rental.fleet.agent_install import agent_token, token_hash
    from rental.models import Instance, Reservation
    from tests import factories

    f0 = factories.fixture_f0()
    now = timezone.now()
    leases = Reservation.objects.bulk_create(
        Reservation(
            project=f0.alpha,
            requester=f0.alice,
            gpu_model=f0.model,
            gpu_count=GPUS,
            offering=f0.offering,
            priority="experiment",
            start=now - timedelta(hours=1),
            end=now + timedelta(hours=8),
            tier="guaranteed",
            status=Reservation.Status.ACTIVE,
        )
        for _ in range(count)
    )
    instances = Instance.objects.bulk_create(
        Instance(
            reservation=lease,
            account=f0.account,
            offering=f0.offering,
            region="us-east-1",
            external_id=f"i-{n:017x}",
            idempotency_key=f"bench-{n}",
            state=Instance.State.RUNNING,
            market="on_demand",
            gpu_count=GPUS,
            rate_per_hour=Decimal("10"),
            running_at=now - timedelta(hours=1),
        )
        for n, lease in enumerate(leases)
    )
    tokens = []
    for instance in instances:
        token = agent_token(instance)
        instance.agent_token_hash = token_hash(token)
        tokens.append(token)
    Instance.objects.bulk_update(instances, ["agent_token_hash"], batch_size=2000)
    return tokens


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


def start_server(port: int, workers: int) -> subprocess.Popen:
    env = {
        **os.environ,
        "DEBUG": "false",
        "PORTAL_AGENT_MIN_INTERVAL_SECONDS": "0",
        "DATABASE_CONN_MAX_AGE": "60",
    }
    server = subprocess.Popen(
        [
            sys.executable,
            "-m",
            "gunicorn",
            "portal.wsgi",
            "--bind",
            f"127.0.0.1:{port}",
            "--workers",
            str(workers),
            "--log-level",
            "warning",
        ],
        cwd=ROOT,
        env=env,
    )
    deadline = time.monotonic() + 30
    while time.monotonic() < deadline:
        try:
            socket.create_connection(("127.0.0.1", port), timeout=1).close()
            return server
        except OSError:
            time.sleep(0.2)
    server.terminate()
    raise RuntimeError("gunicorn did not start")


def send_all(port: int, tokens: list[str], *, clients: int, at: datetime) -> tuple[list, list]:
    latencies: list[float] = []
    failures: list[int] = []
    lock = threading.Lock()
    stamp = at.strftime("%Y-%m-%dT%H:%M:%SZ")
    body = {
        "samples": [
            {
                "at": stamp,
                "ssh_sessions": 1,
                "gpus": [
                    {
                        "index": i,
                        "utilization": 87.0,
                        "memory_used_mb": 40960.0,
                        "memory_total_mb": 81920.0,
                        "temperature_c": 61.0,
                        "power_w": 312.5,
                        "ecc_errors": 0,
                        "throttle_reasons": "0x0000000000000000",
                    }
                    for i in range(GPUS)
                ],
            }
        ]
    }
    data = json.dumps(body).encode()

    def client(share: list[str]) -> None:
        connection = http.client.HTTPConnection("127.0.0.1", port, timeout=30)
        mine, bad = [], []
        for token in share:
            start = time.perf_counter()
            connection.request(
                "POST",
                "/api/v1/agent/heartbeat",
                body=data,
                headers={"Content-Type": "application/json", "Authorization": f"Bearer {token}"},
            )
            answer = connection.getresponse()
            answer.read()
            mine.append(time.perf_counter() - start)
            if answer.status != 200:
                bad.append(answer.status)
        connection.close()
        with lock:
            latencies.extend(mine)
            failures.extend(bad)

    threads = [threading.Thread(target=client, args=(tokens[i::clients],)) for i in range(clients)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    return latencies, failures


def ingestion(args: argparse.Namespace) -> bool:
    from django.db import connections
    from django.utils import timezone

    started = time.perf_counter()
    tokens = make_instances(args.instances)
    print(f"{args.instances} instances made in {time.perf_counter() - started:.1f} s", flush=True)
    connections.close_all()
    port = free_port()
    server = start_server(port, args.workers)
    ok = True
    try:
        base = timezone.now().replace(microsecond=0) - timedelta(minutes=args.rounds)
        for round_ in range(args.rounds):
            started = time.perf_counter()
            latencies, failures = send_all(
                port, tokens, clients=args.clients, at=base + timedelta(minutes=round_)
            )
            elapsed = time.perf_counter() - started
            latencies.sort()
            rate = len(latencies) / elapsed
            p50 = statistics.median(latencies) * 1000
            p99 = latencies[int(len(latencies) * 0.99) - 1] * 1000
            print(
                f"round {round_ + 1}: {len(latencies)} heartbeats in {elapsed:.1f} s = "
                f"{rate:.0f}/s · p50 {p50:.1f} ms · p99 {p99:.1f} ms · max "
                f"{latencies[-1] * 1000:.1f} ms · non-200 {len(failures)}",
                flush=True,
            )
            ok = ok and rate >= 500 and p99 <= 50 and not failures
    finally:
        server.terminate()
        server.wait(timeout=30)
    return ok


def month(args: argparse.Namespace) -> None:
    """A month of one-a-minute samples for ``--month-instances`` instances, a day at a time,
    each day followed by the hourly rollup, the retention purge and the VACUUM that
    autovacuum would run; sizes are measured, then scaled to 10,000 instances (the bytes a
    row take do not depend on how many instances there are, nor on the readings)."""
    from django.conf import settings
    from django.db import connection

    from rental.agent import samples
    from rental.models import Instance, UtilizationRollup, UtilizationSample

    UtilizationSample.objects.all().delete()
    ids = list(Instance.objects.values_list("pk", flat=True)[: args.month_instances])
    if len(ids) < args.month_instances:
        make_instances(args.month_instances - len(ids))
        ids = list(Instance.objects.values_list("pk", flat=True)[: args.month_instances])
    start = datetime(2026, 3, 1, tzinfo=UTC)
    util = UtilizationSample._meta.get_field("gpu_utilization").pack([87.0] * GPUS)
    memory = UtilizationSample._meta.get_field("memory_used_mb").pack([40960] * GPUS)
    started = time.perf_counter()
    for day in range(31):
        day_start = start + timedelta(days=day)
        with connection.cursor() as cursor:
            cursor.execute(
                "INSERT INTO rental_utilizationsample "
                "(instance_id, at, gpu_utilization, memory_used_mb, ssh_sessions) "
                "SELECT i, t, %s, %s, 1 FROM unnest(%s::bigint[]) AS i, "
                "generate_series(%s::timestamptz, %s::timestamptz, interval '1 minute') AS t",
                [util, memory, ids, day_start, day_start + timedelta(minutes=1439)],
            )
        samples.roll_up_hours(now=day_start + timedelta(days=1), hours=24)
        samples.purge_samples(now=day_start + timedelta(days=1))
        with connection.cursor() as cursor:
            cursor.execute("VACUUM rental_utilizationsample")
    with connection.cursor() as cursor:
        cursor.execute("VACUUM ANALYZE rental_utilizationrollup")
        sizes = {}
        for table in ("rental_utilizationsample", "rental_utilizationrollup"):
            cursor.execute(
                "SELECT pg_table_size(%s), pg_indexes_size(%s), pg_total_relation_size(%s)",
                [table, table, table],
            )
            sizes[table] = cursor.fetchone()
    raw_rows = UtilizationSample.objects.count()
    rollup_rows = UtilizationRollup.objects.count()
    raw_table, raw_indexes, raw_bytes = sizes["rental_utilizationsample"]
    _table, _indexes, rollup_bytes = sizes["rental_utilizationrollup"]
    scale = 10_000 / len(ids)
    per_raw = raw_bytes / raw_rows
    per_rollup = rollup_bytes / rollup_rows
    rollup_days = settings.PORTAL_ROLLUP_RETENTION_DAYS
    gib = 2**30
    print(
        f"month of samples for {len(ids)} instances ({time.perf_counter() - started:.0f} s), "
        f"raw retention {settings.PORTAL_SAMPLE_RETENTION_DAYS} days, rollups "
        f"{rollup_days} days:\n"
        f"  raw: {raw_rows} rows, {raw_bytes / 2**20:.1f} MiB (table {raw_table / 2**20:.1f}, "
        f"indexes {raw_indexes / 2**20:.1f}) = {per_raw:.0f} B a row\n"
        f"  rollups: {rollup_rows} rows, {rollup_bytes / 2**20:.1f} MiB = "
        f"{per_rollup:.0f} B a row\n"
        f"  scaled to 10,000 instances: raw {raw_bytes * scale / gib:.2f} GiB (steady), "
        f"rollups after the month {rollup_bytes * scale / gib:.2f} GiB, at "
        f"{rollup_days} days {per_rollup * 10_000 * 24 * rollup_days / gib:.1f} GiB (steady)",
        flush=True,
    )


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--instances", type=int, default=10_000)
    parser.add_argument("--rounds", type=int, default=2)
    parser.add_argument("--workers", type=int, default=4, help="gunicorn workers")
    parser.add_argument("--clients", type=int, default=16, help="sending threads")
    parser.add_argument("--month-instances", type=int, default=20)
    parser.add_argument("--reset", action="store_true", help="drop a non-empty bench database")
    parser.add_argument("--keep", action="store_true", help="keep the database this run made")
    args = parser.parse_args(argv)
    url = os.environ.get("DATABASE_URL", "")
    if not url:
        sys.stderr.write("Set DATABASE_URL to a PostgreSQL database for the bench.\n")
        return 2
    os.environ.setdefault("DJANGO_SETTINGS_MODULE", "portal.settings")
    os.environ.setdefault("DEBUG", "false")
    try:
        created = prepare_database(url, reset=args.reset)
    except Refused as error:
        sys.stderr.write(f"bench: {error}\n")
        return 2
    import django

    django.setup()
    from django.core.management import call_command
    from django.db import connections

    try:
        call_command("migrate", interactive=False, verbosity=0)
        sys.stdout.write(hardware_line() + "\n")
        ok = ingestion(args) if args.instances else True
        if args.month_instances:
            month(args)
    finally:
        connections.close_all()
        if created and not args.keep:
            drop_database(url)
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
