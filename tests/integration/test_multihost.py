"""More than one machine (issue 18 point 8): two web hosts and two worker hosts, each a
network namespace of its own (``tests/netns.py``), against one PostgreSQL, one Redis and
one cloud, hold every invariant:

- **sessions**: logged in through web-a, the same cookie (and CSRF token) opens a page and
  sends a form on web-b; an API token works on both; logging out on one ends it on both;
- **no duplicate instance**: six leases asked for through both web hosts at once are
  launched by both workers; one worker host is killed (SIGKILL) while all six launches
  wait at the cloud; each lease still becomes active with exactly one cloud instance
  (counted at the cloud: every instance ever created, by its lease tag), no orphan;
- **each region synced once a period**: every claim of the region's sync is logged by a
  trigger, with the sync's start and the host that made it; the beat's syncs are never
  less than three quarters of a period apart (``PERIOD_CLAIM``) and number one a period
  (two more at most, where a beat's phase changed), and the cloud saw no sync describe
  without a claim;
- **beat's work done once**: the lease check warns of each lease's end once and ends each
  lease once at its end second (one audit event, one notification, one usage record
  closed at the end); the outbox publishes each message once (each row is received by
  exactly one worker, once).

What runs where:

- web-a, web-b: gunicorn with the production settings (``PORTAL_ENV=production``: DEBUG
  off, the test's SECRET_KEY, encryption keys and installation id, the cache in Redis).
  No proxy: the test sends what the TLS proxy would, the public host name and
  ``X-Forwarded-Proto: https``.
- worker-a, worker-b: a Celery worker each, **each with an embedded beat**. Production
  runs exactly one beat (docker-compose.yml's ``beat``); two beats are what a second one
  by mistake, or one per worker host for fail-over, make, and the portal must still do
  each periodic task's work once. The timings are scaled down as in
  ``test_dead_worker.py``: a 2 s sync period, a 3 s stale claim, 1 s sweeps.
- The suite's PostgreSQL and Redis listen on 127.0.0.1, which no namespace reaches: a gate
  (``tests/gates.py``) on the bridge's address forwards to each. So the hosts and the
  test's own ORM share the suite's migrated database; a second cluster would need initdb
  and every migration, more than this test's whole time. The cloud is a local endpoint of
  its own on the bridge's address (moto's state is the suite's ``cloud``), so that it
  sees which host each request came from.

The test sends traffic only to the hosts' addresses and the bridge's. It is skipped,
saying why, without root or iproute2's ``ip``.
"""

import base64
import contextlib
import http.client
import itertools
import json
import os
import re
import signal
import subprocess
import sys
import time
from collections import Counter, defaultdict
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from datetime import datetime, timedelta
from http.cookies import SimpleCookie
from pathlib import Path
from urllib.parse import urlencode, urlsplit

import pytest
import redis
from django.conf import settings
from django.contrib.auth import get_user_model
from django.contrib.auth.hashers import PBKDF2PasswordHasher
from django.db import connection
from django.utils import timezone

from devcloud import server as localcloud
from devcloud.server import LocalCloud
from portal.models import AuditEvent, Notification
from rental.fleet.cloud import provider_for
from rental.fleet.sync import PERIOD_CLAIM
from rental.models import Instance, Orphan, OutboxMessage, Reservation, UsageRecord
from rental.providers.base import TAG_INSTALLATION, TAG_RESERVATION, CloudState
from tests import factories, netns
from tests.gates import Gate
from tests.integration.test_chaos import wait_for

UNAVAILABLE = netns.unavailable()
pytestmark = [
    pytest.mark.integration,
    pytest.mark.django_db(transaction=True),
    pytest.mark.skipif(bool(UNAVAILABLE), reason=UNAVAILABLE),
]
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


# -- the test -------------------------------------------------------------------------------


def test_two_web_hosts_and_two_worker_hosts_hold_every_invariant(cluster):
    begun = time.monotonic()
    tokens = sessions_hold_on_either_web_host(cluster)
    leases = leases_launch_once_though_a_worker_host_dies(cluster, tokens)
    beat_ends_each_lease_once(cluster, leases)
    each_region_is_synced_once_a_period(cluster)
    the_outbox_sends_each_message_once(cluster)
    cluster.timings["test"] = time.monotonic() - begun
    print("multihost timings:", {k: round(v, 1) for k, v in cluster.timings.items()})  # noqa: T201


def sessions_hold_on_either_web_host(c: Cluster) -> dict[str, str]:
    """Log in on web-a; the page and a form on web-b with the same cookie and CSRF token;
    the token made by that form, and one made with a password on web-a, work on both;
    logging out on web-a ends the session on web-b. Returns each user's API token."""
    web_a, web_b = (c.net.hosts[name] for name in WEBS)
    browser = Visitor()
    login = browser.get(web_a, "/login/")
    assert login.status == 200, login.text[:500]
    sent = browser.post_form(
        web_a,
        "/login/",
        {
            "username": "alice",
            "password": factories.PASSWORD,
            "csrfmiddlewaretoken": csrf_of(login),
        },
    )
    assert sent.status == 302, sent.text[:500]
    assert "sessionid" in browser.cookies

    page = browser.get(web_b, "/tokens/")
    assert page.status == 200 and "alice" in page.text, page.text[:500]
    made = browser.post_form(
        web_b, "/tokens/", {"name": "multihost", "days": "7", "csrfmiddlewaretoken": csrf_of(page)}
    )
    assert made.status == 200, made.text[:500]
    alice = re.search(r"gpp_[A-Za-z0-9_-]{40}", made.text)
    assert alice, "the token page shows no new token"

    expires = (timezone.now() + timedelta(days=1)).isoformat()
    bob = Visitor().post_json(
        web_a, "/api/v1/tokens", {"name": "multihost", "expires_at": expires}, basic=basic("bob")
    )
    assert bob.status == 201, bob.text[:500]
    tokens = {"alice": alice.group(0), "bob": bob.json()["token"]}
    for username, token in tokens.items():
        for host in (web_a, web_b):
            me = Visitor().get(host, "/api/v1/me", token=token)
            assert (me.status, me.json().get("username")) == (200, username), me.text[:300]

    kept = dict(browser.cookies)  # the session cookie, as a thief or a second tab keeps it
    out = browser.post_form(web_a, "/logout/", {"csrfmiddlewaretoken": csrf_of(page)})
    assert out.status == 302, out.text[:300]
    again = Visitor(cookies=kept).get(web_b, "/tokens/")
    assert (again.status, again.headers["Location"]) == (302, "/login/?next=/tokens/")
    return tokens


def leases_launch_once_though_a_worker_host_dies(c: Cluster, tokens: dict[str, str]) -> list[int]:
    """Six leases asked for through both web hosts at once; every first RunInstances is
    held at the cloud; once all six wait there (so three from each worker host, the most
    a host runs at once), worker-a is killed and started again. Each lease becomes active
    with exactly one cloud instance, launched by both hosts."""
    begun = time.monotonic()
    c.cloud.delay("RunInstances", HOLD, when="before", times=LEASES)
    asks = [("alice", "alpha")] * 2 + [("bob", "beta")] * 4  # within each one's guarantee
    web_hosts = [c.net.hosts[WEBS[n % 2]] for n in range(LEASES)]

    def ask(n: int) -> Answer:
        username, project = asks[n]
        lease = {"project": project, "gpu_model": c.f0.model.pk, "gpu_count": 1}
        lease |= {"duration_hours": "4", "purpose": f"multihost {n}"}
        return Visitor().post_json(web_hosts[n], "/api/v1/leases", lease, token=tokens[username])

    with ThreadPoolExecutor(LEASES) as pool:
        answered = list(pool.map(ask, range(LEASES)))
    assert [a.status for a in answered] == [201] * LEASES, [a.text[:200] for a in answered]
    leases = [a.json()["id"] for a in answered]
    assert {a.json()["status"] for a in answered} == {Status.PROVISIONING}

    # Past HOLD the first launch is answered, and the moment when all wait is gone.
    held = c.cloud.wait_until_held("RunInstances", timeout=HOLD, count=LEASES)
    assert held, f"the six launches never all waited at the cloud: {launch_states(leases)}"
    dead = c.workers["worker-a"]
    dead.kill()
    killed_at = time.monotonic()
    dead.start()  # the host is back; its launches are the other host's to recover
    wait_for(
        lambda: Reservation.objects.filter(pk__in=leases, status=Status.ACTIVE).count() == LEASES,
        timeout=HOLD + STALE + SWEEP + SYNC_PERIOD + MARGIN,
        what=lambda: f"every lease active after the kill: {launch_states(leases)}",
    )
    c.timings["active after the kill"] = time.monotonic() - killed_at
    c.timings["leases"] = time.monotonic() - begun

    workers = {c.address(name) for name in WORKERS}
    wait_for(  # a first call answers after its hold, however early its lease became active
        lambda: workers <= {r.client for r in c.cloud.requests("RunInstances")},
        timeout=HOLD,
        what=lambda: f"both worker hosts to have launched: {c.cloud.requests('RunInstances')}",
    )
    every = cloud_instances(c)
    by_lease = Counter(item.tag(TAG_RESERVATION) for item in every)
    assert by_lease == {str(pk): 1 for pk in leases}, f"instances per lease: {by_lease}"
    rows = {i.reservation_id: i for i in Instance.objects.filter(reservation__in=leases)}
    assert len(rows) == LEASES
    for item in every:
        assert item.state == CloudState.RUNNING
        assert rows[int(item.tag(TAG_RESERVATION))].external_id == item.external_id
    assert not Orphan.objects.exists()
    return leases


def beat_ends_each_lease_once(c: Cluster, leases: list[int]) -> None:
    """Every lease's end is brought to a few seconds from now: both beats' lease checks
    (each every second) warn of it once and end it once, at its end second."""
    begun = time.monotonic()
    end = timezone.now().replace(microsecond=0) + timedelta(seconds=END_IN + 1)
    Reservation.objects.filter(pk__in=leases).update(end=end)
    wait_for(
        lambda: Reservation.objects.filter(pk__in=leases, status=Status.ENDED).count() == LEASES,
        timeout=END_IN + 1 + LEASE_CHECK + SYNC_PERIOD + MARGIN,
        what=lambda: f"every lease ended: {launch_states(leases)}",
    )
    c.timings["ends"] = time.monotonic() - begun
    for lease in Reservation.objects.filter(pk__in=leases):
        events = Counter(
            AuditEvent.objects.filter(
                object_type="rental.reservation", object_id=str(lease.pk)
            ).values_list("verb", flat=True)
        )
        assert (events["lease.end_warned"], events["lease.ended"]) == (1, 1), (lease.pk, events)
        warned = Notification.objects.filter(
            user=lease.requester, link=f"{lease.get_absolute_url()}#extend-form"
        )
        assert warned.count() == 1, (lease.pk, list(warned))
        assert lease.ended_at == end
        usage = list(UsageRecord.objects.filter(instance__reservation=lease))
        assert [u.end for u in usage] == [end], (lease.pk, usage)
    assert {item.state for item in cloud_instances(c)} == {CloudState.TERMINATED}


def each_region_is_synced_once_a_period(c: Cluster) -> None:
    """The beat's syncs of each region, from the claims the trigger logged: never two
    less than three quarters of a period apart, and one a period, though both beats send
    every period: two more at most over the whole test, one where both beats started and
    one where worker-a's started again (each may move the beat whose ticks sync, and the
    first tick of the new one may come early). No sync reached the cloud without a
    claim."""
    claims = sync_claims()
    periodic: dict[str, list[SyncClaim]] = defaultdict(list)
    for claim in claims:
        if claim.periodic:
            periodic[claim.region].append(claim)
    assert periodic, "no periodic sync ran"
    for region, runs in periodic.items():
        gaps = [(b.began - a.began).total_seconds() for a, b in itertools.pairwise(runs)]
        span = (runs[-1].began - runs[0].began).total_seconds()
        hosts = Counter(run.host for run in runs)
        print(  # noqa: T201
            f"region {region}: {len(runs)} periodic syncs over {span:.1f} s (a period of "
            f"{SYNC_PERIOD} s), by {dict(hosts)}; closest two {min(gaps, default=0):.2f} s apart"
        )
        assert min(gaps, default=SYNC_PERIOD) >= SYNC_PERIOD * PERIOD_CLAIM, (region, gaps)
        assert len(runs) <= span / SYNC_PERIOD + 2, (region, len(runs), span)
    workers = {c.address(name) for name in WORKERS}
    described = [
        r
        for r in c.cloud.requests("DescribeInstances")
        if r.client in workers and r.filters == SYNC_DESCRIBE
    ]
    assert len(described) <= len(claims), (len(described), len(claims))


def the_outbox_sends_each_message_once(c: Cluster) -> None:
    """Each outbox row published once: the messages the workers received (each start's
    log of both hosts, by task id) are as many as the rows sent, for every task sent only
    through the outbox. The launches are all done: equal. Syncs and terminations may
    still be on their way: never more."""
    received: dict[str, set[str]] = defaultdict(set)
    for served in c.workers.values():
        for task, task_id in RECEIVED.findall(served.text()):
            received[task].add(task_id)
    sent = Counter(
        OutboxMessage.objects.filter(sent_at__isnull=False).values_list("task", flat=True)
    )
    launches = "rental.tasks.provision_instance_task"
    assert len(received[launches]) == sent[launches], (received[launches], sent)
    for task in ("rental.tasks.sync_region_task", "rental.tasks.terminate_instance_task"):
        assert 0 < len(received[task]) <= sent[task], (task, len(received[task]), sent[task])


def cloud_instances(c: Cluster) -> list:
    """Every instance of this installation the cloud has, in any state."""
    return provider_for(Instance(account=c.f0.account)).describe(
        region="us-east-1", tag_filter={TAG_INSTALLATION: settings.PORTAL_INSTALLATION_ID}
    )


def launch_states(leases: list[int]) -> str:
    rows = Instance.objects.filter(reservation__in=leases).select_related("reservation")
    return "; ".join(
        f"lease {i.reservation_id} {i.reservation.status}: {i.state} "
        f"id={i.external_id or '-'} claimed={i.claimed_at}"
        for i in rows.order_by("pk")
    )
