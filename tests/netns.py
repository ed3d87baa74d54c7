"""Hosts of their own for a test: Linux network namespaces, each joined by a veth pair to
one bridge in the root namespace, like machines plugged into one switch.

    with network(["web-a", "worker-a"]) as net:
        net.gateway                       # "10.231.N.1": the root namespace, on the bridge
        host = net.hosts["web-a"]         # host.address "10.231.N.11"
        subprocess.Popen(host.command(["python", "-m", "gunicorn", ...]))

A process on a host reaches the bridge and the other hosts, and nothing else: not the root
namespace's 127.0.0.1 (a server the hosts must reach listens on the gateway), not the
internet. Names carry this process's id and a counter, and the subnet is a /24 of
10.231.0.0/16 that no interface here uses, so two runs on one machine never collide.
Leaving the block, however it is left, kills what still runs on the hosts and deletes the
namespaces, the veths and the bridge. Needs root and iproute2's ``ip``; ``unavailable()``
says why not.
"""

import contextlib
import itertools
import os
import shutil
import signal
import subprocess
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

PREFIX = "10.231"
FIRST_HOST = 11  # the hosts are .11, .12, …; the gateway is .1
_networks = itertools.count()


class NetnsError(RuntimeError):
    pass


def unavailable() -> str:
    """Why network namespaces cannot be made here, or '' when they can."""
    if os.geteuid() != 0:
        return "network namespaces need root (CI runs the suite as root)"
    if shutil.which("ip") is None:
        return "iproute2's ip command is missing (Debian package iproute2)"
    if shutil.which("nsenter") is None:
        return "util-linux's nsenter command is missing (Debian package util-linux)"
    return ""


def ip(*args: str, namespace: str = "") -> str:
    """Run ``ip`` with ``args`` (in ``namespace`` if given); its output, or NetnsError
    with what it said."""
    command = in_namespace(namespace, ["ip", *args]) if namespace else ["ip", *args]
    done = subprocess.run(command, capture_output=True, text=True, check=False)
    if done.returncode != 0:
        raise NetnsError(f"{' '.join(command)}: {done.stderr.strip()}")
    return done.stdout


# Where ``ip netns add`` keeps a namespace, for nsenter to enter.
NAMESPACES = Path("/run/netns")


def in_namespace(namespace: str, args: list[str]) -> list[str]:
    """``args`` run in the network namespace ``namespace`` (and nothing else changed)."""
    return ["nsenter", f"--net={NAMESPACES / namespace}", "--", *args]


@dataclass(frozen=True)
class Host:
    name: str
    namespace: str
    address: str
    veth: str  # its cable's end in the root namespace, on the bridge

    def command(self, args: list[str]) -> list[str]:
        """``args`` as a command that runs on this host. nsenter enters only the network
        namespace and execs it, so the process's id is the command's own; ``ip netns exec``
        would also remount / and /sys, which a chroot (tools/fresh-machine-check)
        refuses."""
        return in_namespace(self.namespace, args)


@dataclass(frozen=True)
class Network:
    bridge: str
    gateway: str
    hosts: dict[str, Host]


def free_subnet() -> str:
    """A /24 of 10.231.0.0/16 (as "10.231.N") that no interface holds an address in,
    starting from one this process's id picks."""
    used = ip("-o", "-4", "addr", "show")
    start = os.getpid() % 256
    for step in range(256):
        subnet = f"{PREFIX}.{(start + step) % 256}"
        if f"inet {subnet}." not in used:
            return subnet
    raise NetnsError(f"every /24 of {PREFIX}.0.0/16 is in use")


@contextlib.contextmanager
def network(names: list[str]) -> Iterator[Network]:
    """One host per name, on a bridge of its own; all of it deleted on exit."""
    tag = f"{os.getpid():x}{next(_networks)}"
    subnet = free_subnet()
    bridge = f"gpb-{tag}"
    hosts = {
        name: Host(
            name=name,
            namespace=f"gp{tag}-{name}",
            address=f"{subnet}.{FIRST_HOST + index}",
            veth=f"gpv{index}-{tag}",
        )
        for index, name in enumerate(names)
    }
    made: list[Host] = []
    try:
        ip("link", "add", bridge, "type", "bridge")
        ip("addr", "add", f"{subnet}.1/24", "dev", bridge)
        ip("link", "set", bridge, "up")
        for host in hosts.values():
            ip("netns", "add", host.namespace)
            made.append(host)
            _plug(host, bridge)
        yield Network(bridge=bridge, gateway=f"{subnet}.1", hosts=hosts)
    finally:
        _remove(made, bridge)


def _plug(host: Host, bridge: str) -> None:
    """A veth pair: one end is the host's eth0, the other a port of the bridge."""
    ip("link", "add", host.veth, "type", "veth", "peer", "name", "eth0", "netns", host.namespace)
    ip("link", "set", host.veth, "master", bridge)
    ip("link", "set", host.veth, "up")
    ip("addr", "add", f"{host.address}/24", "dev", "eth0", namespace=host.namespace)
    ip("link", "set", "eth0", "up", namespace=host.namespace)
    ip("link", "set", "lo", "up", namespace=host.namespace)


def _remove(hosts: list[Host], bridge: str) -> None:
    """Kill what the test left running on the hosts (a namespace lives on while a process
    is in it), then delete each namespace (its eth0, and so the veth's other end, goes
    with it), any veth left, and the bridge. Goes on past a failure; raises the first."""
    errors: list[NetnsError] = []
    for host in hosts:
        with contextlib.suppress(NetnsError):
            for pid in ip("netns", "pids", host.namespace).split():
                with contextlib.suppress(ProcessLookupError):
                    os.kill(int(pid), signal.SIGKILL)
        try:
            ip("netns", "del", host.namespace)
        except NetnsError as error:
            errors.append(error)
        with contextlib.suppress(NetnsError):
            ip("link", "del", host.veth)
    with contextlib.suppress(NetnsError):
        ip("link", "del", bridge)
    left = ip("-o", "link", "show")
    if f" {bridge}:" in left:
        errors.append(NetnsError(f"bridge {bridge} is still there"))
    if errors:
        raise errors[0]
