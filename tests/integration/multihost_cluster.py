"""The machines of tests/integration/test_multihost.py: web and worker hosts in network
namespaces with production settings, a visitor that keeps cookies per host, the sync
claims' log, and the ``cluster`` fixture that starts them all and stops them after."""

import base64
import contextlib
import http.client
import json
import os
import re
import signal
import subprocess
import sys
import time
from collections.abc import Iterator
from dataclasses import dataclass, field
from datetime import datetime
from http.cookies import SimpleCookie
from pathlib import Path
from urllib.parse import urlencode, urlsplit

import pytest
import redis
from django.conf import settings
from django.contrib.auth import get_user_model
from django.contrib.auth.hashers import PBKDF2PasswordHasher
from django.db import connection

from devcloud import server as localcloud
from devcloud.server import LocalCloud
from rental.models import Instance, Reservation
from rental.providers.base import TAG_INSTALLATION
from tests import factories, netns
from tests.gates import Gate
from tests.integration.test_chaos import wait_for

UNAVAILABLE = netns.unavailable()
ROOT = Path(__file__).resolve().parents[2]
Status = Reservation.Status
State = Instance.State

WEBS = ("web-a", "web-b")
WORKERS = ("worker-a", "worker-b")
PUBLIC_HOST = "portal.test"  # the name the TLS proxy is reached by (ALLOWED_HOSTS)
PORT = 8000
# The scaled-down clock of the worker hosts (production: 30 s, 25 s, 5 s, 30 s).
SYNC_PERIOD = 2
STALE = 3
SWEEP = 1
LEASE_CHECK = 1
CONCURRENCY = 3  # threads per worker: six launches held at once are three on each host
LEASES = 2 * CONCURRENCY
# Seconds each first RunInstances is held at the cloud before it acts: longer than the stale
# claim and a sweep, so every launch is sent again while its first call is still on its
# way (the dead host's, and the live host's, taken for dead as a call past its timeouts
# would be): only the launch's idempotency (the cloud's look-up by key, the ClientToken)
# stands between a second delivery and a second instance.
HOLD = STALE + 3 * SWEEP
END_IN = 3  # seconds from the lease check's change of the leases' end to that end
MARGIN = 8  # a fresh worker process (Django, Celery, beat) starting on this machine
START_TIMEOUT = 90
SYNC_DESCRIBE = (f"tag:{TAG_INSTALLATION}",)  # the filters of a sync's describe
RECEIVED = re.compile(r"Task (rental\.tasks\.\w+)\[([0-9a-f-]+)\] received")


# -- the hosts' processes -----------------------------------------------------------------


@dataclass
class Served:
    """A process on one host, in its own process group (SIGKILL takes all of it). Each
    start appends to the host's log."""

    host: netns.Host
    args: list[str]
    env: dict[str, str]
    log: Path
    process: subprocess.Popen | None = None
    since: int = 0  # where this start's lines begin in the log

    def start(self) -> None:
        self.since = len(self.text())
        with self.log.open("a") as out:
            self.process = subprocess.Popen(
                self.host.command(self.args),
                cwd=ROOT,
                env=self.env,
                stdout=out,
                stderr=subprocess.STDOUT,
                start_new_session=True,
            )

    def kill(self) -> None:
        """SIGKILL, as a host that loses its power: no graceful anything."""
        if self.process is None or self.process.poll() is not None:
            return
        os.killpg(self.process.pid, signal.SIGKILL)
        self.process.wait(timeout=10)

    def text(self) -> str:
        return self.log.read_text(errors="replace") if self.log.exists() else ""

    def is_up(self) -> bool:
        """A web host answers /healthz; a worker has written its start-up line
        ("worker-a@… ready.") since this start."""
        if "gunicorn" in self.args:
            try:
                return Visitor().get(self.host, "/healthz").status == 200
            except OSError:
                return False
        return re.search(r"@\S+ ready\.", self.text()[self.since :]) is not None


@dataclass
class Cluster:
    net: netns.Network
    cloud: LocalCloud
    f0: factories.F0
    webs: dict[str, Served]
    workers: dict[str, Served]
    timings: dict[str, float] = field(default_factory=dict)

    def address(self, name: str) -> str:
        return self.net.hosts[name].address


def production_env(net: netns.Network, database: Gate, broker: Gate, var: Path) -> dict:
    """What every host is given: production, the test's secrets and installation id, the
    database and Redis through the gates (the broker on the suite's Redis database, the
    cache on another), and the scaled-down clock."""
    db = connection.settings_dict
    _port, broker_db = suite_redis()
    redis_at = f"redis://{net.gateway}:{broker.port}"
    return {
        **os.environ,
        "DJANGO_SETTINGS_MODULE": "portal.settings",
        "PORTAL_ENV": "production",
        "SECRET_KEY": settings.SECRET_KEY,
        "PORTAL_ENCRYPTION_KEYS": ",".join(settings.PORTAL_ENCRYPTION_KEYS),
        "PORTAL_INSTALLATION_ID": settings.PORTAL_INSTALLATION_ID,
        "ALLOWED_HOSTS": PUBLIC_HOST,
        "DATABASE_URL": f"postgres://{db['USER']}@{net.gateway}:{database.port}/{db['NAME']}",
        "CELERY_BROKER_URL": f"{redis_at}/{broker_db}",
        "REDIS_URL": f"{redis_at}/{cache_db(broker_db)}",
        "PORTAL_VAR_DIR": str(var),
        "STATIC_ROOT": str(var / "static"),
        "PORTAL_SYNC_INTERVAL": str(SYNC_PERIOD),
        "PORTAL_SYNC_CLAIM_SECONDS": str(2 * SYNC_PERIOD),
        "PORTAL_LEASE_CHECK_INTERVAL": str(LEASE_CHECK),
        "PORTAL_LAUNCH_STALE_SECONDS": str(STALE),
        "PORTAL_LAUNCH_SWEEP_INTERVAL": str(SWEEP),
        "PORTAL_OUTBOX_SWEEP_INTERVAL": str(SWEEP),
        "PORTAL_DUE_SWEEP_INTERVAL": str(SWEEP),
        # A dead worker's messages stay hidden for production's six minutes: whatever it
        # held is recovered from the rows, by the other host.
        "PORTAL_BROKER_VISIBILITY_TIMEOUT": "360",
    }


def suite_redis() -> tuple[int, int]:
    """The port and database of the suite's Redis broker (on 127.0.0.1)."""
    url = urlsplit(settings.CELERY_BROKER_URL)
    assert url.hostname == "127.0.0.1" and url.port, settings.CELERY_BROKER_URL
    return url.port, int(url.path.lstrip("/") or 0)


def cache_db(broker_db: int) -> int:
    """The Redis database of the web hosts' cache: not the broker's (as in production)."""
    return broker_db + 8


def on_host(env: dict, name: str) -> dict:
    """``env`` with the host's name on its database connections (``application_name``),
    so the sync log says which host claimed each sync."""
    return {**env, "DATABASE_URL": f"{env['DATABASE_URL']}?application_name={name}"}


def web(net: netns.Network, name: str, env: dict, logs: Path) -> Served:
    """gunicorn as docker-compose.yml runs it, on the host's own address."""
    host = net.hosts[name]
    args = [sys.executable, "-m", "gunicorn", "portal.wsgi", "--bind", f"{host.address}:{PORT}"]
    args += ["--workers", "1", "--threads", "4", "--forwarded-allow-ips", "*"]
    args += ["--access-logfile", "-"]
    return Served(host, args, on_host(env, name), logs / f"{name}.log")


def worker(net: netns.Network, name: str, env: dict, logs: Path) -> Served:
    """A Celery worker with an embedded beat, named after its host (each has its own beat
    schedule file, as each host would)."""
    host = net.hosts[name]
    args = [sys.executable, "-m", "celery", "-A", "portal", "worker", "-B", "-n", f"{name}@%h"]
    args += ["--pool=threads", f"--concurrency={CONCURRENCY}", "--loglevel=INFO"]
    args += ["--schedule", str(logs / f"beat-{name}")]
    return Served(host, args, on_host(env, name), logs / f"{name}.log")


def collect_static(env: dict) -> None:
    """The production image's collectstatic: the pages need its manifest. The API docs'
    bundles and the admin's and DRF's files are left out (no page here uses them; they
    are nine tenths of the work)."""
    args = [sys.executable, "manage.py", "collectstatic", "--noinput", "--verbosity", "0"]
    for unused in ("drf_spectacular_sidecar", "rest_framework", "admin"):
        args += ["--ignore", unused]
    subprocess.run(
        args,
        cwd=ROOT,
        env=env,
        check=True,
        capture_output=True,
    )


# -- the sync log: a trigger on rental_regionsync ------------------------------------------

SYNC_LOG_ON = """
CREATE TABLE multihost_sync_log (
    account_id bigint, region text, at timestamptz, began timestamptz, periodic boolean,
    host text
);
CREATE FUNCTION multihost_log_sync() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
    -- A claim won: the conditional update set a new claimed_until. A periodic sync's
    -- claim also takes the period (period_started_at).
    IF NEW.claimed_until IS NOT NULL AND NEW.claimed_until IS DISTINCT FROM OLD.claimed_until
    THEN
        INSERT INTO multihost_sync_log VALUES (
            NEW.account_id, NEW.region, clock_timestamp(), NEW.period_started_at,
            NEW.period_started_at IS DISTINCT FROM OLD.period_started_at,
            current_setting('application_name'));
    END IF;
    RETURN NEW;
END $$;
CREATE TRIGGER multihost_log_sync AFTER UPDATE ON rental_regionsync
    FOR EACH ROW EXECUTE FUNCTION multihost_log_sync();
"""
SYNC_LOG_OFF = """
DROP TRIGGER IF EXISTS multihost_log_sync ON rental_regionsync;
DROP FUNCTION IF EXISTS multihost_log_sync();
DROP TABLE IF EXISTS multihost_sync_log;
"""


@dataclass(frozen=True)
class SyncClaim:
    region: str
    at: datetime  # when the claim was written, by the database's clock
    began: datetime | None  # a periodic sync's start, as the claim compares it
    periodic: bool
    host: str


@contextlib.contextmanager
def sync_log() -> Iterator[None]:
    with connection.cursor() as cursor:
        cursor.execute(SYNC_LOG_OFF + SYNC_LOG_ON)
    try:
        yield
    finally:
        with connection.cursor() as cursor:
            cursor.execute(SYNC_LOG_OFF)


def sync_claims() -> list[SyncClaim]:
    with connection.cursor() as cursor:
        cursor.execute(
            "SELECT account_id || ' ' || region, at, began, periodic, host "
            "FROM multihost_sync_log ORDER BY at"
        )
        return [SyncClaim(*row) for row in cursor.fetchall()]


# -- a browser and a script, as the TLS proxy passes them on -------------------------------


@dataclass
class Answer:
    status: int
    headers: http.client.HTTPMessage
    text: str

    def json(self) -> dict:
        return json.loads(self.text)


@dataclass
class Visitor:
    """Someone reaching the portal through its TLS proxy: the public host name and
    ``X-Forwarded-Proto: https`` on every request. Keeps cookies (the secure ones too:
    the proxy speaks HTTPS to it) whichever host answers."""

    cookies: dict[str, str] = field(default_factory=dict)

    def get(self, host: netns.Host, path: str, **auth: object) -> Answer:
        return self.send(host, "GET", path, **auth)

    def post_form(self, host: netns.Host, path: str, form: dict[str, str]) -> Answer:
        headers = {
            "Content-Type": "application/x-www-form-urlencoded",
            "Origin": f"https://{PUBLIC_HOST}",  # a browser's, checked by CSRF over HTTPS
        }
        return self.send(host, "POST", path, body=urlencode(form).encode(), headers=headers)

    def post_json(self, host: netns.Host, path: str, data: dict, **auth: object) -> Answer:
        headers = {"Content-Type": "application/json"}
        body = json.dumps(data).encode()
        return self.send(host, "POST", path, body=body, headers=headers, **auth)

    def send(
        self,
        host: netns.Host,
        method: str,
        path: str,
        *,
        body: bytes | None = None,
        headers: dict[str, str] | None = None,
        token: str = "",
        basic: str = "",
    ) -> Answer:
        sent = {"Host": PUBLIC_HOST, "X-Forwarded-Proto": "https", **(headers or {})}
        if self.cookies:
            sent["Cookie"] = "; ".join(f"{k}={v}" for k, v in self.cookies.items())
        if token:
            sent["Authorization"] = f"Bearer {token}"
        if basic:
            sent["Authorization"] = f"Basic {basic}"
        link = http.client.HTTPConnection(host.address, PORT, timeout=30)
        try:
            link.request(method, path, body=body, headers=sent)
            response = link.getresponse()
            text = response.read().decode(errors="replace")
        finally:
            link.close()
        for line in response.headers.get_all("Set-Cookie") or []:
            for name, morsel in SimpleCookie(line).items():
                if morsel["max-age"] == "0" or not morsel.value:
                    self.cookies.pop(name, None)
                else:
                    self.cookies[name] = morsel.value
        return Answer(response.status, response.headers, text)


CSRF_FIELD = re.compile(r'name="csrfmiddlewaretoken" value="([^"]+)"')


def csrf_of(page: Answer) -> str:
    found = CSRF_FIELD.search(page.text)
    assert found, f"no CSRF field in the page ({page.status}): {page.text[:300]}"
    return found.group(1)


def hash_as_production(usernames: list[str]) -> None:
    """These users' password hashed as production hashes it: the test settings' MD5,
    which production does not accept, is faster but would fail every login."""
    hasher = PBKDF2PasswordHasher()
    get_user_model().objects.filter(username__in=usernames).update(
        password=hasher.encode(factories.PASSWORD, hasher.salt())
    )


def basic(username: str) -> str:
    """HTTP Basic credentials of a test user (factories.PASSWORD)."""
    return base64.b64encode(f"{username}:{factories.PASSWORD}".encode()).decode()


# -- the cluster ---------------------------------------------------------------------------


@pytest.fixture
def cluster(tmp_path, cloud) -> Iterator[Cluster]:
    """Four hosts on a bridge; the gates and a cloud on the bridge's address (``cloud``
    has emptied moto's state, which every local cloud of this process shares); F0 on that
    cloud; both worker hosts started, then (once the static files are collected) both web
    hosts; returned once every one answers. Everything stops and goes, failure or not."""
    begun = time.monotonic()
    redis_port, broker_db = suite_redis()
    for db in (broker_db, cache_db(broker_db)):
        redis.Redis(port=redis_port, db=db).flushdb()
    with netns.network([*WEBS, *WORKERS]) as net, sync_log():
        database = Gate(int(connection.settings_dict["PORT"]), listen=net.gateway)
        broker = Gate(redis_port, listen=net.gateway)
        gates = [database, broker]
        for gate in gates:
            gate.open()
        ours = localcloud.start(host=net.gateway)
        env = production_env(net, database, broker, tmp_path / "var")
        served = {name: worker(net, name, env, tmp_path) for name in WORKERS}
        served |= {name: web(net, name, env, tmp_path) for name in WEBS}
        try:
            f0 = factories.fixture_f0(endpoint_url=ours.url)
            hash_as_production(["alice", "bob"])
            for name in WORKERS:
                served[name].start()
            collect_static(env)
            for name in WEBS:
                served[name].start()
            for process in served.values():
                wait_for(
                    process.is_up,
                    timeout=START_TIMEOUT,
                    what=lambda p=process: f"{p.host.name} to start: {p.text()[-2000:]}",
                )
            cluster = Cluster(
                net=net,
                cloud=ours,
                f0=f0,
                webs={name: served[name] for name in WEBS},
                workers={name: served[name] for name in WORKERS},
            )
            cluster.timings["start"] = time.monotonic() - begun
            yield cluster
        finally:
            # The test is over: nothing of theirs is kept (the next test empties the
            # database and Redis), so no process is given a graceful shutdown's seconds.
            for process in served.values():
                process.kill()
            ours.stop()
            for gate in gates:
                if gate.listener is not None:
                    gate.shut()
            for name, process in served.items():
                print(f"--- {name} ({process.log})\n{process.text()[-3000:]}")  # noqa: T201
