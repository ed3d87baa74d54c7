"""Reconcile a month's provider bill of 1,000,000 CUR lines against the portal's records.

    DATABASE_URL=postgres://postgres@127.0.0.1:5432/gpu_portal_bench_reconcile \\
        .venv/bin/python bench/reconcile.py [--lines 1000000] [--reset] [--keep]

The database is filled with people, pools and offerings (``bench.generate``, its leases in
January and February) and then with instances that ran in March 2026, each with a usage
run, bulk-inserted. The bill is written as an AWS Cost and Usage Report, one line per
instance-hour (per second within the hour), with a tax line and storage lines beside, and
faults put in: 1 % of the instances charged 10 % above their captured rate, 1 % missing a
day, and 20 instances the portal never knew. The CSV and, when pyarrow is installed, the
same bill in Parquet are then imported (``billing.reconcile.import_bill``: read, matched,
written) and timed. Goal: under 30 s for 1,000,000 lines, with memory that grows with the
bill's resources and days, not its lines (peak RSS is printed beside the RSS before).
"""

import argparse
import csv
import os
import random
import resource
import sys
import tempfile
import time
from datetime import UTC, date, datetime, timedelta
from decimal import Decimal
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from bench.run import Refused, drop_database, hardware_line, prepare_database  # noqa: E402

MARCH = datetime(2026, 3, 1, tzinfo=UTC)
APRIL = datetime(2026, 4, 1, tzinfo=UTC)
AFTER = datetime(2026, 4, 3, tzinfo=UTC)
HOUR = timedelta(hours=1)
BATCH = 2000
UNKNOWN = 20
HEADER = [
    "identity/LineItemId",
    "lineItem/LineItemType",
    "lineItem/UsageStartDate",
    "lineItem/UsageEndDate",
    "lineItem/ProductCode",
    "lineItem/UsageType",
    "lineItem/ResourceId",
    "lineItem/UsageAmount",
    "lineItem/CurrencyCode",
    "lineItem/UnblendedRate",
    "lineItem/UnblendedCost",
    "product/instanceType",
    "product/region",
    "resourceTags/user:gpu-portal:project",
    "resourceTags/user:gpu-portal:reservation",
]


def rss_mib() -> float:
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024


def fill(*, lines: int, seed: int) -> list[tuple]:
    """The portal's March: instances with one usage run each, enough for ``lines`` hourly
    bill lines. Returns (external id, instance type, market, rate, start, end, project slug,
    lease id) per instance."""
    from django.db.models import F

    from bench.generate import generate
    from portal.models import Project
    from rental.models import Instance, Offering, Reservation, UsageRecord

    rng = random.Random(seed)
    generate(projects=20, leases_per_project=4, seed=seed, now=datetime(2026, 2, 10, tzinfo=UTC))
    UsageRecord.objects.filter(end__isnull=True).update(end=F("start") + HOUR)
    projects = list(Project.objects.order_by("pk"))
    offerings = list(Offering.objects.order_by("pk"))
    requester = projects[0].memberships.first().user
    windows = []
    total = 0
    while total < lines:
        hours = rng.randint(150, 740)
        start = MARCH + timedelta(seconds=rng.randint(0, (744 - hours) * 3600))
        end = start + timedelta(seconds=hours * 3600 - rng.randint(0, 3599))
        slots = (end.replace(minute=0, second=0) - start.replace(minute=0, second=0)) // HOUR
        slots += 1 if end.minute or end.second else 0
        windows.append((start, end, rng.choice(projects), rng.choice(offerings), rng.random()))
        total += slots
    leases, instances = [], []
    for start, end, project, offering, luck in windows:
        market = "spot" if luck < 0.1 else "on_demand"
        leases.append(
            Reservation(
                project=project,
                requester=requester,
                gpu_model_id=offering.gpu_model_id,
                gpu_count=offering.gpus_per_instance,
                offering=offering,
                market=market,
                purpose="bench: reconciliation",
                start=start,
                end=end,
                tier="spot" if market == "spot" else "guaranteed",
                status=Reservation.Status.ENDED,
                submitted_at=start,
                ended_at=end,
                end_reason="lease_end",
            )
        )
    Reservation.objects.bulk_create(leases, batch_size=BATCH)
    for number, (lease, (start, end, _p, offering, _l)) in enumerate(
        zip(leases, windows, strict=True)
    ):
        instances.append(
            Instance(
                reservation=lease,
                account_id=offering.account_id,
                offering=offering,
                region=offering.region,
                external_id=f"i-{0xB000000 + number:017x}",
                idempotency_key=Instance.new_idempotency_key(),
                state="terminated",
                market=lease.market,
                gpu_count=offering.gpus_per_instance,
                rate_per_hour=offering.price_per_hour(lease.market),
                running_at=start,
                terminated_at=end,
                termination_reason="lease_end",
            )
        )
    Instance.objects.bulk_create(instances, batch_size=BATCH)
    UsageRecord.objects.bulk_create(
        (
            UsageRecord(
                instance=instance,
                project_id=lease.project_id,
                gpu_model_id=lease.gpu_model_id,
                tier=lease.tier,
                market=lease.market,
                gpu_count=instance.gpu_count,
                start=lease.start,
                end=lease.end,
                rate=instance.rate_per_hour / instance.gpu_count,
                end_reason="lease_end",
            )
            for lease, instance in zip(leases, instances, strict=True)
        ),
        batch_size=BATCH,
    )
    slugs = {project.pk: project.slug for project in projects}
    return [
        (
            i.external_id,
            i.offering.instance_type,
            i.market,
            i.rate_per_hour,
            lease.start,
            lease.end,
            slugs[lease.project_id],
            lease.pk,
        )
        for lease, i in zip(leases, instances, strict=True)
    ]


def write_cur(path: Path, instances: list[tuple], *, lines: int, seed: int) -> dict[str, int]:
    """The bill as a CUR CSV, hour by hour, with the faults; returns what was put in."""
    rng = random.Random(seed + 1)
    faults = {"price": 0, "missing_day": 0, "unknown": UNKNOWN}
    unknown = [
        (f"i-{0xF000000 + n:017x}", "bench.a100x1", "on_demand", Decimal("2.5"),
         MARCH + timedelta(days=n % 28), MARCH + timedelta(days=n % 28 + 2), "", "")
        for n in range(UNKNOWN)
    ]  # fmt: skip
    written = 0
    with path.open("w", newline="") as out:
        writer = csv.writer(out)
        writer.writerow(HEADER)
        writer.writerow(
            ["tax", "Tax", "2026-03-01T00:00:00Z", "2026-04-01T00:00:00Z", "AmazonEC2", "", "",
             "1", "USD", "", "1234.56", "", "", "", ""]
        )  # fmt: skip
        for rid, itype, market, rate, start, end, slug, lease in [*unknown, *instances]:
            if rng.random() < 0.01 and slug:
                rate = (rate * Decimal("1.1")).quantize(Decimal("0.000001"))
                faults["price"] += 1
            dropped = None
            if rng.random() < 0.01 and slug:
                dropped = (start + timedelta(days=1)).date()
                faults["missing_day"] += 1
            usage = ("USE1-SpotUsage:" if market == "spot" else "USE1-BoxUsage:") + itype
            tail = ["USD", str(rate)]
            hour = start.replace(minute=0, second=0)
            rows = []
            while hour < end and written < lines - 2:
                seconds = (min(end, hour + HOUR) - max(start, hour)) // timedelta(seconds=1)
                amount = (Decimal(seconds) / 3600).quantize(Decimal("0.0000000001"))
                if hour.date() != dropped:
                    stamp = hour.strftime("%Y-%m-%dT%H:%M:%SZ")
                    rows.append(
                        [f"{rid}-{stamp}", "Usage", stamp,
                         (hour + HOUR).strftime("%Y-%m-%dT%H:%M:%SZ"), "AmazonEC2", usage, rid,
                         str(amount), *tail, str((amount * rate).quantize(Decimal("0.0000000001"))),
                         itype, "us-east-1", slug, str(lease)]
                    )  # fmt: skip
                    written += 1
                hour += HOUR
            writer.writerows(rows)
        while written < lines - 1:  # storage lines fill up to the count asked for
            writer.writerow(
                [f"ebs-{written}", "Usage", "2026-03-05T00:00:00Z", "2026-03-05T01:00:00Z",
                 "AmazonEC2", "EBS:VolumeUsage.gp3", f"vol-{written:08x}", "0.1", "USD", "0.08",
                 "0.008", "", "us-east-1", "", ""]
            )  # fmt: skip
            written += 1
    faults["lines"] = written + 1
    return faults


def to_parquet(csv_path: Path, parquet_path: Path) -> bool:
    try:
        import pyarrow.csv as pacsv
        import pyarrow.parquet as pq
    except ImportError:
        return False
    table = pacsv.read_csv(
        csv_path,
        convert_options=pacsv.ConvertOptions(column_types=dict.fromkeys(HEADER, "string")),
    )
    pq.write_table(table, parquet_path, row_group_size=100_000)
    return True


def timed_import(path: Path, fmt: str, admin) -> tuple[float, float, object]:
    from billing import reconcile
    from rental.models import ProviderAccount

    began = time.perf_counter()
    with path.open("rb") as file:
        record = reconcile.import_bill(
            actor=admin,
            file=file,
            file_name=path.name,
            fmt=fmt,
            period=date(2026, 3, 1),
            account=ProviderAccount.objects.get(name="Bench cloud"),
            now=AFTER,
        )
    return time.perf_counter() - began, rss_mib(), record


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--lines", type=int, default=1_000_000)
    parser.add_argument("--seed", type=int, default=22)
    parser.add_argument("--reset", action="store_true")
    parser.add_argument("--keep", action="store_true")
    args = parser.parse_args(argv)
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
    from django.contrib.auth import get_user_model
    from django.core.management import call_command
    from django.db import connection

    settings.EMAIL_BACKEND = "django.core.mail.backends.locmem.EmailBackend"
    call_command("migrate", verbosity=0)
    try:
        began = time.perf_counter()
        instances = fill(lines=args.lines, seed=args.seed)
        with connection.cursor() as cursor:
            cursor.execute("ANALYZE")
        with tempfile.TemporaryDirectory() as folder:
            csv_path = Path(folder) / "cur-2026-03.csv"
            faults = write_cur(csv_path, instances, lines=args.lines, seed=args.seed)
            parquet_path = Path(folder) / "cur-2026-03.parquet"
            has_parquet = to_parquet(csv_path, parquet_path)
            prepared = time.perf_counter() - began
            admin = get_user_model().objects.filter(is_staff=True).first()
            print(hardware_line())
            print(
                f"{faults['lines']:,} lines ({csv_path.stat().st_size / 2**20:,.0f} MiB CSV), "
                f"{len(instances):,} portal instances; faults: {faults['price']} prices, "
                f"{faults['missing_day']} missing days, {faults['unknown']} unknown instances; "
                f"prepared in {prepared:.1f} s"
            )
            runs = [("CSV", csv_path, "cur_csv")]
            if has_parquet:
                runs.append(("Parquet", parquet_path, "cur_parquet"))
            for label, path, fmt in runs:
                before = rss_mib()
                load = os.getloadavg()
                seconds, peak, record = timed_import(path, fmt, admin)
                findings = dict(
                    record.items.values_list("finding").annotate(n=django.db.models.Count("id"))
                )
                print(
                    f"{label:8} import+match {seconds:6.1f} s · peak RSS {peak:,.0f} MiB "
                    f"(before {before:,.0f}) · load average {load[0]:.2f} {load[1]:.2f} "
                    f"{load[2]:.2f} · {record.line_count:,} lines, {record.items.count():,} "
                    f"items, {record.flagged_count} flagged {findings}"
                )
    finally:
        if created and not args.keep:
            from django.db import connections

            connections.close_all()
            drop_database(url)
    return 0


if __name__ == "__main__":
    sys.exit(main())
