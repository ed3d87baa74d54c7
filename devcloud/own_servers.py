"""The demo's own GPU servers: the ``ssh`` driver's transport for a demo with no real SSH
hosts, and what each demo server is made of.

The demo sets ``PORTAL_SSH_TRANSPORT=devcloud.own_servers.run``, so the real driver
(rental/providers/ssh.py) sends the real host program (rental/providers/ssh_host.py) to
``run``, which runs it here, as a local process of the developer's own user, instead of
over SSH. Each server is a directory under ``DEVCLOUD_OWN_SERVERS_DIR`` named as the host:

- ``gpus.json``: the GPUs its ``nvidia-smi`` reports (devcloud/own_server_smi.py);
- ``bin/nvidia-smi``: that fake, as the host program's ``GPU_PORTAL_NVIDIA_SMI``;
- ``state/``: the host program's ``GPU_PORTAL_STATE_DIR`` (``allocations.json``: the GPUs
  each lease holds there).

The host program runs with ``GPU_PORTAL_SIMULATE_ACCOUNTS=1``: it keeps and releases
allocations as on a real server, but makes no Unix account, starts no agent and kills no
process. A host with no directory does not answer, as a server that is down.
"""

from __future__ import annotations

import json
import os
import shlex
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

from rental.providers.base import HostConfig, ProviderError, ProviderErrorKind
from rental.providers.ssh_transport import Answer

ROOT_VARIABLE = "DEVCLOUD_OWN_SERVERS_DIR"
SMI = Path(__file__).resolve().parent / "own_server_smi.py"


def root() -> Path:
    """Where the demo's servers are (``DEVCLOUD_OWN_SERVERS_DIR``, else a directory in
    the system's temporary one)."""
    return Path(os.environ.get(ROOT_VARIABLE) or Path(tempfile.gettempdir()) / "gpu-portal-own")


def prepare(servers: dict[str, list[dict]], *, under: Path | None = None) -> Path:
    """Make each server, by name, with its GPUs (``{"index", "name", "memory_mib",
    "uuid"}``) and an empty state: like the demo cloud, the servers start with no lease
    at every run. Returns the directory they are under."""
    base = under or root()
    for name, gpus in servers.items():
        server = base / name
        shutil.rmtree(server, ignore_errors=True)
        (server / "bin").mkdir(parents=True)
        (server / "state").mkdir()
        (server / "gpus.json").write_text(json.dumps(gpus, indent=1))
        smi = server / "bin" / "nvidia-smi"
        words = " ".join(shlex.quote(str(part)) for part in (sys.executable, SMI))
        smi.write_text(f'#!/bin/sh\nexec {words} {shlex.quote(str(server / "gpus.json"))} "$@"\n')
        smi.chmod(0o755)
    return base


def run(host: HostConfig, program: str, *, connect_timeout: float, timeout: float) -> Answer:
    """Run ``program`` (the host program) for ``host`` as a local process in the demo
    server's directory; its standard output, as ``ssh_transport.run`` returns it. Raises
    ``ProviderError`` (``transient``) for a server the demo does not have, and for a
    program that fails or does not finish in ``timeout`` seconds."""
    server = root() / host.name
    if not (server / "gpus.json").is_file():
        raise ProviderError(
            ProviderErrorKind.TRANSIENT,
            f"Server {host.name} ({host.address}) did not answer: the demo has no such server.",
        )
    environment = {
        "PATH": os.environ.get("PATH", "/usr/bin:/bin"),
        "GPU_PORTAL_STATE_DIR": str(server / "state"),
        "GPU_PORTAL_NVIDIA_SMI": str(server / "bin" / "nvidia-smi"),
        "GPU_PORTAL_SIMULATE_ACCOUNTS": "1",
    }
    try:
        done = subprocess.run(
            [sys.executable, "-"],
            input=program,
            capture_output=True,
            text=True,
            timeout=timeout,
            env=environment,
            check=False,
        )
    except subprocess.TimeoutExpired:
        raise ProviderError(
            ProviderErrorKind.TRANSIENT,
            f"Server {host.name} ({host.address}) did not answer within {timeout:g} s.",
        ) from None
    if done.returncode != 0:
        said = done.stderr.strip().splitlines()
        raise ProviderError(
            ProviderErrorKind.TRANSIENT,
            f"Server {host.name}: the portal's program failed: {said[-1][:200] if said else ''}",
        )
    return Answer(stdout=done.stdout, host_key="")
