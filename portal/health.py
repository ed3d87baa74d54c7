"""What ``/readyz`` asks: does the database answer, does the broker answer, and have the
periodic processes run within their periods.

The database and the broker are checked here, then every check named in
``PORTAL_READINESS_CHECKS`` (dotted paths of functions ``(*, now) -> Check``): portal's
beat heartbeat, rental's sync. Those read the database, so they are not asked when it does
not answer. Each answer is in plain words for an operator, like a log line (not
translated), and never holds a URL, a host or a credential.
"""

import os
from collections.abc import Callable
from dataclasses import dataclass
from datetime import datetime, timedelta

import redis
from django.conf import settings
from django.db import Error as DatabaseError
from django.db import connection
from django.utils import timezone
from django.utils.module_loading import import_string
from redis.backoff import NoBackoff
from redis.retry import Retry

from portal.models import Heartbeat

# A periodic process is late once this many of its periods have passed without a run: one
# missed run (a slow task, a restart) is not an outage.
MISSED_PERIODS = 3


@dataclass(frozen=True)
class Check:
    name: str
    ok: bool
    detail: str


def is_late(at: datetime | None, *, now: datetime, period: float, slack: float = 0) -> bool:
    """Whether a run at ``at`` is older than ``MISSED_PERIODS`` periods (plus ``slack``
    seconds: how long one run may itself take). Never run counts as late."""
    return at is None or now - at > timedelta(seconds=MISSED_PERIODS * period + slack)


def database(*, now: datetime) -> Check:
    """One ``SELECT 1`` on the default connection."""
    try:
        with connection.cursor() as cursor:
            cursor.execute("SELECT 1")
    except DatabaseError as exc:
        return Check("database", False, f"The database did not answer ({type(exc).__name__}).")
    return Check("database", True, "The database answers.")


def broker(*, now: datetime) -> Check:
    """A Redis broker is pinged on a connection of its own, with
    ``PORTAL_READY_BROKER_TIMEOUT`` seconds to connect and as many to answer, and no retry:
    a dead or silent Redis is told within twice that. The demo's folder broker is there
    when its queue folder can be written. Other brokers are not checked."""
    url = settings.CELERY_BROKER_URL
    timeout = settings.PORTAL_READY_BROKER_TIMEOUT
    if url.startswith(("redis://", "rediss://")):
        client = redis.Redis.from_url(
            url,
            socket_connect_timeout=timeout,
            socket_timeout=timeout,
            retry=Retry(NoBackoff(), 0),
        )
        try:
            client.ping()
        except (redis.RedisError, OSError) as exc:
            return Check(
                "broker",
                False,
                f"Redis (the broker) did not answer a ping within {timeout} s "
                f"({type(exc).__name__}).",
            )
        finally:
            client.close()
        return Check("broker", True, "Redis (the broker) answers.")
    if url.startswith("filesystem://"):
        folder = settings.CELERY_BROKER_TRANSPORT_OPTIONS["data_folder_in"]
        if not (os.path.isdir(folder) and os.access(folder, os.W_OK)):
            return Check("broker", False, "The demo broker's queue folder cannot be written.")
        return Check("broker", True, "The demo broker's queue folder can be written.")
    return Check("broker", True, "Not checked: only a Redis or the demo's folder broker is.")


def beat(*, now: datetime) -> Check:
    """Beat's heartbeat task (every ``PORTAL_BEAT_HEARTBEAT_SECONDS``) ran on a worker
    within ``MISSED_PERIODS`` periods."""
    period = settings.PORTAL_BEAT_HEARTBEAT_SECONDS
    at = Heartbeat.objects.filter(name=Heartbeat.BEAT).values_list("at", flat=True).first()
    if at is None:
        return Check(
            "beat",
            False,
            f"Beat's heartbeat task has never run (it runs every {period} s): "
            "start Celery beat and a worker.",
        )
    age = int((now - at).total_seconds())
    if is_late(at, now=now, period=period):
        return Check(
            "beat",
            False,
            f"Beat's heartbeat last ran {age} s ago; it runs every {period} s: "
            "beat has stopped, or no worker takes its tasks.",
        )
    return Check("beat", True, f"Beat's heartbeat ran {age} s ago (every {period} s).")


def record_beat(*, now: datetime | None = None) -> None:
    """Beat's heartbeat, in one statement (an insert that updates the existing row)."""
    Heartbeat.objects.bulk_create(
        [Heartbeat(name=Heartbeat.BEAT, at=now or timezone.now())],
        update_conflicts=True,
        unique_fields=["name"],
        update_fields=["at"],
    )


def readiness(*, now: datetime | None = None) -> list[Check]:
    """Every check, in order: the database and the broker, then the configured ones. When
    the database does not answer, those are reported as not checked (they would only wait
    on it again)."""
    now = now or timezone.now()
    checks = [database(now=now), broker(now=now)]
    database_ok = checks[0].ok
    for path in settings.PORTAL_READINESS_CHECKS:
        check: Callable[..., Check] = import_string(path)
        name = path.rsplit(".", 1)[-1]
        if not database_ok:
            checks.append(Check(name, False, "Not checked: the database did not answer."))
            continue
        try:
            checks.append(check(now=now))
        except DatabaseError as exc:
            checks.append(Check(name, False, f"Could not be read ({type(exc).__name__})."))
    return checks
