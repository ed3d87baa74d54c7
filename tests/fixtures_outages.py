"""Outages for the tests (issue 18): the broker, the cache or the database out of reach,
each by aiming the portal at a port of 127.0.0.1 where nothing listens, and back. Also
what the broker's queue holds."""

import base64
import json
from typing import NamedTuple

import pytest
import redis
from celery import Celery
from django.conf import settings
from django.db import connections

from tests import servers


def closed_redis_url(db: int = 0) -> str:
    """A Redis URL on a free port of 127.0.0.1 where nothing listens."""
    return f"redis://127.0.0.1:{servers.free_port()}/{db}"


def celery_app(broker_url: str) -> Celery:
    """A Celery app configured as the portal's, publishing to ``broker_url``."""
    app = Celery("portal", set_as_current=False)
    app.config_from_object("django.conf:settings", namespace="CELERY")
    # The write URL: the environment's CELERY_BROKER_URL would win over broker_url.
    app.conf.broker_write_url = broker_url
    return app


class Queued(NamedTuple):
    task: str
    args: list
    eta: str | None  # ISO 8601, as Celery writes it
    retries: int = 0  # the tries before this one


def queued(broker_url: str | None = None) -> list[Queued]:
    """The task messages waiting in the broker's default queue, oldest first."""
    client = redis.Redis.from_url(broker_url or settings.CELERY_BROKER_URL)
    found = []
    for raw in reversed(client.lrange("celery", 0, -1)):  # pushed left, taken from the right
        message = json.loads(raw)
        args, _kwargs, _embed = json.loads(base64.b64decode(message["body"]))
        headers = message["headers"]
        found.append(Queued(headers["task"], args, headers["eta"], headers["retries"]))
    return found


def empty_queue(broker_url: str | None = None) -> None:
    redis.Redis.from_url(broker_url or settings.CELERY_BROKER_URL).delete("celery")


class Broker:
    """Switches the outbox's publishing between a dead broker and the test run's Redis."""

    def __init__(self, monkeypatch: pytest.MonkeyPatch) -> None:
        # Imported here: this plugin loads before Django is set up, rental.jobs needs models.
        from portal.celery import app
        from rental import jobs

        self.monkeypatch, self.jobs, self.portal_app = monkeypatch, jobs, app

    def down(self) -> None:
        self.monkeypatch.setattr(self.jobs, "app", celery_app(closed_redis_url()))

    def back(self) -> None:
        self.monkeypatch.setattr(self.jobs, "app", self.portal_app)


@pytest.fixture
def broker(monkeypatch, settings):
    """The broker as the outbox sees it (``broker.down()``, ``broker.back()``); its queue
    starts empty. No pause between tries, so a test needs no clock."""
    settings.PORTAL_OUTAGE_RETRY_SECONDS = 0
    empty_queue()
    switch = Broker(monkeypatch)
    yield switch
    switch.jobs.broker.answered()  # this process forgets the outage


def redis_cache(location: str) -> dict:
    """CACHES as production has them (portal.cache), on ``location``."""
    return {
        "default": {
            "BACKEND": "portal.cache.FailOpenRedisCache",
            "LOCATION": location,
            "KEY_PREFIX": "outage-test",
            "OPTIONS": {"socket_connect_timeout": 1, "socket_timeout": 1},
        }
    }


@pytest.fixture
def cache_down(settings):
    """The cache on a Redis that cannot be reached (a port where nothing listens)."""
    settings.CACHES = redis_cache(closed_redis_url())
    yield
    # Imported here: this plugin loads before Django is set up.
    from portal.cache import outage

    outage.answered()  # this process forgets the outage


class Database:
    """The database server as the portal sees it: ``down()`` closes the connection and
    aims it at a port where nothing listens, ``back()`` undoes that."""

    def __init__(self) -> None:
        self.wrapper = connections["default"]
        self.port = self.wrapper.settings_dict["PORT"]

    def down(self) -> None:
        self.wrapper.close()
        self.wrapper.settings_dict["PORT"] = str(servers.free_port())

    def back(self) -> None:
        self.wrapper.close()
        self.wrapper.settings_dict["PORT"] = self.port


@pytest.fixture
def database(transactional_db, settings):
    """The database down for longer than a restart: no request waits for it."""
    settings.DATABASE_RESTART_WAIT_SECONDS = 0
    server = Database()
    yield server
    server.back()
    # Imported here: this plugin loads before Django is set up.
    from portal.db_backend.base import outage

    outage.answered()  # this process forgets the outage
