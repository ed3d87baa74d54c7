"""Own GPU servers for a test: real OpenSSH servers, each on a host of its own (a network
namespace, ``tests/netns.py``), each with a fake ``nvidia-smi`` reporting the GPUs the test
chose.

    from tests import own_hosts
    from tests.own_hosts import RTX_4090, A100_80GB

    pytestmark = pytest.mark.skipif(bool(own_hosts.unavailable()),
                                    reason=own_hosts.unavailable() or "available")

    with own_hosts.site({"box-a": 4 * [RTX_4090], "box-b": 2 * [A100_80GB]}) as site:
        config = site.account_config(region="dc-1")     # AccountConfig(driver="ssh", ...)
        box = site.hosts["box-a"]
        box.config()                  # its HostConfig: root with the admin key, host key ""
        box.host_key                  # its real known_hosts line (to pin it)
        box.set_gpus(3 * [RTX_4090])  # what nvidia-smi reports from now on (index 3 gone)
        box.set_processes([(0, 4242)])            # GPU 0 busy with pid 4242
        box.set_utilization({0: 97.0})            # what the agent reads per GPU index
        box.allocations()             # the host program's state: {key: {...}} (read here)
        box.ssh("gp-1a2b3c4d5e", site.engineer_key, "echo $CUDA_VISIBLE_DEVICES")
        box.stop(); box.start()       # its sshd killed (connections refused) / started again
        box.unplug(); box.plug()      # its cable pulled (connections time out) / put back
        box.run(["ps", "-u", "gp-1a2b3c4d5e"])   # any command on the host, as root

What each host is:

- ``/usr/sbin/sshd`` on port 22 of the host's own address (``box.address``), with its own
  host key and configuration in a directory of the site (``box.dir``), root allowed by the
  site's admin key only (``site.admin_key``), accounts by their ``~/.ssh/authorized_keys``.
  Its sessions get ``GPU_PORTAL_NVIDIA_SMI`` (the host's fake) and ``GPU_PORTAL_STATE_DIR``
  (``box.state_dir``) through sshd's ``SetEnv``, since the namespaces share one file
  system: the driver's host program reads both.
- The fake ``nvidia-smi`` is ``tests/fake_nvidia_smi.py`` copied into ``box.dir/bin`` with
  its ``gpus.json``; a GPU's uuid is ``GPU-<host>-<index>`` (``box.uuid(index)``).
- Unix accounts made by the driver are the machine's own (one ``/etc/passwd`` for all the
  hosts); leaving the block deletes every ``gp-`` account a host's state still lists and
  kills its processes, then the namespaces.

A server the hosts must reach (the portal, for the agent's heartbeats) listens on
``site.network.gateway``, the root namespace's address on the hosts' bridge.

``engineer_key`` is a second key pair, the one a lease's account lets in. Keys are
``KeyPair`` (``private`` text, ``public`` line, ``path`` of the private key file).

Needs root, iproute2, util-linux's nsenter, OpenSSH's ``sshd``, ``ssh`` and ``ssh-keygen``
and ``/usr/bin/python3``; ``unavailable()`` says what is missing.
"""

from __future__ import annotations

import contextlib
import json
import os
import pwd
import shutil
import signal
import socket
import subprocess
import tempfile
import time
from collections.abc import Iterable, Iterator
from dataclasses import dataclass, field
from pathlib import Path

from rental.providers.base import AccountConfig, Credentials, HostConfig
from rental.providers.ssh_host import processes_of
from tests import netns

# (nvidia-smi's name, memory in MiB) of cards the tests use.
RTX_4090 = ("NVIDIA GeForce RTX 4090", 24564)
A100_80GB = ("NVIDIA A100-SXM4-80GB", 81920)
H100_80GB = ("NVIDIA H100 80GB HBM3", 81559)
L4 = ("NVIDIA L4", 23034)

SSHD = "/usr/sbin/sshd"
PYTHON = "/usr/bin/python3"
FAKE_SMI = Path(__file__).resolve().parent / "fake_nvidia_smi.py"
LEASE_ACCOUNT_PREFIX = "gp-"


def unavailable() -> str:
    """Why own-server test hosts cannot be made here, or '' when they can."""
    reason = netns.unavailable()
    if reason:
        return reason
    for program in (SSHD, PYTHON):
        if not os.access(program, os.X_OK):
            return f"{program} is missing (Debian packages openssh-server, python3)"
    for program in ("ssh", "ssh-keygen", "useradd", "userdel"):
        if shutil.which(program) is None:
            return f"the {program} command is missing"
    return ""


@dataclass(frozen=True)
class KeyPair:
    private: str
    public: str
    path: Path


def make_key(path: Path, comment: str) -> KeyPair:
    subprocess.run(
        ["ssh-keygen", "-q", "-t", "ed25519", "-N", "", "-C", comment, "-f", str(path)],
        check=True,
        capture_output=True,
    )
    return KeyPair(
        private=path.read_text(), public=Path(f"{path}.pub").read_text().strip(), path=path
    )


@dataclass
class TestHost:
    name: str
    net_host: netns.Host
    dir: Path
    admin_key: KeyPair
    port: int = 22
    sshd: subprocess.Popen | None = field(default=None, repr=False)

    __test__ = False  # not a pytest test class

    @property
    def address(self) -> str:
        return self.net_host.address

    @property
    def state_dir(self) -> Path:
        return self.dir / "state"

    @property
    def smi(self) -> Path:
        return self.dir / "bin" / "nvidia-smi"

    @property
    def host_key(self) -> str:
        """The host's known_hosts line, as the portal would pin it."""
        kind, key = (self.dir / "ssh_host_ed25519_key.pub").read_text().split()[:2]
        return f"{self.address} {kind} {key}"

    def uuid(self, index: int) -> str:
        return f"GPU-{self.name}-{index}"

    def config(self, *, private_key: str | None = None, host_key: str = "") -> HostConfig:
        """How the driver reaches this host: root, with the admin key unless told."""
        return HostConfig(
            name=self.name,
            address=self.address,
            port=self.port,
            username="root",
            private_key=self.admin_key.private if private_key is None else private_key,
            host_key=host_key,
        )

    # -- what nvidia-smi reports ------------------------------------------------------

    def _data(self) -> dict:
        return json.loads((self.dir / "bin" / "gpus.json").read_text())

    def _write(self, data: dict) -> None:
        target = self.dir / "bin" / "gpus.json"
        scratch = target.with_suffix(".new")
        scratch.write_text(json.dumps(data))
        scratch.chmod(0o644)
        scratch.replace(target)  # atomic: nvidia-smi never reads half a file

    def set_gpus(self, cards: list[tuple[str, int]], *, indexes: list[int] | None = None) -> None:
        """nvidia-smi reports these cards from now on, at ``indexes`` (default 0, 1, …)."""
        data = self._data()
        data["gpus"] = [
            {"index": index, "name": name, "memory_mib": memory, "uuid": self.uuid(index)}
            for index, (name, memory) in zip(
                indexes if indexes is not None else range(len(cards)), cards, strict=True
            )
        ]
        self._write(data)

    def set_processes(self, processes: list[tuple[int, int]]) -> None:
        """(GPU index, pid) pairs nvidia-smi lists as compute processes."""
        data = self._data()
        data["processes"] = [{"gpu_uuid": self.uuid(i), "pid": pid} for i, pid in processes]
        self._write(data)

    def set_utilization(self, percent_by_index: dict[int, float]) -> None:
        data = self._data()
        for gpu in data["gpus"]:
            gpu["utilization"] = percent_by_index.get(gpu["index"], gpu.get("utilization", 0))
        self._write(data)

    # -- the host program's state -----------------------------------------------------

    def allocations(self) -> dict[str, dict]:
        """The host's leases as its state file has them: idempotency key → allocation."""
        path = self.state_dir / "allocations.json"
        return json.loads(path.read_text()) if path.exists() else {}

    # -- the host itself --------------------------------------------------------------

    def run(self, args: list[str], **kwargs: object) -> subprocess.CompletedProcess:
        """``args`` run on this host as root (output captured as text)."""
        return subprocess.run(
            self.net_host.command(args), capture_output=True, text=True, check=False, **kwargs
        )

    def ssh(
        self, user: str, key: KeyPair, command: str, *, timeout: float = 20
    ) -> subprocess.CompletedProcess:
        """``command`` run over SSH as ``user`` with ``key``, as an engineer would."""
        return subprocess.run(
            [
                "ssh",
                "-F",
                "/dev/null",
                "-i",
                str(key.path),
                "-p",
                str(self.port),
                "-o",
                "BatchMode=yes",
                "-o",
                "IdentitiesOnly=yes",
                "-o",
                "IdentityAgent=none",
                "-o",
                "StrictHostKeyChecking=no",
                "-o",
                "UserKnownHostsFile=/dev/null",
                "-o",
                "LogLevel=ERROR",
                "-o",
                "ConnectTimeout=5",
                f"{user}@{self.address}",
                command,
            ],
            capture_output=True,
            text=True,
            timeout=timeout,
            check=False,
        )

    def start(self) -> None:
        """Start its sshd and wait until it accepts connections."""
        self.sshd = subprocess.Popen(
            self.net_host.command(
                [SSHD, "-D", "-f", str(self.dir / "sshd_config"), "-E", str(self.dir / "sshd.log")]
            ),
            stdin=subprocess.DEVNULL,
            stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL,
        )
        deadline = time.monotonic() + 10
        while True:
            with contextlib.suppress(OSError), socket.create_connection((self.address, 22), 0.5):
                return
            if self.sshd.poll() is not None or time.monotonic() > deadline:
                log = (self.dir / "sshd.log").read_text(errors="replace")[-2000:]
                raise RuntimeError(f"sshd of {self.name} did not start: {log}")
            time.sleep(0.05)

    def stop(self) -> None:
        """Kill its sshd (sessions already open go on): new connections are refused."""
        if self.sshd is not None and self.sshd.poll() is None:
            self.sshd.kill()
            self.sshd.wait()
        self.sshd = None

    def unplug(self) -> None:
        """Its cable pulled: packets to it are lost, so connections time out."""
        netns.ip("link", "set", self.net_host.veth, "down")

    def plug(self) -> None:
        netns.ip("link", "set", self.net_host.veth, "up")


@dataclass
class Site:
    hosts: dict[str, TestHost]
    admin_key: KeyPair
    engineer_key: KeyPair
    network: netns.Network
    dir: Path

    def account_config(
        self, *, region: str = "dc-1", hosts: list[HostConfig] | None = None
    ) -> AccountConfig:
        """An ``ssh`` account reaching every host as root with the admin key."""
        return AccountConfig(
            driver="ssh",
            credentials=Credentials(access_key_id="", secret_access_key=""),
            default_region=region,
            hosts=tuple(hosts if hosts is not None else [h.config() for h in self.hosts.values()]),
        )


SSHD_CONFIG = """\
Port 22
ListenAddress {address}
HostKey {dir}/ssh_host_ed25519_key
PidFile {dir}/sshd.pid
PermitRootLogin prohibit-password
PubkeyAuthentication yes
PasswordAuthentication no
KbdInteractiveAuthentication no
UsePAM no
PrintMotd no
PrintLastLog no
MaxStartups 200
MaxSessions 50
LogLevel VERBOSE
AuthorizedKeysFile .ssh/authorized_keys
SetEnv GPU_PORTAL_NVIDIA_SMI={dir}/bin/nvidia-smi GPU_PORTAL_STATE_DIR={dir}/state
Match User root
    AuthorizedKeysFile {dir}/admin_authorized_keys
"""


def _site_dir() -> Path:
    """A directory sshd's StrictModes accepts (no group- or world-writable parent, so not
    under /tmp) and every account may read (the agent runs the fake nvidia-smi)."""
    base = "/run" if os.access("/run", os.W_OK) else "/var/tmp"
    path = Path(tempfile.mkdtemp(prefix="gp-own-hosts-", dir=base))
    path.chmod(0o755)
    return path


def _make_host(name: str, net_host: netns.Host, root: Path, admin: KeyPair) -> TestHost:
    directory = root / name
    (directory / "bin").mkdir(parents=True)
    for sub in (directory, directory / "bin"):
        sub.chmod(0o755)
    subprocess.run(
        [
            "ssh-keygen",
            "-q",
            "-t",
            "ed25519",
            "-N",
            "",
            "-f",
            str(directory / "ssh_host_ed25519_key"),
        ],
        check=True,
        capture_output=True,
    )
    (directory / "admin_authorized_keys").write_text(admin.public + "\n")
    (directory / "sshd_config").write_text(
        SSHD_CONFIG.format(address=net_host.address, dir=directory)
    )
    smi = directory / "bin" / "nvidia-smi"
    smi.write_text(FAKE_SMI.read_text().replace("#!/usr/bin/python3", f"#!{PYTHON}", 1))
    smi.chmod(0o755)
    host = TestHost(name=name, net_host=net_host, dir=directory, admin_key=admin)
    host._write({"driver": "550.54.15", "cuda": "12.4", "gpus": [], "processes": []})
    return host


@contextlib.contextmanager
def site(gpus_by_host: dict[str, list[tuple[str, int]]]) -> Iterator[Site]:
    """One host per name with its sshd running and its fake nvidia-smi reporting the cards
    given; everything (accounts the driver made, processes, namespaces, files) removed on
    exit."""
    # sshd wants its privilege separation directory, which only a package's service makes.
    Path("/run/sshd").mkdir(mode=0o755, exist_ok=True)
    root = _site_dir()
    hosts: dict[str, TestHost] = {}
    try:
        admin = make_key(root / "admin_key", "gpu-portal-admin")
        engineer = make_key(root / "engineer_key", "engineer@example.com")
        with netns.network(list(gpus_by_host)) as net:
            try:
                for name, cards in gpus_by_host.items():
                    hosts[name] = _make_host(name, net.hosts[name], root, admin)
                    hosts[name].set_gpus(cards)
                    hosts[name].start()
                yield Site(
                    hosts=hosts, admin_key=admin, engineer_key=engineer, network=net, dir=root
                )
            finally:
                for host in hosts.values():
                    host.stop()
                _remove_accounts(hosts.values())
    finally:
        shutil.rmtree(root, ignore_errors=True)


def _remove_accounts(hosts: Iterable[TestHost]) -> None:
    """Every lease account a host's state still lists: its processes killed, it deleted."""
    for host in hosts:
        for allocation in host.allocations().values():
            user = allocation.get("account", "")
            if not user.startswith(LEASE_ACCOUNT_PREFIX):
                continue
            try:
                uid = pwd.getpwnam(user).pw_uid
            except KeyError:
                continue
            for _ in range(100):
                left = processes_of(uid)
                if not left:
                    break
                for pid in left:
                    with contextlib.suppress(ProcessLookupError):
                        os.kill(pid, signal.SIGKILL)
                time.sleep(0.05)
            subprocess.run(["userdel", "-r", "-f", user], capture_output=True, check=False)
