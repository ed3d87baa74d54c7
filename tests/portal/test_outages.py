"""The site through outages (issue 18, point 1): the cache (Redis) down lets logins and
API calls through, with one log line; with the broker down too a lease is still taken on
its page, its launch kept in the outbox; the database down is a 503 page in the reader's
language with Retry-After; a restarted database costs a kept connection nothing, and a
new connection waits for a database that is restarting."""

import psycopg
import pytest
import redis
from django.contrib.auth import get_user_model
from django.db import OperationalError, close_old_connections, connections
from django.test import Client
from django.urls import reverse

from portal.api.throttling import PerUserRateThrottle
from portal.cache import outage
from portal.db_backend import base as db_backend
from rental.models import Instance, OutboxMessage, Reservation
from tests import factories
from tests.api.leases_world import client_for
from tests.fixtures_outages import closed_redis_url, redis_cache
from tests.servers import free_port


@pytest.fixture
def cache_test_keys(settings):
    """The cache's keys this test writes on the run's Redis, deleted afterwards, and the
    outage it saw forgotten."""
    yield
    outage.answered()
    client = redis.Redis.from_url(settings.CELERY_BROKER_URL)
    keys = list(client.scan_iter("outage-test:*"))
    if keys:
        client.delete(*keys)


def test_it_throttles_through_redis_and_lets_calls_through_while_it_is_down(
    db, settings, monkeypatch, caplog, cache_test_keys
):
    monkeypatch.setattr(PerUserRateThrottle, "THROTTLE_RATES", {"user": "2/min"})
    client = client_for(factories.user("alice"))
    settings.CACHES = redis_cache(settings.CELERY_BROKER_URL)
    assert [client.get("/api/v1/me").status_code for _ in range(3)] == [200, 200, 429]
    assert not [r for r in caplog.records if r.name == "portal.outages"]

    settings.CACHES = redis_cache(closed_redis_url())
    assert [client.get("/api/v1/me").status_code for _ in range(3)] == [200, 200, 200]
    [line] = [r for r in caplog.records if r.name == "portal.outages"]
    assert line.levelname == "WARNING"
    assert line.getMessage().startswith("The cache (Redis) cannot be reached (ConnectionError")
    assert "throttles let requests through" in line.getMessage()


def test_it_logs_in_while_the_cache_is_down(db, client, cache_down):
    factories.user("erik")
    wrong = client.post(reverse("login"), {"username": "erik", "password": "wrong"})
    assert wrong.status_code == 200 and "_auth_user_id" not in client.session
    right = client.post(reverse("login"), {"username": "erik", "password": factories.PASSWORD})
    assert right.status_code == 302 and right["Location"] == reverse("dashboard")
    assert client.get(reverse("dashboard")).status_code == 200


def test_it_takes_a_lease_on_its_page_while_redis_is_down(
    f0, client, broker, cache_down, django_capture_on_commit_callbacks
):
    broker.down()
    client.force_login(f0.alice)
    assert client.get(reverse("rental:lease_new")).status_code == 200
    asked = {
        "project": f0.alpha.pk,
        "gpu_model": f0.model.pk,
        "gpu_count": "2",
        "duration_hours": "4",
        "priority": "experiment",
        "market": "on_demand",
    }
    with django_capture_on_commit_callbacks(execute=True):
        response = client.post(reverse("rental:lease_new"), asked)
    assert response.status_code == 302
    lease = Reservation.objects.get()
    assert lease.status == Reservation.Status.PROVISIONING
    assert response["Location"] == lease.get_absolute_url()
    launches = Instance.objects.filter(reservation=lease).order_by("pk")
    waiting = OutboxMessage.objects.filter(sent_at__isnull=True)
    assert [(m.task, m.args) for m in waiting] == [
        ("rental.tasks.provision_instance_task", [i.pk]) for i in launches
    ]
    assert client.get(lease.get_absolute_url()).status_code == 200


def test_it_shows_a_503_page_in_the_readers_language_while_the_database_is_down(database, settings):
    settings.PORTAL_RETRY_AFTER_SECONDS = 7
    client = Client(raise_request_exception=False)
    client.force_login(factories.user("erik"))
    database.down()

    for language, title in (("en", "The portal cannot answer right now"), ("zh-hans", "门户")):
        page = client.get(reverse("dashboard"), HTTP_ACCEPT_LANGUAGE=language)
        assert page.status_code == 503
        assert page["Retry-After"] == "7"
        text = page.content.decode()
        assert title in text and f'lang="{language}"' in text
        assert "Traceback" not in text and "OperationalError" not in text

    database.back()
    assert client.get(reverse("dashboard")).status_code == 200


def backend_pid(alias: str = "default") -> int:
    with connections[alias].cursor() as cursor:
        cursor.execute("SELECT pg_backend_pid()")
        return cursor.fetchone()[0]


def restart_ends(pid: int) -> None:
    """What a PostgreSQL restart does to a connection the portal keeps: the server ends
    it (from a connection of its own)."""
    db = connections["default"].settings_dict
    with psycopg.connect(
        host=db["HOST"], port=db["PORT"], user=db["USER"], dbname=db["NAME"], autocommit=True
    ) as admin:
        admin.execute("SELECT pg_terminate_backend(%s)", [pid])


@pytest.mark.django_db(transaction=True)
def test_it_reconnects_a_kept_connection_after_the_database_restarts(settings):
    assert settings.DATABASES["default"]["CONN_HEALTH_CHECKS"] is True
    wrapper = connections["default"]
    kept = dict(wrapper.settings_dict)
    factories.user("erik")
    users = get_user_model().objects
    try:
        for health_checks in (True, False):
            wrapper.close()
            wrapper.settings_dict.update(CONN_MAX_AGE=60, CONN_HEALTH_CHECKS=health_checks)
            restart_ends(backend_pid())
            close_old_connections()  # as at the start of every request and task
            if health_checks:
                assert users.count() == 1  # checked, found dead, opened again
            else:  # what the setting saves: the first request after a restart fails
                with pytest.raises(OperationalError):
                    users.count()
    finally:
        wrapper.close()
        wrapper.settings_dict.update(kept)


class Restarting:
    """psycopg's connect as the portal's backend calls it, to a server that refuses the
    first ``refusals`` connections (they go to a port where nothing listens), then answers."""

    def __init__(self, monkeypatch, refusals: float) -> None:
        self.refusals = refusals
        self.attempts = 0
        self.connect = psycopg.connect
        monkeypatch.setattr(psycopg, "connect", self)

    def __call__(self, *args, **kwargs):
        self.attempts += 1
        if self.attempts <= self.refusals:
            kwargs = {**kwargs, "port": free_port()}
        return self.connect(*args, **kwargs)


@pytest.fixture
def new_connection(db):
    """A connection of its own to the test database, opened by the test (the test's own
    connection holds its transaction)."""
    wrapper = connections.create_connection("default")
    yield wrapper
    wrapper.close()
    db_backend.outage.answered()  # this process forgets any outage the test saw


def test_a_new_connection_waits_for_a_restarting_database(new_connection, settings, monkeypatch):
    settings.DATABASE_RESTART_WAIT_SECONDS = 30
    server = Restarting(monkeypatch, refusals=3)

    new_connection.ensure_connection()

    assert server.attempts == 4
    assert new_connection.is_usable()


def test_an_outage_costs_one_wait_and_one_log_line(new_connection, settings, monkeypatch, caplog):
    settings.DATABASE_RESTART_WAIT_SECONDS = 0.3
    settings.PORTAL_OUTAGE_RETRY_SECONDS = 60
    server = Restarting(monkeypatch, refusals=float("inf"))

    with pytest.raises(OperationalError):
        new_connection.ensure_connection()  # waits 0.3 s, then gives up
    waited = server.attempts
    assert waited >= 2
    with pytest.raises(OperationalError):
        new_connection.ensure_connection()  # within the retry time: one try, no wait
    assert server.attempts == waited + 1
    lines = [r.getMessage() for r in caplog.records if r.name == "portal.outages"]
    assert len(lines) == 1 and lines[0].startswith("The database cannot be reached")

    server.refusals = 0
    new_connection.ensure_connection()
    lines = [r.getMessage() for r in caplog.records if r.name == "portal.outages"]
    assert len(lines) == 2 and lines[1].startswith("The database answers again")
