"""PostgreSQL restarted under a served portal (issue 18, point 1): it costs at most the
requests in flight when it stopped, and everything carries on by itself.

gunicorn with the production settings (DEBUG off, two workers, kept connections checked
before reuse), a Celery worker with embedded beat and the local cloud run on a PostgreSQL
of this test's own, while a few threads read pages and the API and submit leases. The
server is stopped fast (``pg_ctl restart -m fast``, ``docker compose restart``: open
sessions are ended, their transactions rolled back), kept down for ``DOWN`` seconds and
started again on the same folder and port. Then:

- only requests in flight when it cut the sessions failed, each a 503 with Retry-After,
  never a 500; requests that arrived while it was down waited for it;
- every accepted submission is one lease, launched once; none is doubled;
- nobody touched the worker or beat: a lease asked for after the restart is launched,
  and beat's heartbeat and the region's sync run again.

The suite's own PostgreSQL is not the one restarted: the other xdist worker's tests are
using it. This one starts as a copy of the test database (its migrated schema), and this
process's connection is aimed at it for the test's length.

By hand, to see what each part buys (each makes the test fail):
PG_RESTART_ENV='{"DATABASE_CONN_HEALTH_CHECKS": "false"}': the idle gunicorn worker's
first request after the restart fails on its dead connection;
PG_RESTART_ENV='{"DATABASE_RESTART_WAIT_SECONDS": "0"}': every request that arrives while
the server is down fails (50 to 100 in one second). PG_RESTART_DOWN_SECONDS=3
keeps it down longer (beyond DATABASE_RESTART_WAIT_SECONDS, requests answer 503).
"""

import contextlib
import http.client
import itertools
import json
import os
import shutil
import signal
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from datetime import timedelta
from pathlib import Path

import psycopg
import pytest
import redis
from django.conf import settings
from django.db import connections
from django.test import Client
from django.utils import timezone

from portal.models import Heartbeat
from portal.tokens import create_token
from rental.fleet.cloud import provider_for
from rental.models import Instance, RegionSync, Reservation
from rental.providers.base import TAG_INSTALLATION, CloudState
from tests import factories, servers
from tests.integration.test_chaos import Worker, wait_for

pytestmark = [pytest.mark.integration, pytest.mark.django_db(transaction=True)]
ROOT = Path(__file__).resolve().parents[2]
Status = Reservation.Status
DOWN = float(os.environ.get("PG_RESTART_DOWN_SECONDS", "1"))  # how long it stays stopped
PAUSE = 0.02  # seconds each client waits between two of its requests
SUBMISSIONS = 4  # leases the submitting client asks for, one GPU each (alpha's ceiling: 6)
SETTLE = 30  # seconds for a launch, a heartbeat or a sync after the restart, at most
LIST = "/api/v1/leases"
# By hand, to see it fail: settings for web and the worker, as JSON (see the docstring).
BY_HAND = json.loads(os.environ.get("PG_RESTART_ENV", "{}"))


class Postgres:
    """A PostgreSQL of this test's own: stopped fast and started again on the same folder
    and port, it is the same server restarted."""

    def __init__(self) -> None:
        self.folder = Path(tempfile.mkdtemp(prefix="gpu-portal-pg-restart-"))
        self.folder.chmod(0o755)  # PostgreSQL's own user must reach its data folder
        self.data = servers.init_postgres(self.folder)
        self.port = servers.free_port()
        self.process: subprocess.Popen | None = None

    def start(self) -> None:
        self.process = servers.postgres_server(self.data, self.port)

    def dsn(self, name: str) -> str:
        return f"host=127.0.0.1 port={self.port} user=postgres dbname={name}"

    def stop(self) -> None:
        if self.process is not None:
            servers.fast_stop(self.process)

    def remove(self) -> None:
        self.stop()
        shutil.rmtree(self.folder, ignore_errors=True)


def copy_database(source: dict, port: int, name: str) -> None:
    """The test database as it is now (migrated, no test's rows), as ``name`` on ``port``."""
    bindir = servers.postgres_bindir()
    with psycopg.connect(f"host=127.0.0.1 port={port} user=postgres", autocommit=True) as admin:
        admin.execute(f'CREATE DATABASE "{name}"')
    where = ["-h", source["HOST"], "-p", str(source["PORT"]), "-U", source["USER"]]
    dump = subprocess.run(
        [bindir / "pg_dump", *where, "--no-owner", source["NAME"]],
        capture_output=True,
        check=True,
        timeout=60,
    )
    into = ["-h", "127.0.0.1", "-p", str(port), "-U", "postgres", "-d", name]
    restore = subprocess.run(
        [bindir / "psql", *into, "-q", "-v", "ON_ERROR_STOP=1"],
        input=dump.stdout,
        capture_output=True,
        timeout=60,
    )
    assert restore.returncode == 0, restore.stderr[-2000:]


@pytest.fixture
def own_postgres(transactional_db) -> Iterator[Postgres]:
    """This test's PostgreSQL, with this process's default connection aimed at it."""
    server = Postgres()
    wrapper = connections["default"]
    saved = dict(wrapper.settings_dict)
    try:
        server.start()
        copy_database(saved, server.port, "portal")
        wrapper.close()
        wrapper.settings_dict.update(
            HOST="127.0.0.1", PORT=str(server.port), NAME="portal", USER="postgres"
        )
        yield server
    finally:
        wrapper.close()
        wrapper.settings_dict.clear()
        wrapper.settings_dict.update(saved)  # before pytest-django flushes the test database
        server.remove()


def production(worker: Worker, static_root: Path) -> dict[str, str]:
    """The worker's environment (this test's database, the broker, fast periods) with
    the production settings, as docker-compose.yml runs web, worker and beat."""
    return {
        **worker.env,
        "PORTAL_ENV": "production",
        "DEBUG": "false",
        "ALLOWED_HOSTS": "127.0.0.1",
        "SECURE_SSL_REDIRECT": "false",  # plain HTTP to gunicorn, as a probe would
        "REDIS_URL": settings.CELERY_BROKER_URL,
        "STATIC_ROOT": str(static_root),
        "PORTAL_BEAT_HEARTBEAT_SECONDS": "1",
        "PORTAL_OUTBOX_SWEEP_INTERVAL": "1",
        **BY_HAND,
    }


def collect_static(env: dict[str, str], log: Path) -> subprocess.Popen:
    """The manifest of static files the production pages name (not the admin's, the API
    browser's or the schema viewer's: no request here needs them)."""
    ignore = [f"--ignore={name}" for name in ("admin", "rest_framework", "drf_spectacular_sidecar")]
    return subprocess.Popen(
        [sys.executable, "manage.py", "collectstatic", "--noinput", *ignore],
        cwd=ROOT,
        env=env,
        stdout=log.open("w"),
        stderr=subprocess.STDOUT,
    )


class Web:
    """gunicorn as docker-compose.yml runs it, with two workers."""

    def __init__(self, env: dict[str, str], log: Path) -> None:
        self.port = servers.free_port()
        self.log = log
        where = f"127.0.0.1:{self.port}"
        self.process = subprocess.Popen(
            [sys.executable, "-m", "gunicorn", "portal.wsgi", "--workers", "2", "--bind", where],
            cwd=ROOT,
            env=env,
            stdout=log.open("w"),
            stderr=subprocess.STDOUT,
            start_new_session=True,
        )

    def up(self) -> bool:
        return call(self.port, "GET", "/healthz").status == 200

    def stop(self) -> None:
        if self.process.poll() is None:
            self.process.terminate()
            try:
                self.process.wait(timeout=20)
            except subprocess.TimeoutExpired:
                self.process.kill()


@dataclass
class Answer:
    path: str
    status: int  # 0: no answer at all
    retry_after: str | None
    started: float  # monotonic seconds
    ended: float
    body: bytes = b""

    def overlaps(self, start: float, end: float) -> bool:
        return self.started < end and self.ended > start


def call(port: int, method: str, path: str, headers=None, body=None) -> Answer:
    started = time.monotonic()
    conn = http.client.HTTPConnection("127.0.0.1", port, timeout=30)
    try:
        conn.request(method, path, body=body, headers={"Host": "127.0.0.1", **(headers or {})})
        response = conn.getresponse()
        content = response.read()
        status, retry_after = response.status, response.getheader("Retry-After")
    except OSError:
        content, status, retry_after = b"", 0, None
    finally:
        conn.close()
    return Answer(path, status, retry_after, started, time.monotonic(), content)


class Traffic:
    """Clients in threads, each repeating its requests until stopped, every answer kept.
    A hold keeps new requests from starting (for the milliseconds a stop takes to cut
    the sessions), so that the requests in flight at that moment are known exactly."""

    def __init__(self, port: int) -> None:
        self.port = port
        self.answers: list[Answer] = []
        self.changed = threading.Condition()
        self.in_progress = 0
        self.held = False
        self.stopping = False
        self.threads: list[threading.Thread] = []

    def client(self, steps: list[Callable[[], Answer | None]]) -> None:
        def loop() -> None:
            for step in itertools.cycle(steps):
                if not self._begin():
                    return
                self._end(step())
                time.sleep(PAUSE)  # the client's own pace, not a wait for anything

        thread = threading.Thread(target=loop, daemon=True)
        thread.start()
        self.threads.append(thread)

    def _begin(self) -> bool:
        """Wait while held, then count a request in progress; False once stopping."""
        with self.changed:
            self.changed.wait_for(lambda: not self.held or self.stopping)
            if self.stopping:
                return False
            self.in_progress += 1
            self.changed.notify_all()
            return True

    def _end(self, answer: Answer | None) -> None:
        with self.changed:
            self.in_progress -= 1
            if answer is not None:
                self.answers.append(answer)
            self.changed.notify_all()

    def hold_with_one_in_progress(self) -> None:
        """Once a request is in progress, keep new ones from starting, and wait until the
        others have ended (rarely, two end at once and none is left)."""
        with self.changed:
            self.changed.wait_for(lambda: self.in_progress >= 1, timeout=SETTLE)
            self.held = True
            self.changed.wait_for(lambda: self.in_progress <= 1, timeout=SETTLE)

    def release(self) -> None:
        with self.changed:
            self.held = False
            self.changed.notify_all()

    def get(self, path: str, headers: dict) -> Callable[[], Answer]:
        return lambda: call(self.port, "GET", path, headers)

    def stop(self) -> None:
        with self.changed:
            self.stopping = True
            self.changed.notify_all()
        for thread in self.threads:
            thread.join(timeout=40)

    def count(self, check: Callable[[Answer], bool]) -> int:
        with self.changed:
            return sum(1 for answer in self.answers if check(answer))


@dataclass
class Restart:
    """When each step happened (monotonic seconds)."""

    stopping: float  # the fast stop was asked for
    cut: float  # the server had ended the open sessions (this test's own among them)
    stopped: float  # the server had exited
    back: float  # it accepted connections again


def restart(server: Postgres, traffic: Traffic) -> Restart:
    """A fast stop, ``DOWN`` seconds down, a start on the same folder and port.

    No new request starts from the moment the stop is asked for until the server has cut
    the sessions (milliseconds): the requests in flight then are exactly those in
    progress. The stop is asked for when one request is (it fails if the cut falls in one
    of its queries), so at least one gunicorn worker keeps its connection idle across the
    restart, as most do in production, where workers outnumber the requests at any
    moment: the connection CONN_HEALTH_CHECKS is for."""
    assert server.process is not None
    own = psycopg.connect(server.dsn("portal"), autocommit=True)
    traffic.hold_with_one_in_progress()
    try:
        stopping = time.monotonic()
        server.process.send_signal(signal.SIGINT)  # PostgreSQL's fast shutdown
        with contextlib.suppress(psycopg.OperationalError):
            while time.monotonic() < stopping + SETTLE:
                own.execute("SELECT 1")  # until the server ends this session too
        cut = time.monotonic()
    finally:
        traffic.release()
        own.close()
    server.stop()
    stopped = time.monotonic()
    time.sleep(DOWN)  # the outage's length: nothing is awaited here
    server.start()
    return Restart(stopping, cut, stopped, time.monotonic())


def ask(f0, project: str, purpose: str) -> bytes:
    return json.dumps(
        {
            "project": project,
            "gpu_model": f0.model.pk,
            "gpu_count": 1,
            "duration_hours": "2",
            "purpose": purpose,
        }
    ).encode()


def bearer(user) -> dict[str, str]:
    _row, token = create_token(
        actor=user, name="drill", expires_at=timezone.now() + timedelta(days=1)
    )
    return {"Authorization": f"Bearer {token}", "Content-Type": "application/json"}


def session(user) -> dict[str, str]:
    client = Client()
    client.force_login(user)
    name = settings.SESSION_COOKIE_NAME
    return {"Cookie": f"{name}={client.cookies[name].value}"}


def launched(pks: list[int]) -> bool:
    return Reservation.objects.filter(pk__in=pks, status=Status.ACTIVE).count() == len(pks)


def web_connections() -> int:
    """The sessions gunicorn's workers keep (they name themselves "web")."""
    with connections["default"].cursor() as cursor:
        cursor.execute("SELECT count(*) FROM pg_stat_activity WHERE application_name = 'web'")
        return cursor.fetchone()[0]


@pytest.fixture
def served(cloud, own_postgres, tmp_path) -> Iterator[tuple[Web, Worker]]:
    """gunicorn and the worker (embedded beat), with the production settings, on this
    test's database and the local cloud."""
    redis.Redis.from_url(settings.CELERY_BROKER_URL).flushdb()  # no earlier test's message
    worker = Worker(tmp_path / "worker.log")  # its environment names this test's database
    worker.env = production(worker, tmp_path / "static")
    static = collect_static(worker.env, tmp_path / "collectstatic.log")
    worker.start()
    web = None
    try:
        assert static.wait(timeout=120) == 0, (tmp_path / "collectstatic.log").read_text()
        web_env = {
            **worker.env,
            "DATABASE_URL": worker.env["DATABASE_URL"] + "?application_name=web",
        }
        web = Web(web_env, tmp_path / "web.log")
        wait_for(web.up, timeout=60, what="gunicorn to answer")
        yield web, worker
    finally:
        if web is not None:
            web.stop()
        worker.stop()
        for log in ("web.log", "worker.log"):
            if (tmp_path / log).exists():
                print(log, (tmp_path / log).read_text()[-3000:])  # noqa: T201 (on failure)


def test_a_restart_costs_at_most_the_requests_in_flight(cloud, own_postgres, served):
    web, worker = served
    f0 = factories.fixture_f0(endpoint_url=cloud.url)
    alice_api, bob_api, alice_pages = bearer(f0.alice), bearer(f0.bob), session(f0.alice)
    traffic = Traffic(web.port)
    submitted: list[Answer] = []

    def submit() -> Answer | None:
        if len(submitted) >= SUBMISSIONS:
            return None
        purpose = f"drill {len(submitted)}"
        answer = call(web.port, "POST", LIST, alice_api, ask(f0, "alpha", purpose))
        submitted.append(answer)
        return answer

    traffic.client([traffic.get("/", alice_pages), traffic.get("/leases/", alice_pages)])
    traffic.client([traffic.get(LIST, bob_api), traffic.get("/api/v1/gpu-models", bob_api)])
    traffic.client([submit, traffic.get(LIST, alice_api), traffic.get(LIST, alice_api)])
    try:
        # Both gunicorn workers hold a connection; a submission or two are in.
        wait_for(
            lambda: len(submitted) >= 2 and web_connections() == 2,
            timeout=SETTLE,
            what="the first answers",
        )
        when = restart(own_postgres, traffic)
        restarted_at = timezone.now()
        connections["default"].close()  # this process's own, cut by the restart
        after = call(web.port, "POST", LIST, bob_api, ask(f0, "beta", "after the restart"))
        assert after.status == 201, after.body
        wait_for(
            lambda: traffic.count(lambda a: a.started > when.back and a.status == 200) >= 20,
            timeout=SETTLE,
            what="answers after the restart",
        )
    finally:
        traffic.stop()

    # The worker and beat carry on by themselves: every accepted lease is launched (the
    # one asked for after the restart too), beat's heartbeat and the sync run again.
    accepted = [json.loads(a.body)["id"] for a in submitted if a.status == 201]
    leases = [*accepted, json.loads(after.body)["id"]]
    wait_for(lambda: launched(leases), timeout=SETTLE, what="every accepted lease launched")
    launched_in = time.monotonic() - when.back
    wait_for(
        lambda: Heartbeat.objects.filter(name=Heartbeat.BEAT, at__gt=restarted_at).exists(),
        timeout=SETTLE,
        what="beat's heartbeat after the restart",
    )
    wait_for(
        lambda: RegionSync.objects.filter(synced_at__gt=restarted_at).exists(),
        timeout=SETTLE,
        what="a sync after the restart",
    )
    assert worker.process.poll() is None  # never restarted, never stopped
    print(f"every lease launched {launched_in:.1f} s after the restart")  # noqa: T201

    answers = [*traffic.answers, after]
    failed = [a for a in answers if a.status not in (200, 201)]
    in_flight = [a for a in answers if a.overlaps(when.stopping, when.cut)]
    print(  # noqa: T201
        f"{len(answers)} answers, {len(failed)} failed, {len(in_flight)} in flight when the "
        f"sessions were cut ({(when.cut - when.stopping) * 1000:.0f} ms after the stop "
        f"began); stopped in {when.stopped - when.stopping:.2f} s, down "
        f"{when.back - when.stopped:.2f} s"
    )
    for answer in failed:
        print(" ", answer.status, answer.path, answer.retry_after, answer.body[:120])  # noqa: T201
    assert {a.status for a in failed} <= {503}, "only 503s: never a 500, never no answer"
    assert all(a.retry_after == str(settings.PORTAL_RETRY_AFTER_SECONDS) for a in failed)
    assert all(a in in_flight for a in failed), "a request that was not in flight failed"
    assert len(failed) <= len(in_flight)

    # Each accepted submission is one lease, launched once; a refused one left nothing.
    purposes = list(Reservation.objects.values_list("purpose", flat=True))
    for number, answer in enumerate(submitted):
        assert purposes.count(f"drill {number}") == (1 if answer.status == 201 else 0)
    assert Instance.objects.filter(reservation_id__in=leases).count() == len(leases)
    running = [
        found
        for found in provider_for(Instance(account=f0.account)).describe(
            region="us-east-1", tag_filter={TAG_INSTALLATION: "test"}
        )
        if found.state == CloudState.RUNNING
    ]
    assert len(running) == len(leases)
