"""The agent's installation at launch: its token and the instance's user-data.

The token is derived from the instance's idempotency key with the site's secret, so a
launch retried after a lost answer installs the same token; only its SHA-256 is stored.
It is accepted only while the instance is live (``rental.agent.heartbeat``) and
forgotten when the instance ends. The program itself is ``agent/`` at the top of the
repository; this module only ships it.
"""

import base64
import gzip
import hashlib
import hmac
import json
from pathlib import Path

from django.conf import settings

from rental.models import Instance, Reservation

AGENT_SOURCE = Path(settings.BASE_DIR) / "agent" / "gpu_portal_agent.py"
AGENT_PATH = "/opt/gpu-portal/gpu_portal_agent.py"
CONFIG_PATH = "/etc/gpu-portal-agent.json"
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


def agent_config(instance: Instance) -> dict:
    """The agent's configuration, its token included (``cloud_config`` records the token's
    hash; the token is the same however often it is derived)."""
    return {
        "url": settings.PORTAL_AGENT_URL.rstrip("/") + "/api/v1/agent/heartbeat",
        "token": agent_token(instance),
        "interval": settings.PORTAL_AGENT_HEARTBEAT_SECONDS,
        "burn_seconds": settings.PORTAL_BURN_SECONDS,
    }


def cloud_config(instance: Instance, *, ssh_keys: list[str]) -> str:
    """The instance's user-data: the engineer's SSH keys, and the agent with its token,
    started as a service. Records the token's hash on the instance."""
    token = agent_token(instance)
    Instance.objects.filter(pk=instance.pk).update(agent_token_hash=token_hash(token))
    instance.agent_token_hash = token_hash(token)
    user = instance.ssh_user or "ubuntu"
    config = agent_config(instance)
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
