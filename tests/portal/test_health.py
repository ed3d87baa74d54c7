"""/healthz and /readyz: public probes that answer JSON without a login, a session or a
CSRF token; /readyz names each failing check in plain words, in a fixed number of
queries, and never shows the broker's address or password. (Stopping the real database,
broker and worker: tests/integration/test_readiness.py.)"""

import socket
import time
from datetime import timedelta

import pytest
from django.conf import settings
from django.test import Client
from django.utils import timezone

from portal import health, tasks
from portal.models import Heartbeat
from rental.models import RegionSync
from tests import factories

PASSWORD = "redis-password-never-shown"


@pytest.fixture
def ready(db, settings):
    """Every check passes: beat's heartbeat just ran, one region has just synced."""
    settings.PORTAL_BEAT_HEARTBEAT_SECONDS = 30
    health.record_beat()
    account = factories.account()
    RegionSync.objects.create(account=account, region="us-east-1", synced_at=timezone.now())
    return account


def _late(period: float, slack: float = 0) -> timedelta:
    return timedelta(seconds=health.MISSED_PERIODS * period + slack + 1)


def test_it_answers_healthz_with_no_query_and_no_session(db, client, django_assert_num_queries):
    with django_assert_num_queries(0):
        response = client.get("/healthz")
    assert response.status_code == 200
    assert response.json() == {"status": "ok"}
    assert "Set-Cookie" not in response and "no-cache" in response["Cache-Control"]
    assert len(response["X-Request-ID"]) == 32
    assert client.head("/healthz").status_code == 200
    assert client.post("/healthz").status_code == 405


def test_it_is_ready_in_one_query_per_database_check(ready, client, django_assert_num_queries):
    with django_assert_num_queries(3):  # SELECT 1, the heartbeat, the regions
        response = client.get("/readyz")
    assert response.status_code == 200, response.content
    body = response.json()
    assert body["status"] == "ok" and body["failed"] == []
    assert list(body["checks"]) == ["database", "broker", "beat", "sync"]
    assert all(check["ok"] for check in body["checks"].values())
    assert "Set-Cookie" not in response and "no-cache" in response["Cache-Control"]
    assert Heartbeat.objects.count() == 1


def test_it_needs_no_csrf_token_or_login_and_answers_only_get_and_head(ready):
    strict = Client(enforce_csrf_checks=True)
    response = strict.get("/readyz")
    assert response.status_code == 200 and "Set-Cookie" not in response
    assert strict.head("/readyz").status_code == 200
    assert Client().post("/readyz").status_code == 405


def test_it_turns_unready_when_beat_is_late_and_ready_after_its_next_heartbeat(ready, client):
    Heartbeat.objects.update(at=timezone.now() - _late(30))
    response = client.get("/readyz")
    assert response.status_code == 503
    body = response.json()
    assert body["status"] == "unready" and body["failed"] == ["beat"]
    assert "every 30 s" in body["checks"]["beat"]["detail"]
    assert body["checks"]["sync"]["ok"] and body["checks"]["database"]["ok"]

    tasks.record_beat_task.apply()  # the task beat sends, as a worker runs it
    assert client.get("/readyz").status_code == 200
    assert Heartbeat.objects.get().at > timezone.now() - timedelta(seconds=5)


def test_it_is_unready_until_beat_has_run_once(ready, client):
    Heartbeat.objects.all().delete()
    response = client.get("/readyz")
    assert response.status_code == 503 and response.json()["failed"] == ["beat"]
    assert "never run" in response.json()["checks"]["beat"]["detail"]


def test_it_turns_unready_when_no_region_syncs_within_its_periods(ready, client):
    period = settings.CELERY_BEAT_SCHEDULE["sync-instances"]["schedule"]
    stale = timezone.now() - _late(period, settings.PORTAL_SYNC_CLAIM_SECONDS)
    RegionSync.objects.update(synced_at=stale)
    response = client.get("/readyz")
    assert response.status_code == 503
    assert response.json()["failed"] == ["sync"]
    assert "beat or the workers have stopped" in response.json()["checks"]["sync"]["detail"]

    # A sync that ran and failed (the cloud's trouble) shows the sync itself runs.
    RegionSync.objects.update(sync_failed_at=timezone.now(), sync_error="throttled: slow down")
    assert client.get("/readyz").status_code == 200


def test_it_leaves_out_regions_of_accounts_no_longer_synced(ready, client):
    old = factories.account(name="Retired cloud")
    old.is_active = False
    old.save()
    RegionSync.objects.create(account=old, region="eu-west-1", synced_at=None)
    RegionSync.objects.filter(account=ready).update(synced_at=timezone.now() - timedelta(days=30))
    assert client.get("/readyz").json()["failed"] == ["sync"]
    RegionSync.objects.filter(account=ready).delete()
    response = client.get("/readyz")
    assert response.status_code == 200
    assert "No provider account" in response.json()["checks"]["sync"]["detail"]


def test_it_turns_unready_when_the_broker_refuses_and_shows_no_address(ready, client, settings):
    with socket.socket() as closed:
        closed.bind(("127.0.0.1", 0))
        port = closed.getsockname()[1]
    settings.CELERY_BROKER_URL = f"redis://:{PASSWORD}@127.0.0.1:{port}/0"
    response = client.get("/readyz")
    assert response.status_code == 503
    assert response.json()["failed"] == ["broker"]
    text = response.content.decode()
    assert PASSWORD not in text and str(port) not in text and "127.0.0.1" not in text
    assert "did not answer a ping" in response.json()["checks"]["broker"]["detail"]


def test_it_answers_within_its_bound_when_the_broker_is_silent(ready, client, settings):
    """A Redis that accepts the connection and never answers: the ping gives up after
    PORTAL_READY_BROKER_TIMEOUT, with no retry."""
    settings.PORTAL_READY_BROKER_TIMEOUT = 1
    with socket.socket() as silent:
        silent.bind(("127.0.0.1", 0))
        silent.listen(8)  # the kernel accepts; nobody ever reads or answers
        settings.CELERY_BROKER_URL = f"redis://127.0.0.1:{silent.getsockname()[1]}/0"
        started = time.monotonic()
        response = client.get("/readyz")
        took = time.monotonic() - started
    assert response.status_code == 503 and response.json()["failed"] == ["broker"]
    assert took < 2 * settings.PORTAL_READY_BROKER_TIMEOUT + 1, took


def test_it_checks_the_demo_brokers_folder(ready, client, settings, tmp_path):
    settings.CELERY_BROKER_URL = "filesystem://"
    settings.CELERY_BROKER_TRANSPORT_OPTIONS = {"data_folder_in": str(tmp_path / "queue")}
    assert client.get("/readyz").json()["failed"] == ["broker"]
    (tmp_path / "queue").mkdir()
    assert client.get("/readyz").status_code == 200


def test_it_sends_beats_heartbeat_on_the_schedule_and_drops_late_ones():
    entry = settings.CELERY_BEAT_SCHEDULE["record-beat"]
    assert entry["task"] == tasks.record_beat_task.name == "portal.tasks.record_beat_task"
    assert entry["schedule"] == settings.PORTAL_BEAT_HEARTBEAT_SECONDS
    assert entry["options"]["expires"] == settings.PORTAL_BEAT_HEARTBEAT_SECONDS
