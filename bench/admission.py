"""Admissions per second under contention, and the p95 of one admission at 300 projects.

    DATABASE_URL=postgres://postgres@127.0.0.1:5432/gpu_portal_bench_admission \\
        .venv/bin/python bench/admission.py [--projects 300] [--processes 8] [--each 100] \\
        [--reset] [--keep]

The database is prepared as ``bench/run.py`` does (created if missing, refused when it
holds tables unless ``--reset``, dropped at the end unless ``--keep``). One pool of
A100 80GB with C = 2 × projects, every project G 1 and L 4, so Σ G = projects ≤ C.
Each process submits ``--each`` one-GPU requests for random projects through
``submit_reservation`` and ends a running lease after every second one, so the pool
stays contested; each submission is timed. Prints admissions/s over the wall time of
the whole run and the p50/p95/max of one submission.
"""

import argparse
import contextlib
import json
import os
import random
import statistics
import subprocess
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))
os.environ.setdefault("DJANGO_SETTINGS_MODULE", "portal.settings")
os.environ.setdefault("DEBUG", "false")


def seed(projects: int, processes: int) -> None:
    from decimal import Decimal

    from django.contrib.auth import get_user_model
    from django.core.management import call_command

    from portal.models import Membership, Project
    from rental.models import Image, Offering, Pool, ProviderAccount, Quota
    from tests import factories

    call_command("migrate", verbosity=0)
    model = factories.gpu_model("A100 80GB")
    Pool.objects.create(gpu_model=model, capacity=2 * projects)
    account = ProviderAccount(name="Bench", driver="aws", regions=["us-east-1"])
    account.set_credentials(access_key_id="AKIDBENCH0001", secret_access_key="bench")
    account.save()
    Offering.objects.create(
        account=account,
        region="us-east-1",
        instance_type="bench.a100x1",
        gpu_model=model,
        gpus_per_instance=1,
        vcpus=12,
        memory_gib=117,
        on_demand_price_per_hour=Decimal("2.50"),
        spot_price_per_hour=Decimal("1.00"),
    )
    Image.objects.create(name="Bench", account=account, region="us-east-1", image_id="ami-1")
    made = Project.objects.bulk_create(
        Project(slug=f"bench-{n:03d}", name=f"Bench {n}") for n in range(projects)
    )
    Quota.objects.bulk_create(
        Quota(project=p, gpu_model=model, guaranteed=1, ceiling=4, weight=Decimal(1)) for p in made
    )
    users = [get_user_model().objects.create_user(username=f"bench{w}") for w in range(processes)]
    Membership.objects.bulk_create(
        Membership(user=u, project=p, role=Membership.Role.ENGINEER) for u in users for p in made
    )


def worker(index: int, each: int) -> None:
    import django

    django.setup()
    from django.contrib.auth import get_user_model

    from portal.errors import DomainError
    from portal.models import Project
    from rental import services
    from rental.models import GpuModel, Reservation

    rng = random.Random(index)
    user = get_user_model().objects.get(username=f"bench{index}")
    model = GpuModel.objects.get(name="A100 80GB")
    projects = list(Project.objects.filter(slug__startswith="bench-"))
    timings: list[float] = []
    mine: list[int] = []
    for step in range(each):
        started = time.perf_counter()
        try:
            lease = services.submit_reservation(
                actor=user,
                project=rng.choice(projects),
                gpu_model=model,
                gpu_count=1,
                duration_hours=1,
                priority=rng.choice(("experiment", "learning")),
                market="on_demand",
            )
            mine.append(lease.pk)
        except DomainError:
            pass
        timings.append(time.perf_counter() - started)
        if step % 2 == 1 and mine:
            lease = Reservation.objects.get(pk=mine.pop(0))
            with contextlib.suppress(DomainError):
                services.end_reservation(actor=user, reservation=lease)
    sys.stdout.write(json.dumps(timings) + "\n")


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--projects", type=int, default=300)
    parser.add_argument("--processes", type=int, default=8)
    parser.add_argument("--each", type=int, default=100)
    parser.add_argument("--reset", action="store_true")
    parser.add_argument("--keep", action="store_true")
    parser.add_argument("--worker", type=int, default=None, help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.worker is not None:
        worker(args.worker, args.each)
        return 0

    from bench.run import Refused, drop_database, prepare_database

    url = os.environ.get("DATABASE_URL", "")
    try:
        created = prepare_database(url, reset=args.reset)
    except Refused as refused:
        sys.stderr.write(f"bench: {refused}\n")
        return 2
    import django

    django.setup()
    try:
        seed(args.projects, args.processes)
        from django.db import connections

        connections.close_all()
        started = time.perf_counter()
        procs = [
            subprocess.Popen(
                [sys.executable, __file__, "--worker", str(w), "--each", str(args.each)],
                stdout=subprocess.PIPE,
                text=True,
            )
            for w in range(args.processes)
        ]
        timings = [t for p in procs for t in json.loads(p.communicate()[0].splitlines()[-1])]
        wall = time.perf_counter() - started
    finally:
        if created and not args.keep:
            drop_database(url)
    timings.sort()
    p95 = timings[int(0.95 * (len(timings) - 1))]
    sys.stdout.write(
        f"{len(timings)} admissions by {args.processes} processes at {args.projects} projects "
        f"in {wall:.1f} s: {len(timings) / wall:.0f} admissions/s (submissions, with ends "
        f"between them); one admission p50 {statistics.median(timings) * 1000:.0f} ms, "
        f"p95 {p95 * 1000:.0f} ms, max {timings[-1] * 1000:.0f} ms\n"
    )
    return 0


if __name__ == "__main__":
    sys.exit(main())
