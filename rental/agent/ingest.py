"""A heartbeat of samples, cheaply: the agent token is checked, the per-instance throttle
claimed and what the samples are compared with read in one UPDATE … RETURNING by the
instance's primary key and its token's SHA-256 (no ORM object is built), the samples are
written in one insert and the instance's last report in one update, all in one
transaction that does not wait for a disk flush (telemetry: the agent resends what was
not answered). Idle counting reads nothing more when every new sample is busy and no
warning stands (most heartbeats); otherwise it runs as before. A heartbeat carrying
health, a burn or a spot notice (once per instance, or rare) takes the full path of
``record_heartbeat``, as does any database other than PostgreSQL.
"""

import json
from datetime import datetime, timedelta

from django.conf import settings
from django.db import connection, transaction
from django.utils import timezone

from rental.agent import idle
from rental.agent.heartbeat import (
    LIVE_FOR_AGENT,
    Heartbeat,
    HeartbeatResult,
    NotLive,
    Replay,
    Throttled,
    instance_for_token,
    record_heartbeat,
    token_instance_id,
)
from rental.agent.idle_rules import ACTIVE, IdleSample, classify
from rental.fleet.agent_install import token_hash
from rental.models import Instance, Reservation, UtilizationSample

# One statement claims the throttle window, checks the token and the instance's state,
# and records the newest sample's readings as the instance's report, by the primary key;
# it returns what the samples are compared with, as it was before. The instance row is
# written once per heartbeat (its heartbeat columns are in no index, so the update can be
# HOT: migration 0011 leaves room on its pages). ``cfg`` turns off the wait for the disk
# flush for this transaction only (telemetry: the agent resends what was not answered).
_CLAIM = """
WITH cfg AS (SELECT set_config('synchronous_commit', 'off', true) AS off),
old AS (
  SELECT i.id, i.agent_last_sample_at, i.idle_reset_at, i.idle_warned_at, r.status, r.priority
  FROM rental_instance AS i JOIN rental_reservation AS r ON r.id = i.reservation_id
  WHERE i.id = %(pk)s AND i.agent_token_hash = %(hash)s AND i.state = ANY(%(live)s)
    AND (i.last_heartbeat_at IS NULL OR i.last_heartbeat_at <= %(since)s)
  FOR UPDATE OF i
), claim AS (
  UPDATE rental_instance AS i SET last_heartbeat_at = %(now)s,
    agent_last_sample_at = CASE WHEN %(newest)s::timestamptz > COALESCE(old.agent_last_sample_at,
      '-infinity') THEN %(newest)s::timestamptz ELSE i.agent_last_sample_at END,
    agent_report = CASE WHEN %(newest)s::timestamptz > COALESCE(old.agent_last_sample_at,
      '-infinity') THEN jsonb_set(COALESCE(i.agent_report, '{}'::jsonb), '{gpus}',
      %(gpus)s::jsonb) ELSE i.agent_report END
  FROM old WHERE i.id = old.id
  RETURNING old.agent_last_sample_at, old.idle_reset_at, old.idle_warned_at, old.status,
    old.priority
)
SELECT claim.*, (SELECT off FROM cfg) FROM claim
"""
_INSERT = """
INSERT INTO rental_utilizationsample
  (instance_id, at, gpu_utilization, memory_used_mb, ssh_sessions)
SELECT %s, * FROM unnest(%s::timestamptz[], %s::bytea[], %s::bytea[], %s::smallint[])
ON CONFLICT DO NOTHING
"""
_UTILIZATION = UtilizationSample._meta.get_field("gpu_utilization")
_MEMORY = UtilizationSample._meta.get_field("memory_used_mb")


class BadToken(Exception):
    pass


def ingest(*, token: str, heartbeat: Heartbeat, now: datetime | None = None):
    """Record one heartbeat for the instance ``token`` belongs to. Raises BadToken,
    NotLive, Throttled or Replay; returns HeartbeatResult."""
    now = now or timezone.now()
    instance_id = token_instance_id(token)
    if instance_id is None:
        raise BadToken
    rare = heartbeat.health or heartbeat.burn or heartbeat.spot_notice
    if rare or connection.vendor != "postgresql":
        instance = instance_for_token(token)
        if instance is None:
            raise BadToken
        return record_heartbeat(instance=instance, heartbeat=heartbeat, now=now)
    newest = heartbeat.samples[-1] if heartbeat.samples else None
    with transaction.atomic(), connection.cursor() as cursor:
        cursor.execute(
            _CLAIM,
            {
                "now": now,
                "pk": instance_id,
                "hash": token_hash(token),
                "live": [str(state) for state in LIVE_FOR_AGENT],
                "since": now - timedelta(seconds=settings.PORTAL_AGENT_MIN_INTERVAL_SECONDS),
                "newest": newest["at"] if newest else None,
                "gpus": json.dumps(newest["gpus"] if newest else []),
            },
        )
        row = cursor.fetchone()
        if row is None:
            raise _why_refused(token)
        last, idle_reset_at, idle_warned_at, status, priority, _off = row
        fresh = [s for s in heartbeat.samples if last is None or s["at"] > last]
        if heartbeat.samples and not fresh:
            raise Replay  # rolls the claim back
        if not fresh:
            return HeartbeatResult(accepted=0, duplicates=0)
        cursor.execute(
            _INSERT,
            [
                instance_id,
                [s["at"] for s in fresh],
                [_UTILIZATION.pack([g["utilization"] for g in s["gpus"]]) for s in fresh],
                [_MEMORY.pack([g["memory_used_mb"] for g in s["gpus"]]) for s in fresh],
                [s.get("ssh_sessions") for s in fresh],
            ],
        )
        if status == Reservation.Status.ACTIVE:
            _count_idle(instance_id, fresh, priority, idle_reset_at, idle_warned_at, now)
    return HeartbeatResult(accepted=len(fresh), duplicates=len(heartbeat.samples) - len(fresh))


def _count_idle(instance_id, fresh, priority, idle_reset_at, idle_warned_at, now) -> None:
    samples = [
        IdleSample(
            at=s["at"],
            gpu_utilization=[g["utilization"] for g in s["gpus"]],
            ssh_sessions=s.get("ssh_sessions"),
        )
        for s in fresh
        if not idle_reset_at or s["at"] > idle_reset_at
    ]
    policy = idle.policy_for(priority)
    if idle_warned_at is None and all(classify(s, policy) == ACTIVE for s in samples):
        return  # busy and no warning standing: nothing to count, nothing to withdraw
    instance = Instance.objects.select_related("reservation").get(pk=instance_id)
    idle.apply_new_samples(instance, samples, now=now)


def _why_refused(token: str) -> Exception:
    """The claim matched nothing: an unknown token, an instance that has ended, or a
    heartbeat sooner than the minimum interval (one more query, on refusals only)."""
    instance = instance_for_token(token)
    if instance is None:
        return BadToken()
    if instance.state not in LIVE_FOR_AGENT:
        return NotLive()
    return Throttled()
