"""A heartbeat of samples, cheaply: the agent token is checked, the per-instance throttle
claimed and what the samples are compared with read in one UPDATE … RETURNING by the
instance's primary key and its token's SHA-256 (no ORM object is built), the samples are
written in one insert and the instance's last report in one update, all in one
transaction that does not wait for a disk flush (telemetry: the agent resends what was
not answered). Idle counting reads nothing more when every new sample is busy and no
warning stands (most heartbeats); otherwise it runs as before. A heartbeat carrying
health, a burn or a spot notice (once per instance, or rare) takes the full path of
``agent.record_heartbeat``, as does any database other than PostgreSQL.
"""

import json
from datetime import datetime, timedelta

from django.conf import settings
from django.db import connection, transaction
from django.utils import timezone

from rental.models import Instance, Reservation, UtilizationSample
from rental.services import agent, idle

_CLAIM = """
UPDATE rental_instance AS i SET last_heartbeat_at = %(now)s
FROM rental_reservation AS r
WHERE i.id = %(pk)s AND r.id = i.reservation_id AND i.agent_token_hash = %(hash)s
  AND i.state = ANY(%(live)s)
  AND (i.last_heartbeat_at IS NULL OR i.last_heartbeat_at <= %(since)s)
RETURNING i.agent_last_sample_at, i.idle_reset_at, i.idle_warned_at, r.status, r.priority
"""
_REPORT = """
UPDATE rental_instance SET agent_last_sample_at = %s,
  agent_report = jsonb_set(COALESCE(agent_report, '{}'::jsonb), '{gpus}', %s::jsonb)
WHERE id = %s
"""


class BadToken(Exception):
    pass


def ingest(*, token: str, heartbeat: agent.Heartbeat, now: datetime | None = None):
    """Record one heartbeat for the instance ``token`` belongs to. Raises BadToken,
    agent.NotLive, agent.Throttled or agent.Replay; returns agent.HeartbeatResult."""
    now = now or timezone.now()
    instance_id, _sep, _secret = token.partition(".")
    if not instance_id.isdigit() or len(token) > 200:
        raise BadToken
    rare = heartbeat.health or heartbeat.burn or heartbeat.spot_notice
    if rare or connection.vendor != "postgresql":
        instance = agent.instance_for_token(token)
        if instance is None:
            raise BadToken
        return agent.record_heartbeat(instance=instance, heartbeat=heartbeat, now=now)
    with transaction.atomic():
        with connection.cursor() as cursor:
            cursor.execute("SET LOCAL synchronous_commit TO OFF")
            cursor.execute(
                _CLAIM,
                {
                    "now": now,
                    "pk": int(instance_id),
                    "hash": agent.token_hash(token),
                    "live": [str(state) for state in agent.LIVE_FOR_AGENT],
                    "since": now - timedelta(seconds=settings.PORTAL_AGENT_MIN_INTERVAL_SECONDS),
                },
            )
            row = cursor.fetchone()
            if row is None:
                raise _why_refused(token)
            last, idle_reset_at, idle_warned_at, status, priority = row
            fresh = [s for s in heartbeat.samples if last is None or s["at"] > last]
            if heartbeat.samples and not fresh:
                raise agent.Replay  # rolls the claim back
            if not fresh:
                return agent.HeartbeatResult(accepted=0, duplicates=0)
            UtilizationSample.objects.bulk_create(
                [
                    UtilizationSample(
                        instance_id=int(instance_id),
                        at=s["at"],
                        gpu_utilization=[g["utilization"] for g in s["gpus"]],
                        memory_used_mb=[g["memory_used_mb"] for g in s["gpus"]],
                        ssh_sessions=s.get("ssh_sessions"),
                    )
                    for s in fresh
                ],
                ignore_conflicts=True,
            )
            cursor.execute(
                _REPORT, [fresh[-1]["at"], json.dumps(fresh[-1]["gpus"]), int(instance_id)]
            )
        if status == Reservation.Status.ACTIVE:
            _count_idle(int(instance_id), fresh, priority, idle_reset_at, idle_warned_at, now)
    return agent.HeartbeatResult(
        accepted=len(fresh), duplicates=len(heartbeat.samples) - len(fresh)
    )


def _count_idle(instance_id, fresh, priority, idle_reset_at, idle_warned_at, now) -> None:
    samples = [
        idle.IdleSample(
            at=s["at"],
            gpu_utilization=[g["utilization"] for g in s["gpus"]],
            ssh_sessions=s.get("ssh_sessions"),
        )
        for s in fresh
        if not idle_reset_at or s["at"] > idle_reset_at
    ]
    policy = idle.policy_for(priority)
    if idle_warned_at is None and all(idle.classify(s, policy) == idle.ACTIVE for s in samples):
        return  # busy and no warning standing: nothing to count, nothing to withdraw
    instance = Instance.objects.select_related("reservation").get(pk=instance_id)
    idle.apply_new_samples(instance, samples, now=now)


def _why_refused(token: str) -> Exception:
    """The claim matched nothing: an unknown token, an instance that has ended, or a
    heartbeat sooner than the minimum interval (one more query, on refusals only)."""
    instance = agent.instance_for_token(token)
    if instance is None:
        return BadToken()
    if instance.state not in agent.LIVE_FOR_AGENT:
        return agent.NotLive()
    return agent.Throttled()
