"""What an instance's agent reports: a heartbeat's samples stored, and what they mean
acted on (health on first contact, idle counting, a spot interruption notice).

A token is accepted only while the instance is live; it is made and installed at launch
(``rental.fleet.agent_install``).
"""

import hmac
from dataclasses import dataclass
from datetime import datetime

from django.conf import settings
from django.db import connection, transaction
from django.db.models import Q
from django.utils import timezone

from rental.agent import idle
from rental.agent.health import judge_health
from rental.agent.idle_rules import IdleSample
from rental.fleet import spot
from rental.fleet.agent_install import token_hash
from rental.loans.locks import lock_leases_of
from rental.models import Instance, UtilizationSample

LIVE_FOR_AGENT = (Instance.State.LAUNCHING, Instance.State.RUNNING)


def token_instance_id(token: str) -> int | None:
    """The instance id a token starts with (``<id>.<secret>``, at most 200 characters),
    or None when it names none: "²" is a digit to Python but not to int()."""
    instance_id, _sep, _secret = token.partition(".")
    plain = instance_id.isascii() and instance_id.isdigit() and len(instance_id) <= 18
    return int(instance_id) if plain and len(token) <= 200 else None


def instance_for_token(token: str) -> Instance | None:
    """The instance a token belongs to, whatever its state; None for an unknown token."""
    instance_id = token_instance_id(token)
    if instance_id is None:
        return None
    instance = (
        Instance.objects.select_related("reservation", "offering__gpu_model")
        .filter(pk=instance_id)
        .exclude(agent_token_hash="")
        .first()
    )
    if instance is None or not hmac.compare_digest(instance.agent_token_hash, token_hash(token)):
        return None
    return instance


# --- Heartbeats ------------------------------------------------------------------------


@dataclass(frozen=True)
class Heartbeat:
    """A validated heartbeat (see rental/api/heartbeat.py for the wire format)."""

    samples: list[dict]
    health: dict | None = None
    burn: dict | None = None
    spot_notice: dict | None = None


@dataclass(frozen=True)
class HeartbeatResult:
    accepted: int
    duplicates: int


class NotLive(Exception):
    pass


class Throttled(Exception):
    pass


class Replay(Exception):
    pass


def _claim_heartbeat(instance: Instance, now: datetime) -> bool:
    """One heartbeat per instance per minimum interval, claimed by a conditional update."""
    since = now - timezone.timedelta(seconds=settings.PORTAL_AGENT_MIN_INTERVAL_SECONDS)
    return bool(
        Instance.objects.filter(pk=instance.pk, state__in=LIVE_FOR_AGENT)
        .filter(Q(last_heartbeat_at__isnull=True) | Q(last_heartbeat_at__lte=since))
        .update(last_heartbeat_at=now)
    )


@transaction.atomic
def record_heartbeat(
    *, instance: Instance, heartbeat: Heartbeat, now: datetime | None = None
) -> HeartbeatResult:
    """Store a heartbeat's samples in one insert, and act on them: health on first contact
    (L8), idle counting (L6), a spot interruption notice (L7).

    Samples not newer than the last one stored are duplicates (a retry after a lost answer)
    and are ignored; a heartbeat made only of duplicates is a replay and is refused."""
    now = now or timezone.now()
    if instance.state not in LIVE_FOR_AGENT:
        raise NotLive
    if connection.vendor == "postgresql":
        # Telemetry: a crash may lose the last instant's samples (the agent resends what was
        # not answered), but no heartbeat waits for a disk flush.
        with connection.cursor() as cursor:
            cursor.execute("SET LOCAL synchronous_commit TO OFF")
    # The lock order: the lease before its instance (idle reaping, a spot notice or a
    # replacement below end or change the lease).
    lock_leases_of([instance.pk])
    if not _claim_heartbeat(instance, now):
        if not Instance.objects.filter(pk=instance.pk, state__in=LIVE_FOR_AGENT).exists():
            raise NotLive
        raise Throttled
    instance = (
        Instance.objects.select_for_update(of=("self",))
        .select_related("reservation__image", "offering__gpu_model")
        .get(pk=instance.pk)
    )
    last = instance.agent_last_sample_at
    fresh = [s for s in heartbeat.samples if last is None or s["at"] > last]
    duplicates = len(heartbeat.samples) - len(fresh)
    if heartbeat.samples and not fresh and not (heartbeat.health or heartbeat.burn):
        raise Replay
    UtilizationSample.objects.bulk_create(
        [
            UtilizationSample(
                instance_id=instance.pk,
                at=s["at"],
                gpu_utilization=[g["utilization"] for g in s["gpus"]],
                memory_used_mb=[g["memory_used_mb"] for g in s["gpus"]],
                ssh_sessions=s.get("ssh_sessions"),
            )
            for s in fresh
        ],
        ignore_conflicts=True,
    )
    update_fields = ["last_heartbeat_at"]
    if fresh:
        instance.agent_last_sample_at = fresh[-1]["at"]
        instance.agent_report = {**instance.agent_report, "gpus": fresh[-1]["gpus"]}
        update_fields += ["agent_last_sample_at", "agent_report"]
    if heartbeat.health:
        instance.agent_report = {**instance.agent_report, "health": heartbeat.health}
        update_fields.append("agent_report")
    if heartbeat.burn:
        instance.agent_report = {**instance.agent_report, "burn": heartbeat.burn}
        update_fields.append("agent_report")
    instance.last_heartbeat_at = now
    instance.save(update_fields=sorted(set(update_fields)))
    if heartbeat.health or heartbeat.burn:
        judge_health(instance, now=now)
    if heartbeat.spot_notice:
        spot.interruption_notice(instance=instance, notice=heartbeat.spot_notice, now=now)
    elif fresh:
        idle.apply_new_samples(
            instance,
            [
                IdleSample(
                    at=s["at"],
                    gpu_utilization=[g["utilization"] for g in s["gpus"]],
                    ssh_sessions=s.get("ssh_sessions"),
                )
                for s in fresh
            ],
            now=now,
        )
    return HeartbeatResult(accepted=len(fresh), duplicates=duplicates)
