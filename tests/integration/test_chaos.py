"""Chaos (L1, scenario 8): a real Celery worker (with beat) on Redis is killed with
SIGKILL at points of launch, sync and terminate chosen by a seed: each kill happens
while the worker waits for the local cloud (a request held at the endpoint before or
after the cloud acts). After each kill the worker is restarted and the invariants are
asserted once things settle: one cloud instance per live row and no orphan, usage open
exactly for running instances and never overlapping, and no lease left provisioning or
ending.

By hand: CHAOS_SEED=7 CHAOS_POINTS=30 pytest tests/integration/test_chaos.py -s
"""

import itertools
import os
import random
import signal
import subprocess
import sys
import time
from collections.abc import Callable
from pathlib import Path

import pytest
import redis
from django.conf import settings
from django.db import connection

from portal.models import AuditEvent
from rental.fleet.cloud import provider_for
from rental.loans import admission, ending
from rental.models import Instance, Orphan, Reservation, UsageRecord
from rental.providers.base import TAG_INSTALLATION, CloudState
from tests import factories

pytestmark = [pytest.mark.integration, pytest.mark.django_db(transaction=True)]
ROOT = Path(__file__).resolve().parents[2]
Status = Reservation.Status
State = Instance.State
SEED = int(os.environ.get("CHAOS_SEED", "20261202"))
POINTS = int(os.environ.get("CHAOS_POINTS", "20"))
# (operation, EC2 action held, held before or after the cloud acts)
KILL_POINTS = [
    ("launch", "DescribeInstances", "before"),  # the launch's pre-check, or a sync
    ("launch", "RunInstances", "before"),  # the cloud creates it after the worker died
    ("launch", "RunInstances", "after"),  # created, answer never recorded
    ("sync", "DescribeInstances", "after"),  # mid-sync
    ("terminate", "TerminateInstances", "before"),  # the cloud terminates after the death
    ("terminate", "TerminateInstances", "after"),  # terminated, never recorded
]
# By hand, to hunt one kind of kill: CHAOS_ONLY=launch:RunInstances:before
if os.environ.get("CHAOS_ONLY"):
    KILL_POINTS = [tuple(os.environ["CHAOS_ONLY"].split(":"))]


class Worker:
    """A worker with embedded beat in its own process group (SIGKILL takes both)."""

    def __init__(self, log: Path) -> None:
        db = connection.settings_dict
        self.env = {
            **os.environ,
            "DJANGO_SETTINGS_MODULE": "portal.settings",
            "DATABASE_URL": f"postgres://{db['USER']}@{db['HOST']}:{db['PORT']}/{db['NAME']}",
            "CELERY_BROKER_URL": settings.CELERY_BROKER_URL,
            "SECRET_KEY": settings.SECRET_KEY,
            "PORTAL_ENCRYPTION_KEYS": ",".join(settings.PORTAL_ENCRYPTION_KEYS),
            "PORTAL_INSTALLATION_ID": settings.PORTAL_INSTALLATION_ID,
            "PORTAL_SYNC_INTERVAL": "1",
            "PORTAL_LEASE_CHECK_INTERVAL": "1",
            # The production timings scaled down so a test settles in seconds.
            "PORTAL_LAUNCH_STALE_SECONDS": "4",
            "PORTAL_BROKER_VISIBILITY_TIMEOUT": "6",
            "PORTAL_SYNC_GRACE_SECONDS": "3",
            # A worker killed mid-sync holds its region claim; keep it within the test's wait.
            "PORTAL_SYNC_CLAIM_SECONDS": "5",
            "PORTAL_LAUNCH_SWEEP_INTERVAL": "1",
        }
        self.log = log
        self.process: subprocess.Popen | None = None
        self.starts = 0

    def start(self) -> None:
        self.starts += 1
        out = self.log.open("a")
        self.process = subprocess.Popen(
            [
                sys.executable,
                "-m",
                "celery",
                "-A",
                "portal",
                "worker",
                "-B",
                "--pool=threads",
                "--concurrency=4",
                f"--loglevel={os.environ.get('CHAOS_LOGLEVEL', 'WARNING')}",
                "--schedule",
                str(self.log.parent / f"beat-{self.starts}"),
            ],
            cwd=ROOT,
            env=self.env,
            stdout=out,
            stderr=subprocess.STDOUT,
            start_new_session=True,
        )

    def kill(self) -> None:
        assert self.process is not None
        os.killpg(self.process.pid, signal.SIGKILL)
        self.process.wait(timeout=10)

    def stop(self) -> None:
        if self.process and self.process.poll() is None:
            os.killpg(self.process.pid, signal.SIGTERM)
            try:
                self.process.wait(timeout=20)
            except subprocess.TimeoutExpired:
                os.killpg(self.process.pid, signal.SIGKILL)


def wait_for(check: Callable[[], bool], *, timeout: float, what: str | Callable[[], str]) -> None:
    """Poll ``check`` until it holds. ``what`` says what was awaited; a callable is asked
    at the deadline, so the message tells the state that did not settle, not the state
    the wait began with."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if check():
            return
        time.sleep(0.3)
    raise AssertionError(f"timed out waiting for {what() if callable(what) else what}")


def launch_state(account) -> str:
    """The rows of every lease still provisioning or ending, to tell why it has not moved:
    its instances' state, claim, retry time and attempts."""
    lines = []
    for lease in Reservation.objects.filter(status__in=(Status.PROVISIONING, Status.ENDING)):
        for i in Instance.objects.filter(reservation=lease):
            kinds = [a.kind or "accepted" for a in i.attempts.order_by("at", "pk")]
            lines.append(
                f"lease {lease.pk} {lease.status}: instance {i.pk} {i.state} "
                f"id={i.external_id or '-'} claimed={i.claimed_at} next={i.next_attempt_at} "
                f"attempts={i.launch_attempts} {kinds} error={i.last_error[:120]!r}"
            )
    # Every row that breaks an invariant, with its history: what the portal did, and when.
    for i in Instance.objects.exclude(state=State.TERMINATED).order_by("pk"):
        trail = [
            f"{e.at:%H:%M:%S.%f} {e.verb} {e.before or ''}->{e.after or ''}"
            for e in AuditEvent.objects.filter(
                object_type__in=("rental.instance", "rental.reservation"),
                object_id__in=(str(i.pk), str(i.reservation_id)),
            ).order_by("at", "pk")
        ]
        usage = [f"[{u.start:%H:%M:%S}, {u.end and f'{u.end:%H:%M:%S}'})" for u in i.usage.all()]
        lines.append(
            f"instance {i.pk} {i.state} id={i.external_id or '-'} claimed={i.claimed_at} "
            f"running={i.running_at} usage={usage} trail={trail}"
        )
    with connection.cursor() as cursor:
        cursor.execute(
            "SELECT pid, state, wait_event_type, wait_event, now() - xact_start, left(query, 90)"
            " FROM pg_stat_activity WHERE datname = current_database()"
            " AND pid <> pg_backend_pid()"
        )
        lines += [f"backend {row}" for row in cursor.fetchall()]
    broker = redis.Redis.from_url(settings.CELERY_BROKER_URL)
    lines.append(f"queue {broker.llen('celery')}, unacked {broker.hlen('unacked')}")
    return "; ".join(lines) or "no lease provisioning or ending"


def violations(account) -> list[str]:
    """What breaks the invariants of issue 7 point 5 now (empty when they hold)."""
    problems = []
    cloud = provider_for(Instance(account=account)).describe(
        region="us-east-1", tag_filter={TAG_INSTALLATION: "test"}
    )
    running = {c.external_id for c in cloud if c.state not in (CloudState.TERMINATED,)}
    live_rows = dict(
        Instance.objects.filter(state__in=Instance.LIVE)
        .exclude(external_id="")
        .values_list("external_id", "pk")
    )
    for external_id in sorted(running - set(live_rows)):
        shutting = any(
            c.external_id == external_id and c.state == CloudState.SHUTTING_DOWN for c in cloud
        )
        if not shutting:
            problems.append(f"{external_id} runs in the cloud without a live row")
    for external_id in sorted(set(live_rows) - running):
        problems.append(f"row {live_rows[external_id]} is live but {external_id} is not")
    for status in (Status.PROVISIONING, Status.ENDING):
        stuck = list(Reservation.objects.filter(status=status).values_list("pk", flat=True))
        if stuck:
            problems.append(f"leases {stuck} are {status}")
    for instance in Instance.objects.all():
        records = list(UsageRecord.objects.filter(instance=instance).order_by("start"))
        open_ = [r for r in records if r.end is None]
        if instance.state == State.RUNNING and len(open_) != 1:
            problems.append(f"running instance {instance.pk} has {len(open_)} open usage")
        if instance.state != State.RUNNING and open_:
            problems.append(f"{instance.state} instance {instance.pk} still bills")
        for before, after in itertools.pairwise(records):
            if before.end is None or before.end > after.start:
                problems.append(f"instance {instance.pk} is billed twice from {after.start}")
        if instance.running_at and not records:
            problems.append(f"instance {instance.pk} ran but was never billed")
    if Orphan.objects.exclude(status=Orphan.Status.TERMINATED).exists():
        problems.append("orphans were recorded")
    return problems


def test_it_keeps_the_invariants_whatever_moment_the_worker_dies(cloud, tmp_path):
    redis.Redis.from_url(settings.CELERY_BROKER_URL).flushdb()
    f0 = factories.fixture_f0(endpoint_url=cloud.url)
    chooser = random.Random(SEED)
    worker = Worker(tmp_path / "worker.log")
    worker.start()
    killed: list[str] = []
    try:
        for point in range(POINTS):
            operation, action, when = chooser.choice(KILL_POINTS)
            active = list(Reservation.objects.filter(status=Status.ACTIVE))
            if operation == "terminate" and not active:
                operation, action, when = "launch", "RunInstances", when
            if operation == "launch" and len(active) >= 4:
                operation, action, when = "terminate", "TerminateInstances", when
            cloud.delay(action, 3, when=when)
            if operation == "launch":
                admission.submit_reservation(
                    actor=f0.alice,
                    project=f0.alpha,
                    gpu_model=f0.model,
                    gpu_count=1,
                    duration_hours=4,
                    priority="experiment",
                    market="on_demand",
                )
            elif operation == "terminate":
                ending.end_reservation(actor=f0.alice, reservation=chooser.choice(active))
            assert cloud.wait_until_held(action, timeout=30), f"point {point}: {action}"
            worker.kill()
            killed.append(f"{operation}:{action}:{when}")
            cloud.clear_faults()
            worker.start()
            wait_for(
                lambda: not violations(f0.account),
                timeout=60,
                what=lambda point=point: (
                    f"the invariants after kill {point} ({killed[-1]}): "
                    f"{violations(f0.account)}; {launch_state(f0.account)}; worker log: "
                    f"{worker.log.read_text()[-1500:]} (whole log: {worker.log})"
                ),
            )
    finally:
        worker.stop()
        cloud.clear_faults()
    print(f"chaos seed {SEED}: {len(killed)} kills, invariants held after each:")  # noqa: T201
    for name in sorted(set(killed)):
        print(f"  {killed.count(name):3d} × {name}")  # noqa: T201
    assert len(killed) == POINTS >= 1
    assert Reservation.objects.filter(status=Status.ENDED).exists()
