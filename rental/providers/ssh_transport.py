"""How the ``ssh`` driver reaches a server: the system's OpenSSH client, one process per
call, with everything it needs in a private temporary directory removed right after.

- The private key is written to a 0600 file there (never on a command line, never logged);
  ``-F /dev/null`` keeps any ssh configuration of the portal's user out, and no agent.
- The host key is checked strictly against the pinned known_hosts line. With none pinned
  yet, the first contact accepts the server's key (``accept-new``) and returns it, so the
  portal pins it.
- ``BatchMode`` (never a prompt), a connect timeout and a total timeout.
- Failures become ``ProviderError``: no answer → ``transient``; key or host key refused,
  or no sudo without a password → ``auth``; no python3 → ``invalid``. Messages name the
  server and say what happened, never with the key.
"""

from __future__ import annotations

import contextlib
import os
import shutil
import subprocess
import tempfile
from dataclasses import dataclass

from rental.providers.base import HostConfig, ProviderError, ProviderErrorKind

# The name the pinned key is filed under in the temporary known_hosts (HostKeyAlias), so a
# pinned key holds whatever the server's address is written as.
ALIAS = "gpu-portal-host"
KEY_TYPES = (
    "ssh-ed25519",
    "ssh-rsa",
    "ssh-dss",
    "ecdsa-sha2-nistp256",
    "ecdsa-sha2-nistp384",
    "ecdsa-sha2-nistp521",
    "sk-ssh-ed25519@openssh.com",
    "sk-ecdsa-sha2-nistp256@openssh.com",
)


@dataclass(frozen=True)
class Answer:
    """What the remote command wrote on its standard output, and the server's known_hosts
    line (the pinned one, or the one learned at this first contact)."""

    stdout: str
    host_key: str


def pinned_key(known_hosts_line: str) -> tuple[str, str] | None:
    """(key type, base64 key) of a known_hosts line, whatever host names it starts with;
    None when the line holds no key."""
    tokens = known_hosts_line.split()
    for position, token in enumerate(tokens[:-1]):
        if token in KEY_TYPES:
            return token, tokens[position + 1]
    return None


def host_pattern(host: HostConfig) -> str:
    """How known_hosts names the server: ``address``, or ``[address]:port`` off port 22."""
    return host.address if host.port == 22 else f"[{host.address}]:{host.port}"


def remote_command(host: HostConfig) -> str:
    """Python reading its program on standard input, as root. Through sudo, the two
    variables the host program reads (tests point them elsewhere) are passed on."""
    if host.username == "root":
        return "python3 -"
    return (
        'sudo -n /usr/bin/env GPU_PORTAL_STATE_DIR="${GPU_PORTAL_STATE_DIR:-}" '
        'GPU_PORTAL_NVIDIA_SMI="${GPU_PORTAL_NVIDIA_SMI:-}" python3 -'
    )


def run(host: HostConfig, program: str, *, connect_timeout: float, timeout: float) -> Answer:
    """Run ``program`` (Python source) on ``host`` as root; its standard output. Raises
    ``ProviderError`` for every failure to reach the server or to run the program."""
    if not host.private_key.strip():
        raise ProviderError(
            ProviderErrorKind.AUTH, f"Server {host.name} has no SSH private key set."
        )
    pinned = pinned_key(host.host_key) if host.host_key.strip() else None
    if host.host_key.strip() and pinned is None:
        raise ProviderError(
            ProviderErrorKind.INVALID,
            f"The host key of server {host.name} is not a known_hosts line.",
        )
    scratch = tempfile.mkdtemp(prefix="gpu-portal-ssh-")
    try:
        key_path = os.path.join(scratch, "key")
        descriptor = os.open(key_path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
        with os.fdopen(descriptor, "w") as key_file:
            key_file.write(host.private_key.strip() + "\n")
        known_hosts = os.path.join(scratch, "known_hosts")
        with open(known_hosts, "w") as known:
            if pinned:
                known.write(f"{ALIAS} {pinned[0]} {pinned[1]}\n")
        command = [
            shutil.which("ssh") or "ssh",
            "-F",
            "/dev/null",
            "-T",
            "-i",
            key_path,
            "-p",
            str(host.port),
            "-l",
            host.username,
            "-o",
            "BatchMode=yes",
            "-o",
            "IdentitiesOnly=yes",
            "-o",
            "IdentityAgent=none",
            "-o",
            f"HostKeyAlias={ALIAS}",
            "-o",
            f"UserKnownHostsFile={known_hosts}",
            "-o",
            "GlobalKnownHostsFile=/dev/null",
            "-o",
            f"StrictHostKeyChecking={'yes' if pinned else 'accept-new'}",
            "-o",
            "HashKnownHosts=no",
            "-o",
            "UpdateHostKeys=no",
            "-o",
            f"ConnectTimeout={max(1, round(connect_timeout))}",
            "-o",
            "ServerAliveInterval=15",
            "-o",
            "ServerAliveCountMax=2",
            "-o",
            "LogLevel=ERROR",
            "--",
            host.address,
            remote_command(host),
        ]
        try:
            done = subprocess.run(
                command,
                input=program,
                capture_output=True,
                text=True,
                timeout=timeout,
                check=False,
            )
        except subprocess.TimeoutExpired:
            raise ProviderError(
                ProviderErrorKind.TRANSIENT,
                f"Server {host.name} ({host.address}) did not answer within {timeout:g} s.",
            ) from None
        if done.returncode != 0:
            raise failure(host, done.returncode, done.stderr)
        learned = pinned or _learned(known_hosts)
        line = f"{host_pattern(host)} {learned[0]} {learned[1]}" if learned else ""
        return Answer(stdout=done.stdout, host_key=line)
    finally:
        with contextlib.suppress(OSError):
            shutil.rmtree(scratch)


def _learned(known_hosts: str) -> tuple[str, str] | None:
    with open(known_hosts) as known:
        for line in known:
            found = pinned_key(line)
            if found:
                return found
    return None


def failure(host: HostConfig, returncode: int, stderr: str) -> ProviderError:
    """The ProviderError for a failed ssh run, from what ssh (or the server) said. The
    message quotes at most one short line of it, which never holds the key."""
    said = stderr.strip()
    where = f"Server {host.name} ({host.address}:{host.port})"
    last = said.splitlines()[-1][:200] if said else f"exit status {returncode}"
    if returncode == 255:
        if "Host key verification failed" in said or "HOST IDENTIFICATION HAS CHANGED" in said:
            return ProviderError(
                ProviderErrorKind.AUTH,
                f"{where} showed a host key other than the pinned one; if the server was "
                "reinstalled, clear its host key to pin the new one.",
            )
        if "Permission denied" in said:
            return ProviderError(
                ProviderErrorKind.AUTH, f"{where} refused the SSH key for user {host.username}."
            )
        if "Load key" in said or "invalid format" in said or "libcrypto" in said:
            return ProviderError(
                ProviderErrorKind.AUTH,
                f"The SSH private key of server {host.name} is not a private key OpenSSH reads.",
            )
        return ProviderError(ProviderErrorKind.TRANSIENT, f"{where} did not answer: {last}")
    if "a password is required" in said or "sudo:" in said:
        return ProviderError(
            ProviderErrorKind.AUTH,
            f"{where}: user {host.username} may not run sudo without a password ({last}).",
        )
    if returncode == 127:
        return ProviderError(
            ProviderErrorKind.INVALID, f"{where} has no python3, which the portal needs."
        )
    return ProviderError(
        ProviderErrorKind.TRANSIENT, f"{where}: the portal's program failed: {last}"
    )
