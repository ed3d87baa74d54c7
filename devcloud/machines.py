"""Simulated machines for the demo: what runs on an instance the local cloud starts.

A real instance boots its user-data: the portal's agent and its config (the heartbeat URL,
the instance's own token, the interval) as a service (``rental.fleet.agent_install``). The
local cloud starts no machine, so for the demo, when a RunInstances succeeds, this runs
that same agent program, taken from the user-data, as a local process per instance, with
a simulated GPU in place of ``nvidia-smi`` (``devcloud/gpu_sim.py``): a training run whose
utilization rises and falls, or, on an instance that runs JupyterLab, a notebook that goes
idle after two minutes. The agent is stopped when its instance is stopped or terminated
and started again when a stopped instance starts. The portal is not told: it sees
heartbeats on its real endpoint, as from any instance.

    machines = Machines(root=Path("var/machines"))
    cloud = devcloud.server.start(port, machines=machines)
    …
    machines.halt_all()
"""

from __future__ import annotations

import base64
import binascii
import gzip
import json
import os
import re
import shutil
import signal
import subprocess
import sys
import threading
import time
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import yaml

from devcloud.query import query_params

WsgiApp = Callable[..., Iterable[bytes]]

AGENT_PATH = "/opt/gpu-portal/gpu_portal_agent.py"
CONFIG_PATH = "/etc/gpu-portal-agent.json"
JUPYTER_UNIT = "/etc/systemd/system/gpu-portal-jupyter.service"
CATALOG = Path(__file__).resolve().parents[1] / "rental" / "data" / "catalog.json"
SIMULATOR = Path(__file__).resolve().with_name("gpu_sim.py")
STOP_TIMEOUT_S = 5
_INSTANCE_ID = re.compile(rb"<instanceId>(i-[0-9a-f]+)</instanceId>")

# What nvidia-smi calls the catalog's cards (the portal checks the name, L8).
SMI_NAMES = {
    "T4 16GB": "Tesla T4",
    "A10G 24GB": "NVIDIA A10G",
    "L4 24GB": "NVIDIA L4",
    "L40S 48GB": "NVIDIA L40S",
    "A100 40GB": "NVIDIA A100-SXM4-40GB",
    "A100 80GB": "NVIDIA A100-SXM4-80GB",
    "H100 80GB": "NVIDIA H100 80GB HBM3",
    "H200 141GB": "NVIDIA H200",
}


@dataclass(frozen=True)
class Hardware:
    gpu_name: str
    gpus: int
    memory_mb: int
    rated_tflops: float


def catalog_hardware(path: Path = CATALOG) -> dict[str, Hardware]:
    """Instance type → its GPUs, from the portal's catalog file (the data, not the code)."""
    catalog = json.loads(path.read_text(encoding="utf-8"))
    models = {model["name"]: model for model in catalog["gpu_models"]}
    hardware = {}
    for entry in catalog["aws_instance_types"]:
        model = models[entry["gpu_model"]]
        hardware[entry["instance_type"]] = Hardware(
            gpu_name=SMI_NAMES.get(model["name"], f"NVIDIA {model['name']}"),
            gpus=int(entry["gpus"]),
            memory_mb=int(model["memory_gb"]) * 1024,
            rated_tflops=float(model["bf16_tflops"]),
        )
    return hardware


@dataclass(frozen=True)
class BootPlan:
    """What an instance's user-data asks to run: the agent program and its config."""

    agent_source: bytes
    config: dict[str, Any]
    jupyter: bool


def read_user_data(encoded: str) -> BootPlan | None:
    """The agent and its config from an instance's user-data (base64 of the portal's
    cloud-config); None when it carries no agent or cannot be read."""
    try:
        text = base64.b64decode(encoded, validate=True).decode("utf-8")
        document = yaml.safe_load(text)
    except (binascii.Error, UnicodeDecodeError, yaml.YAMLError):
        return None
    if not isinstance(document, dict):
        return None
    files = {
        entry.get("path"): entry
        for entry in document.get("write_files") or []
        if isinstance(entry, dict)
    }
    agent, config = files.get(AGENT_PATH), files.get(CONFIG_PATH)
    if agent is None or config is None:
        return None
    try:
        source = str(agent.get("content", ""))
        if agent.get("encoding") == "gz+b64":
            program = gzip.decompress(base64.b64decode(source))
        else:
            program = source.encode()
        settings = json.loads(config.get("content", ""))
    except (binascii.Error, OSError, EOFError, ValueError):
        return None
    if not isinstance(settings, dict) or not settings.get("url") or not settings.get("token"):
        return None
    return BootPlan(agent_source=program, config=settings, jupyter=JUPYTER_UNIT in files)


@dataclass
class Machine:
    instance_id: str
    folder: Path
    command: list[str]
    env: dict[str, str]
    process: subprocess.Popen[bytes] | None = None

    def start(self) -> None:
        if self.process is not None and self.process.poll() is None:
            return
        with (self.folder / "agent.log").open("ab") as log:
            # A process group of its own: a terminal's Ctrl-C goes to the demo, which
            # stops the machines itself.
            self.process = subprocess.Popen(
                self.command,
                cwd=self.folder,
                env=self.env,
                stdin=subprocess.DEVNULL,
                stdout=log,
                stderr=log,
                process_group=0,
            )

    def stop(self) -> None:
        process, self.process = self.process, None
        if process is None or process.poll() is not None:
            return
        process.send_signal(signal.SIGTERM)
        try:
            process.wait(timeout=STOP_TIMEOUT_S)
        except subprocess.TimeoutExpired:
            process.kill()
            process.wait()

    @property
    def running(self) -> bool:
        return self.process is not None and self.process.poll() is None


class Machines:
    """The simulated machines of one local cloud, one folder each under ``root``.
    Thread-safe: the cloud's server threads boot and halt them."""

    def __init__(self, root: Path, *, clock: Callable[[], float] = time.time) -> None:
        self.root = root
        self._clock = clock
        self._lock = threading.Lock()
        self._machines: dict[str, Machine] = {}
        # Set by halt_all: a RunInstances or StartInstances answered while the cloud stops
        # (a launch in flight when the demo is stopped) starts no agent that would outlive it.
        self._closed = False
        self._hardware = catalog_hardware()
        shutil.rmtree(root, ignore_errors=True)  # the cloud starts empty, and so do they
        root.mkdir(parents=True, exist_ok=True)

    def middleware(self, app: WsgiApp) -> WsgiApp:
        """WSGI middleware that boots, halts and resumes machines as EC2 answers
        RunInstances, TerminateInstances, StopInstances and StartInstances."""

        def serve(environ: dict[str, Any], start_response: Callable[..., Any]) -> list[bytes]:
            params = query_params(environ)
            action = params.get("Action", "")
            statuses: list[int] = []

            def recording(status: str, headers: Any, *args: Any) -> Any:
                statuses.append(int(status.split(" ", 1)[0]))
                return start_response(status, headers, *args)

            body = b"".join(app(environ, recording))
            if statuses and statuses[0] == 200:
                self._after(action, params, body)
            return [body]

        return serve

    def _after(self, action: str, params: dict[str, str], body: bytes) -> None:
        ids = [value for key, value in params.items() if key.startswith("InstanceId.")]
        if action == "RunInstances":
            for match in _INSTANCE_ID.finditer(body):
                self.boot(
                    match.group(1).decode(),
                    instance_type=params.get("InstanceType", ""),
                    user_data=params.get("UserData", ""),
                )
        elif action in ("TerminateInstances", "StopInstances"):
            for instance_id in ids:
                self.halt(instance_id, forget=action == "TerminateInstances")
        elif action == "StartInstances":
            for instance_id in ids:
                self.resume(instance_id)

    def boot(self, instance_id: str, *, instance_type: str, user_data: str) -> bool:
        """Start the agent the user-data carries, on simulated GPUs of ``instance_type``;
        False when there is nothing to run (no agent, an unknown type). Idempotent: a
        RunInstances answered again (the same ClientToken) boots nothing new."""
        hardware = self._hardware.get(instance_type)
        plan = read_user_data(user_data) if hardware else None
        if hardware is None or plan is None:
            return False
        with self._lock:
            if self._closed:
                return False
            if instance_id in self._machines:
                return True
            machine = self._prepare(instance_id, hardware, plan)
            self._machines[instance_id] = machine
            machine.start()
        return True

    def _prepare(self, instance_id: str, hardware: Hardware, plan: BootPlan) -> Machine:
        folder = self.root / instance_id
        bin_dir = folder / "bin"
        bin_dir.mkdir(parents=True, exist_ok=True)
        agent = folder / "gpu_portal_agent.py"
        agent.write_bytes(plan.agent_source)
        config = folder / "agent.json"
        config.write_text(json.dumps(plan.config))
        config.chmod(0o600)  # it holds the instance's token
        described = folder / "machine.json"
        described.write_text(
            json.dumps(
                {
                    "id": instance_id,
                    "workload": "notebook" if plan.jupyter else "training",
                    "booted_at": self._clock(),
                    "gpu_name": hardware.gpu_name,
                    "gpus": hardware.gpus,
                    "memory_mb": hardware.memory_mb,
                    "rated_tflops": hardware.rated_tflops,
                    "idle_watts": 25 if hardware.memory_mb <= 24 * 1024 else 60,
                    "watts_per_percent": 0.5 if hardware.memory_mb <= 24 * 1024 else 3.4,
                }
            )
        )
        for role, name in (("nvidia-smi", "nvidia-smi"), ("python", "python3")):
            script = bin_dir / name
            script.write_text(f'#!/bin/sh\nexec "{sys.executable}" "{SIMULATOR}" {role} "$@"\n')
            script.chmod(0o755)
        env = {
            **os.environ,
            "PATH": f"{bin_dir}{os.pathsep}{os.environ.get('PATH', '')}",
            "DEVCLOUD_MACHINE": str(described),
        }
        # The metadata service is the real cloud's; the simulated machine has none, so the
        # agent does not look for spot notices.
        command = [sys.executable, str(agent), "--config", str(config)]
        command += ["--python", str(bin_dir / "python3"), "--metadata-url", ""]
        return Machine(instance_id, folder, command, env)

    def halt(self, instance_id: str, *, forget: bool = False) -> None:
        """Stop the machine's agent (the instance stopped); ``forget``: it is terminated."""
        with self._lock:
            if forget:
                machine = self._machines.pop(instance_id, None)
            else:
                machine = self._machines.get(instance_id)
        if machine is not None:
            machine.stop()

    def resume(self, instance_id: str) -> None:
        """A stopped instance starts again: so does its agent (systemd would)."""
        with self._lock:
            machine = self._machines.get(instance_id)
            if machine is not None and not self._closed:
                machine.start()

    def running(self) -> list[str]:
        """The instances whose agent runs now."""
        with self._lock:
            return sorted(i for i, machine in self._machines.items() if machine.running)

    def halt_all(self) -> None:
        """Stop every agent, and start none after. Idempotent."""
        with self._lock:
            self._closed = True
            machines = list(self._machines.values())
        for machine in machines:
            machine.stop()
