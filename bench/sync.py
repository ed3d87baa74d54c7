"""One sync tick, run by a real Celery worker, against the local EC2 endpoint at growing
fleet sizes (issue 7, L3; issue 19).

    DATABASE_URL=postgres://postgres@127.0.0.1:5432/gp_sync_bench \\
        .venv/bin/python bench/sync.py [--sizes 1000,10000] [--reset] [--keep]

For each size N, half the live instances run in us-east-1 and half in us-west-2: the
cloud (``python -m devcloud.server --fast-describe``) and the database (N running rows
with open usage) are filled by this process. Then a Celery worker of the portal's app
(``celery worker``, prefork pool, one child, on a Redis this bench starts; ports from
8800) is started, and this process sends ``sync_instances_task`` as beat does: it fans
out one ``sync_region_task`` per region, which the worker runs. Measured: the tick's wall
time (from the send to the end of the last region's task), the endpoint's share (the
worker's DescribeInstances requests from sending to their answer read, before botocore
parses it), the portal's share (the rest), the worker child's CPU time, SQL queries in
the worker's tasks, and the worker child's peak resident memory (VmHWM), taken afresh
for each size. Then 50 of the
instances are terminated behind the portal's back and the next tick is measured.

Exits 1 when a goal is missed at 10,000 live instances or more (tick over 10 s, the
portal's share over 2 s, the worker's peak over 200 MB), or when a tick makes more than
ceil(N / 2000) describes in a region.
"""

import argparse
import contextlib
import json
import math
import os
import socket
import subprocess
import sys
import tempfile
import time
import urllib.request
from datetime import UTC, datetime, timedelta
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))
os.environ.setdefault("DJANGO_SETTINGS_MODULE", "portal.settings")
os.environ.setdefault("DEBUG", "false")
os.environ.setdefault("PORTAL_INSTALLATION_ID", "bench")

from bench.run import Refused, drop_database, hardware_line, prepare_database  # noqa: E402
from tests.servers import fast_stop, redis_server  # noqa: E402

REGIONS = ("us-east-1", "us-west-2")
PORTS = range(8800, 8900)
ENDED_OUTSIDE = 50
# The goals (issue 19), held at this fleet size and above.
GOAL_SIZE = 10_000
GOAL_TICK_S = 10.0
GOAL_PORTAL_S = 2.0
GOAL_PEAK_MB = 200
READY_TIMEOUT_S = 120
TICK_TIMEOUT_S = 300


def free_port() -> int:
    """The first port of 8800-8899 free on 127.0.0.1 (the ports this bench may use)."""
    for port in PORTS:
        with socket.socket() as sock:
            try:
                sock.bind(("127.0.0.1", port))
            except OSError:
                continue
            return port
    raise RuntimeError("no free port in 8800-8899")


def start_cloud() -> tuple[subprocess.Popen, str]:
    process = subprocess.Popen(
        [sys.executable, "-m", "devcloud.server", "--port", str(free_port()), "--fast-describe"],
        cwd=ROOT,
        stdout=subprocess.PIPE,
        text=True,
    )
    url = process.stdout.readline().strip()
    return process, url


def memory_mb(status: str, field: str) -> int:
    """One field of a /proc/<pid>/status text, in MB."""
    for line in status.splitlines():
        if line.startswith(field + ":"):
            return int(line.split()[1]) // 1024
    return 0


# -- In the worker ------------------------------------------------------------------------


class WorkerProbe:
    """In the worker's child process: each task's wall time, its SQL queries, and its
    DescribeInstances requests (per region; the time from sending each to its answer
    read, and the whole calls with botocore's parsing), written as one JSON line to
    ``path`` when the task ends, with the process's memory then."""

    def __init__(self, path: str) -> None:
        self.path = path
        self.hooked = False
        self.task: dict = {}
        self.sent_at = 0.0
        self.called_at = 0.0
        self.stack = contextlib.ExitStack()

    def connect(self) -> None:
        from celery import signals  # only the worker's side needs Celery

        signals.worker_ready.connect(self.ready, weak=False)
        signals.task_prerun.connect(self.prerun, weak=False)
        signals.task_postrun.connect(self.postrun, weak=False)

    def write(self, record: dict) -> None:
        with open(self.path, "a") as out:
            out.write(json.dumps(record) + "\n")

    def ready(self, **kwargs) -> None:
        self.write({"ready": os.getpid()})

    def prerun(self, task=None, **kwargs) -> None:
        from django.db import connection  # after django.setup()

        from rental.providers import aws  # after django.setup()

        if not self.hooked:  # the driver's one session in this process
            with aws._SESSION_LOCK:
                events = aws._shared_session().events
            events.register("before-call.ec2.DescribeInstances", self.call_began)
            events.register("after-call.ec2.DescribeInstances", self.call_ended)
            events.register("before-send.ec2.DescribeInstances", self.sent)
            events.register("before-parse.ec2.DescribeInstances", self.answered)
            self.hooked = True
        self.task = {
            "task": task.name,
            "pid": os.getpid(),
            "began": time.time(),
            "cpu_s": -time.process_time(),
            "queries": 0,
            "describes": {},
            "endpoint_s": 0.0,
            "describe_s": 0.0,
        }
        self.stack.enter_context(connection.execute_wrapper(self.count))

    def postrun(self, **kwargs) -> None:
        self.stack.close()
        self.task["ended"] = time.time()
        self.task["cpu_s"] += time.process_time()
        status = Path("/proc/self/status").read_text()
        self.task["rss"] = memory_mb(status, "VmRSS")
        self.task["hwm"] = memory_mb(status, "VmHWM")
        self.write(self.task)

    def count(self, execute, sql, params, many, context):
        if not sql.startswith(("SAVEPOINT", "RELEASE")):
            self.task["queries"] += 1
        return execute(sql, params, many, context)

    def call_began(self, context=None, **kwargs) -> None:
        region = (context or {}).get("client_region", "?")
        self.task["describes"][region] = self.task["describes"].get(region, 0) + 1
        self.called_at = time.perf_counter()

    def call_ended(self, **kwargs) -> None:
        self.task["describe_s"] += time.perf_counter() - self.called_at

    def sent(self, **kwargs) -> None:
        self.sent_at = time.perf_counter()  # returns None: botocore sends the request

    def answered(self, **kwargs) -> None:
        self.task["endpoint_s"] += time.perf_counter() - self.sent_at


def run_worker(record: str) -> None:
    """A Celery worker of the portal's app, as ``celery -A portal worker`` starts it
    (prefork, one child), with the probe connected."""
    WorkerProbe(record).connect()
    from portal.celery import app  # after the probe's signals are connected

    app.worker_main(
        [
            "worker",
            "--pool=prefork",
            "--concurrency=1",
            "--loglevel=WARNING",
            "--without-gossip",
            "--without-mingle",
            "-n",
            "bench-sync@%h",
        ]
    )


# -- In the bench -------------------------------------------------------------------------


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


def read_records(path: Path) -> list[dict]:
    if not path.exists():
        return []
    return [json.loads(line) for line in path.read_text().splitlines() if line.strip()]


class Worker:
    """The worker process this bench started, and the records its probe writes."""

    def __init__(self, folder: Path, env: dict[str, str], name: str) -> None:
        self.record = folder / f"{name}.jsonl"
        self.log = folder / f"{name}.log"
        with self.log.open("w") as log:
            self.process = subprocess.Popen(
                [sys.executable, str(Path(__file__).resolve()), "--worker", str(self.record)],
                cwd=ROOT,
                env=env,
                stdout=log,
                stderr=subprocess.STDOUT,
                start_new_session=True,
            )
        self.wait_for(lambda records: any("ready" in r for r in records), READY_TIMEOUT_S)

    def wait_for(self, done, timeout: float) -> list[dict]:
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            records = read_records(self.record)
            if done(records):
                return records
            if self.process.poll() is not None:
                break
            time.sleep(0.05)
        raise RuntimeError(f"the worker did not answer; its log:\n{self.log.read_text()[-3000:]}")

    def peak_mb(self) -> int:
        """The worker's main process's peak (its child's is in each task's record)."""
        return memory_mb(Path(f"/proc/{self.process.pid}/status").read_text(), "VmHWM")

    def stop(self) -> None:
        if self.process.poll() is None:
            self.process.terminate()  # a warm shutdown
            try:
                self.process.wait(timeout=30)
            except subprocess.TimeoutExpired:
                self.process.kill()
                self.process.wait()


def tick(app, worker: Worker) -> dict:
    """Send the beat's sync task and wait for its region tasks to end in the worker."""
    from rental.models import RegionSync  # after django.setup()

    before = len(read_records(worker.record))
    sent_at = datetime.now(UTC)
    began = time.time()
    app.send_task("rental.tasks.sync_instances_task")

    def done(records: list[dict]) -> bool:
        tasks = records[before:]
        return sum(r.get("task") == "rental.tasks.sync_region_task" for r in tasks) >= len(REGIONS)

    tasks = [r for r in worker.wait_for(done, TICK_TIMEOUT_S)[before:] if "task" in r]
    synced = RegionSync.objects.filter(synced_at__gte=sent_at, sync_error="").count()
    describes: dict[str, int] = {}
    for task in tasks:
        for region, n in task["describes"].items():
            describes[region] = describes.get(region, 0) + n
    seconds = max(task["ended"] for task in tasks) - began
    endpoint = sum(task["endpoint_s"] for task in tasks)
    return {
        "seconds": seconds,
        "endpoint": endpoint,
        "portal": seconds - endpoint,
        "describe_s": sum(task["describe_s"] for task in tasks),
        "cpu_s": sum(task["cpu_s"] for task in tasks),
        "queries": sum(task["queries"] for task in tasks),
        "describes": describes,
        "synced": synced,
        "rss": tasks[-1]["rss"],
        "hwm": max(task["hwm"] for task in tasks),
    }


def missed(size: int, ticks: list[dict], limit: int) -> list[str]:
    """What this size missed: the goals (at GOAL_SIZE and above), the describes per
    region, a region left unsynced."""
    misses = []
    for name, measured in zip(("steady tick", "50 ended tick"), ticks, strict=True):
        if measured["synced"] != len(REGIONS):
            misses.append(f"{name}: {measured['synced']} of {len(REGIONS)} regions synced")
        if any(n > limit for n in measured["describes"].values()):
            misses.append(f"{name}: more than {limit} describes in a region")
        if size < GOAL_SIZE:
            continue
        if measured["seconds"] > GOAL_TICK_S:
            misses.append(f"{name}: {measured['seconds']:.2f} s > {GOAL_TICK_S} s")
        if measured["portal"] > GOAL_PORTAL_S:
            misses.append(f"{name}: portal {measured['portal']:.2f} s > {GOAL_PORTAL_S} s")
        if measured["hwm"] > GOAL_PEAK_MB:
            misses.append(f"{name}: worker peak {measured['hwm']} MB > {GOAL_PEAK_MB} MB")
    return misses


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--sizes", default="1000,10000")
    parser.add_argument("--reset", action="store_true")
    parser.add_argument("--keep", action="store_true")
    parser.add_argument("--worker", metavar="RECORD", help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    if args.worker:
        run_worker(args.worker)
        return 0
    url = os.environ.get("DATABASE_URL", "")
    try:
        created = prepare_database(url, reset=args.reset)
    except Refused as refusal:
        print(f"bench/sync.py: {refusal}", file=sys.stderr)
        return 2
    folder = Path(tempfile.mkdtemp(prefix="gp-sync-bench-"))
    redis = redis_server(folder, free_port())
    broker = f"redis://127.0.0.1:{redis.args[4]}/0"
    os.environ["CELERY_BROKER_URL"] = broker
    # The worker: this bench's broker, and a sync period short enough that the next
    # tick, seconds later, is not taken for the same period.
    worker_env = {**os.environ, "CELERY_BROKER_URL": broker, "PORTAL_SYNC_INTERVAL": "1"}
    import django  # after the broker's URL is in the environment

    django.setup()
    from django.core.management import call_command  # after django.setup()

    from portal.celery import app  # after django.setup()
    from rental.models import Instance  # after django.setup()

    call_command("migrate", verbosity=0)
    cloud, cloud_url = start_cloud()
    misses: list[str] = []
    print(hardware_line())
    print(f"load average before: {Path('/proc/loadavg').read_text().strip()}")
    print(
        "| live | first tick s | tick s | endpoint s | portal s | describe calls s | "
        "worker CPU s | describes/region | queries | worker RSS MB (peak) | "
        f"{ENDED_OUTSIDE} ended outside: s, portal s, CPU s, queries, ended |"
    )
    print("|---:|---:|---:|---:|---:|---:|---:|---|---:|---:|---|")
    try:
        for size in [int(s) for s in args.sizes.split(",")]:
            call_command("flush", interactive=False, verbosity=0)
            request = urllib.request.Request(f"{cloud_url}/moto-api/reset", method="POST")
            urllib.request.urlopen(request, timeout=60).read()
            _f0, made = fill(size, cloud_url)
            worker = Worker(folder, worker_env, f"worker-{size}")
            try:
                first = tick(app, worker)  # the child's first: botocore's model loaded
                steady = tick(app, worker)  # links nothing, changes nothing
                import boto3  # noqa: TID251 - the bench ends instances behind the portal

                ec2 = boto3.client(
                    "ec2",
                    region_name="us-east-1",
                    endpoint_url=cloud_url,
                    aws_access_key_id="AKIDTESTGOOD0001",
                    aws_secret_access_key="test-secret-value",
                )
                ec2.terminate_instances(InstanceIds=made["us-east-1"][:ENDED_OUTSIDE])
                ended = tick(app, worker)
                ended["ended"] = Instance.objects.filter(state=Instance.State.TERMINATED).count()
                parent_peak = worker.peak_mb()
            finally:
                worker.stop()
            limit = math.ceil(size / len(REGIONS) / 1000)
            size_misses = missed(size, [steady, ended], limit)
            if ended["ended"] != ENDED_OUTSIDE:
                size_misses.append(f"{ended['ended']} instances ended, not {ENDED_OUTSIDE}")
            describes = ", ".join(f"{r} {n}" for r, n in sorted(steady["describes"].items()))
            print(
                f"| {size:,} | {first['seconds']:.2f} | {steady['seconds']:.2f} | "
                f"{steady['endpoint']:.2f} | {steady['portal']:.2f} | "
                f"{steady['describe_s']:.2f} | {steady['cpu_s']:.2f} | {describes} | "
                f"{steady['queries']} | "
                f"{steady['rss']} ({max(first['hwm'], steady['hwm'], ended['hwm'])}) | "
                f"{ended['seconds']:.2f} s, {ended['portal']:.2f} s, {ended['cpu_s']:.2f} s CPU, "
                f"{ended['queries']} "
                f"queries, {ended['ended']} ended |",
                flush=True,
            )
            print(f"  worker's main process peak: {parent_peak} MB")
            misses += [f"{size:,}: {miss}" for miss in size_misses]
    finally:
        cloud.terminate()
        cloud.wait(timeout=20)
        fast_stop(redis)
        if created and not args.keep:
            from django.db import connections  # after django.setup()

            connections.close_all()
            drop_database(url)
    print(f"load average after: {Path('/proc/loadavg').read_text().strip()}")
    if size >= GOAL_SIZE or misses:
        print(
            f"goals at {GOAL_SIZE:,} live: tick <= {GOAL_TICK_S:g} s, portal <= "
            f"{GOAL_PORTAL_S:g} s, worker peak <= {GOAL_PEAK_MB} MB: "
            + ("missed: " + "; ".join(misses) if misses else "met")
        )
    return 1 if misses else 0


if __name__ == "__main__":
    sys.exit(main())
