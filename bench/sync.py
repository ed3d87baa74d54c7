"""One sync tick against the local EC2 endpoint at growing fleet sizes (issue 7, L3).

    DATABASE_URL=postgres://postgres@127.0.0.1:5432/gpu_portal_bench_sync \\
        .venv/bin/python bench/sync.py [--sizes 1000,10000] [--reset] [--keep]

For each size N, half the live instances run in us-east-1 and half in us-west-2: the
cloud (``python -m devcloud.server --fast-describe`` in its own process, so this
process's memory is the worker's) and the database (N running rows with open usage) are
filled, then one tick of ``sync_instances`` is timed: wall time, the endpoint's share
(the same describes timed alone), DescribeInstances calls per region, SQL queries, and
this process's resident memory after the tick (VmRSS and its peak VmHWM). Then 50 of
the instances are terminated behind the portal's back and the next tick is measured.
Exits 1 when a tick makes more than ceil(N / 1000) describes in a region.
"""

import argparse
import gc
import math
import os
import subprocess
import sys
import time
from datetime import timedelta
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))
os.environ.setdefault("DJANGO_SETTINGS_MODULE", "portal.settings")
os.environ.setdefault("DEBUG", "false")
os.environ.setdefault("PORTAL_INSTALLATION_ID", "bench")

from bench.run import Refused, drop_database, hardware_line, prepare_database  # noqa: E402

REGIONS = ("us-east-1", "us-west-2")


def start_cloud() -> tuple[subprocess.Popen, str]:
    process = subprocess.Popen(
        [sys.executable, "-m", "devcloud.server", "--port", "0", "--fast-describe"],
        cwd=ROOT,
        stdout=subprocess.PIPE,
        text=True,
    )
    url = process.stdout.readline().strip()
    return process, url


def proc_status(field: str) -> int:
    for line in Path("/proc/self/status").read_text().splitlines():
        if line.startswith(field + ":"):
            return int(line.split()[1]) // 1024
    return 0


def fill(size: int, url: str):
    """The fleet: cloud instances made in batches, rows and usage written in bulk."""
    import boto3  # noqa: TID251 - the bench drives the cloud directly to build its fleet
    from django.utils import timezone

    from rental.models import Image, Instance, Offering, Reservation, UsageRecord
    from tests import factories

    f0 = factories.fixture_f0(endpoint_url=url)
    f0.account.regions = list(REGIONS)
    f0.account.save()
    west = Offering.objects.get(pk=f0.offering.pk)
    west.pk, west.region = None, "us-west-2"
    west.save()
    Image.objects.create(
        name=f0.image.name, account=f0.account, region="us-west-2", image_id="ami-1", os="x"
    )
    offerings = {"us-east-1": f0.offering, "us-west-2": west}
    now = timezone.now().replace(microsecond=0)
    made: dict[str, list[str]] = {}
    for region in REGIONS:
        ec2 = boto3.client(
            "ec2",
            region_name=region,
            endpoint_url=url,
            aws_access_key_id="AKIDTESTGOOD0001",
            aws_secret_access_key="test-secret-value",
        )
        ids: list[str] = []
        left = size // len(REGIONS)
        while left:
            batch = min(left, 500)
            answer = ec2.run_instances(
                ImageId="ami-1",
                InstanceType=offerings[region].instance_type,
                MinCount=batch,
                MaxCount=batch,
                TagSpecifications=[
                    {
                        "ResourceType": "instance",
                        "Tags": [{"Key": "gpu-portal:installation", "Value": "bench"}],
                    }
                ],
            )
            ids += [item["InstanceId"] for item in answer["Instances"]]
            left -= batch
        made[region] = ids
    per_lease = 4  # a typical lease: a few instances
    for region, ids in made.items():
        chunks = [ids[start : start + per_lease] for start in range(0, len(ids), per_lease)]
        leases = Reservation.objects.bulk_create(
            Reservation(
                project=f0.alpha,
                requester=f0.alice,
                gpu_model=f0.model,
                gpu_count=len(chunk),
                offering=offerings[region],
                instance_count=len(chunk),
                start=now - timedelta(hours=1),
                end=now + timedelta(hours=8),
                submitted_at=now - timedelta(hours=1),
                status=Reservation.Status.ACTIVE,
                tier="burst",
            )
            for chunk in chunks
        )
        rows = Instance.objects.bulk_create(
            (
                Instance(
                    reservation=lease,
                    account=f0.account,
                    offering=offerings[region],
                    region=region,
                    external_id=external_id,
                    idempotency_key=f"bench-{external_id}",
                    state=Instance.State.RUNNING,
                    market="on_demand",
                    gpu_count=1,
                    rate_per_hour="2.50",
                    running_at=now - timedelta(hours=1),
                    launched_at=now - timedelta(hours=1),
                )
                for lease, chunk in zip(leases, chunks, strict=True)
                for external_id in chunk
            ),
            batch_size=1000,
        )
        UsageRecord.objects.bulk_create(
            (
                UsageRecord(
                    instance=row,
                    project=f0.alpha,
                    gpu_model=f0.model,
                    tier="burst",
                    market="on_demand",
                    gpu_count=1,
                    start=now - timedelta(hours=1),
                    rate="2.50",
                )
                for row in rows
            ),
            batch_size=1000,
        )
    return f0, made


class DescribeCounter:
    """Counts DescribeInstances requests per region through botocore's events."""

    def __init__(self) -> None:
        from rental.providers import aws

        self.counts: dict[str, int] = {}
        with aws._SESSION_LOCK:
            aws._shared_session().events.register("before-call.ec2.DescribeInstances", self._count)

    def _count(self, context=None, **kwargs) -> None:
        region = (context or {}).get("client_region", "?")
        self.counts[region] = self.counts.get(region, 0) + 1

    def take(self) -> dict[str, int]:
        counts, self.counts = self.counts, {}
        return counts


def tick(counter: DescribeCounter) -> dict:
    from django.db import connection
    from django.test.utils import CaptureQueriesContext

    from rental.fleet.sync import sync_instances

    gc.collect()
    counter.take()
    with CaptureQueriesContext(connection) as captured:
        began = time.perf_counter()
        changed = sync_instances()
        seconds = time.perf_counter() - began
    return {
        "seconds": seconds,
        "changed": changed,
        "queries": sum(
            1
            for q in captured.captured_queries
            if not q["sql"].startswith(("SAVEPOINT", "RELEASE"))
        ),
        "describes": counter.take(),
        "rss": proc_status("VmRSS"),
        "hwm": proc_status("VmHWM"),
    }


def endpoint_seconds(f0) -> float:
    from rental.fleet.cloud import installation_tags, provider_for
    from rental.models import Instance

    provider = provider_for(Instance(account=f0.account))
    began = time.perf_counter()
    for region in REGIONS:
        provider.describe(region=region, tag_filter=installation_tags())
    return time.perf_counter() - began


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--sizes", default="1000,10000")
    parser.add_argument("--reset", action="store_true")
    parser.add_argument("--keep", action="store_true")
    args = parser.parse_args(argv)
    url = os.environ.get("DATABASE_URL", "")
    try:
        created = prepare_database(url, reset=args.reset)
    except Refused as refusal:
        print(f"bench/sync.py: {refusal}", file=sys.stderr)
        return 2
    import django

    django.setup()
    from django.conf import settings
    from django.core.management import call_command

    settings.EMAIL_BACKEND = "django.core.mail.backends.locmem.EmailBackend"
    call_command("migrate", verbosity=0)
    cloud, cloud_url = start_cloud()
    counter = DescribeCounter()
    failures = 0
    print(hardware_line())
    print(
        "| live | tick s | endpoint s | portal s | describes/region | queries | "
        "RSS MB (peak) | 50 ended outside: s, queries |"
    )
    print("|---:|---:|---:|---:|---|---:|---:|---|")
    try:
        for size in [int(s) for s in args.sizes.split(",")]:
            import urllib.request

            call_command("flush", interactive=False, verbosity=0)
            request = urllib.request.Request(f"{cloud_url}/moto-api/reset", method="POST")
            urllib.request.urlopen(request, timeout=60).read()
            f0, made = fill(size, cloud_url)
            gc.collect()
            first = tick(counter)  # links nothing, changes nothing: the steady state
            outside = endpoint_seconds(f0)
            import boto3  # noqa: TID251

            ec2 = boto3.client(
                "ec2",
                region_name="us-east-1",
                endpoint_url=cloud_url,
                aws_access_key_id="AKIDTESTGOOD0001",
                aws_secret_access_key="test-secret-value",
            )
            ec2.terminate_instances(InstanceIds=made["us-east-1"][:50])
            ended = tick(counter)
            limit = math.ceil(size / len(REGIONS) / 1000)
            if any(n > limit for n in first["describes"].values()):
                failures += 1
            describes = ", ".join(f"{r} {n}" for r, n in sorted(first["describes"].items()))
            print(
                f"| {size:,} | {first['seconds']:.2f} | {outside:.2f} | "
                f"{first['seconds'] - outside:.2f} | {describes} | {first['queries']} | "
                f"{first['rss']} ({first['hwm']}) | {ended['seconds']:.2f} s, "
                f"{ended['queries']} queries, {ended['changed']} changed |",
                flush=True,
            )
    finally:
        cloud.terminate()
        cloud.wait(timeout=20)
        if created and not args.keep:
            from django.db import connections

            connections.close_all()
            drop_database(url)
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())
