"""The agent on each instance: its token, its installation, and what its heartbeats do.

The token is derived from the instance's idempotency key with the site's secret, so a
launch retried after a lost answer installs the same token; only its SHA-256 is stored.
It is accepted only while the instance is live and forgotten when the instance ends.
"""

import base64
import gzip
import hashlib
import hmac
import json
import re
from dataclasses import dataclass
from datetime import datetime
from decimal import Decimal
from pathlib import Path

from django.conf import settings
from django.db import connection, transaction
from django.db.models import Q
from django.utils import timezone
from django.utils.translation import gettext as _

from portal import audit
from portal.notifications import admins, notify
from rental.agent import idle
from rental.models import Instance, Reservation, UtilizationSample

AGENT_SOURCE = Path(settings.BASE_DIR) / "agent" / "gpu_portal_agent.py"
AGENT_PATH = "/opt/gpu-portal/gpu_portal_agent.py"
CONFIG_PATH = "/etc/gpu-portal-agent.json"
LIVE_FOR_AGENT = (Instance.State.LAUNCHING, Instance.State.RUNNING)
JUPYTER_PORT = 8888
TENSORBOARD_PORT = 6006


# --- The token -------------------------------------------------------------------------


def agent_token(instance: Instance) -> str:
    secret = hmac.new(
        settings.SECRET_KEY.encode(),
        f"gpu-portal-agent:{instance.idempotency_key}".encode(),
        hashlib.sha256,
    ).hexdigest()
    return f"{instance.pk}.{secret}"


def token_hash(token: str) -> str:
    return hashlib.sha256(token.encode()).hexdigest()


def instance_for_token(token: str) -> Instance | None:
    """The instance a token belongs to, whatever its state; None for an unknown token."""
    instance_id, _sep, _secret = token.partition(".")
    if not instance_id.isdigit() or len(token) > 200:
        return None
    instance = (
        Instance.objects.select_related("reservation", "offering__gpu_model")
        .filter(pk=int(instance_id))
        .exclude(agent_token_hash="")
        .first()
    )
    if instance is None or not hmac.compare_digest(instance.agent_token_hash, token_hash(token)):
        return None
    return instance


def lease_token(lease: Reservation, purpose: str = "jupyter") -> str:
    """The per-lease token JupyterLab is started with; shown on the lease page."""
    return hmac.new(
        settings.SECRET_KEY.encode(), f"gpu-portal-{purpose}:{lease.pk}".encode(), hashlib.sha256
    ).hexdigest()[:32]


def image_has(lease: Reservation, tool: str) -> bool:
    return bool(lease.image and tool in lease.image.frameworks.lower())


# --- Installation at launch ------------------------------------------------------------


def _tool_units(instance: Instance, user: str) -> list[str]:
    """systemd units for JupyterLab / TensorBoard when the image has them, on localhost
    only (reached through an SSH tunnel), Jupyter with the lease's token."""
    lease = instance.reservation
    tools = []
    if image_has(lease, "jupyter"):
        tools.append(
            (
                "jupyter",
                f"/bin/bash -lc 'jupyter lab --no-browser --ip=127.0.0.1 --port={JUPYTER_PORT} "
                f"--ServerApp.token={lease_token(lease)}'",
            )
        )
    if image_has(lease, "tensorboard"):
        tools.append(
            (
                "tensorboard",
                "/bin/bash -lc 'mkdir -p ~/runs && tensorboard --logdir ~/runs "
                f"--host 127.0.0.1 --port {TENSORBOARD_PORT}'",
            )
        )
    lines = []
    for name, command in tools:
        lines += [
            f"  - path: /etc/systemd/system/gpu-portal-{name}.service",
            "    content: |",
            "      [Service]",
            f"      User={user}",
            f"      WorkingDirectory=/home/{user}",
            f"      ExecStart={command}",
            "      Restart=on-failure",
            "      [Install]",
            "      WantedBy=multi-user.target",
        ]
    return lines


def cloud_config(instance: Instance, *, ssh_keys: list[str]) -> str:
    """The instance's user-data: the engineer's SSH keys, and the agent with its token,
    started as a service. Records the token's hash on the instance."""
    token = agent_token(instance)
    Instance.objects.filter(pk=instance.pk).update(agent_token_hash=token_hash(token))
    instance.agent_token_hash = token_hash(token)
    user = instance.ssh_user or "ubuntu"
    config = {
        "url": settings.PORTAL_AGENT_URL.rstrip("/") + "/api/v1/agent/heartbeat",
        "token": token,
        "interval": settings.PORTAL_AGENT_HEARTBEAT_SECONDS,
        "burn_seconds": settings.PORTAL_BURN_SECONDS,
    }
    source = base64.b64encode(gzip.compress(AGENT_SOURCE.read_bytes(), mtime=0)).decode()
    lines = ["#cloud-config", "users:", "  - default"]
    if ssh_keys:
        lines += [f"  - name: {user}", "    ssh_authorized_keys:"]
        lines += [f"      - {key}" for key in ssh_keys]
    lines += [
        "write_files:",
        f"  - path: {AGENT_PATH}",
        "    permissions: '0755'",
        "    encoding: gz+b64",
        f"    content: {source}",
        f"  - path: {CONFIG_PATH}",
        "    permissions: '0600'",
        f"    content: '{json.dumps(config)}'",
        "  - path: /etc/systemd/system/gpu-portal-agent.service",
        "    content: |",
        "      [Unit]",
        "      Description=GPU Portal agent",
        "      After=network-online.target",
        "      [Service]",
        f"      ExecStart=/usr/bin/python3 {AGENT_PATH} --config {CONFIG_PATH}",
        "      Restart=always",
        "      RestartSec=10",
        "      Nice=10",
        "      [Install]",
        "      WantedBy=multi-user.target",
        *_tool_units(instance, user),
        "runcmd:",
        "  - [systemctl, daemon-reload]",
        "  - [systemctl, enable, --now, gpu-portal-agent.service]",
    ]
    for tool in ("jupyter", "tensorboard"):
        if image_has(instance.reservation, tool):
            lines.append(f"  - [systemctl, enable, --now, gpu-portal-{tool}.service]")
    return "\n".join(lines) + "\n"


# --- Heartbeats ------------------------------------------------------------------------


@dataclass(frozen=True)
class Heartbeat:
    """A validated heartbeat (see rental/heartbeat.py for the wire format)."""

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
        _judge_health(instance, now=now)
    if heartbeat.spot_notice:
        from rental.fleet import spot

        spot.interruption_notice(instance=instance, notice=heartbeat.spot_notice, now=now)
    elif fresh:
        idle.apply_new_samples(
            instance,
            [
                idle.IdleSample(
                    at=s["at"],
                    gpu_utilization=[g["utilization"] for g in s["gpus"]],
                    ssh_sessions=s.get("ssh_sessions"),
                )
                for s in fresh
            ],
            now=now,
        )
    return HeartbeatResult(accepted=len(fresh), duplicates=duplicates)


# --- Health (L8) -----------------------------------------------------------------------


def _tokens(name: str) -> list[str]:
    return [t for t in re.split(r"[^a-z0-9]+", name.lower()) if t]


def gpu_name_matches(reported: str, expected: str) -> bool:
    """'NVIDIA A100-SXM4-80GB' is an 'A100 80GB'; 'NVIDIA L40S' is not an 'L4 24GB'
    (memory sizes are compared by token only when the card reports them)."""
    got = _tokens(reported)
    want = _tokens(expected)
    if not want:
        return False
    model, *rest = want
    if model not in got:
        return False
    sizes = [t for t in got if re.fullmatch(r"\d+gb", t)]
    return not sizes or all(t in got for t in rest if re.fullmatch(r"\d+gb", t))


def _version(value: str) -> tuple[int, ...]:
    return tuple(int(part) for part in re.findall(r"\d+", value or "")[:3])


def health_problems(
    *,
    expected_model: str,
    expected_count: int,
    image_cuda: str,
    rated_tflops: Decimal | None,
    health: dict | None,
    burn: dict | None,
    min_percent: int,
) -> list[str]:
    """Why an instance is not what it claims, in words for the engineer; empty if it is.
    A pure function over the agent's report."""
    problems = []
    if health:
        gpus = health.get("gpus", [])
        if len(gpus) != expected_count:
            problems.append(
                _("%(got)s GPUs found, %(want)s expected.")
                % {"got": len(gpus), "want": expected_count}
            )
        wrong = sorted({g["name"] for g in gpus if not gpu_name_matches(g["name"], expected_model)})
        if wrong:
            problems.append(
                _("The card is %(got)s, not %(want)s.")
                % {"got": ", ".join(wrong), "want": expected_model}
            )
        cuda = health.get("cuda_version", "")
        if image_cuda and cuda and _version(cuda) < _version(image_cuda):
            problems.append(
                _("Driver %(driver)s supports CUDA up to %(cuda)s; the image needs CUDA %(need)s.")
                % {"driver": health.get("driver_version", "?"), "cuda": cuda, "need": image_cuda}
            )
        for name, sees in sorted((health.get("frameworks") or {}).items()):
            if sees.get("installed") and not sees.get("cuda"):
                problems.append(_("%(framework)s does not see the GPU.") % {"framework": name})
    if burn and burn.get("tflops") and rated_tflops:
        slowest = min(burn["tflops"])
        if Decimal(str(slowest)) * 100 < rated_tflops * min_percent:
            problems.append(
                _(
                    "The acceptance burn reached %(got).1f TFLOPS, under %(percent)s %% of the "
                    "rated %(rated)s."
                )
                % {"got": slowest, "percent": min_percent, "rated": rated_tflops}
            )
    return problems


def _judge_health(instance: Instance, *, now: datetime) -> None:
    report = instance.agent_report
    lease = instance.reservation
    gpu_model = instance.offering.gpu_model
    problems = health_problems(
        expected_model=gpu_model.name,
        expected_count=instance.gpu_count,
        image_cuda=lease.image.cuda_version if lease.image else "",
        rated_tflops=gpu_model.bf16_tflops,
        health=report.get("health"),
        burn=report.get("burn"),
        min_percent=settings.PORTAL_BURN_MIN_PERCENT,
    )
    before = instance.health
    if problems:
        instance.health = Instance.Health.UNHEALTHY
        instance.health_message = " ".join(problems)[:300]
    elif before != Instance.Health.UNHEALTHY:
        instance.health = Instance.Health.HEALTHY
        instance.health_message = ""
    instance.save(update_fields=["health", "health_message"])
    if instance.health == Instance.Health.UNHEALTHY and before != Instance.Health.UNHEALTHY:
        notify(
            [lease.requester, *admins()],
            subject=_("Unhealthy instance in %(lease)s") % {"lease": lease},
            body=instance.health_message,
            link=lease.get_absolute_url(),
        )
        audit.record(
            actor=None,
            verb="instance.unhealthy",
            obj=instance,
            project=lease.project_id,
            source="api",
            at=now,
            after={"reason": instance.health_message},
        )
