"""The ``ssh`` driver: the company's own GPU servers, reached over SSH.

An account of this driver is a site: its ``hosts`` (``HostConfig``) are servers where an
account may run commands as root (root itself, or sudo without a password), with python3
and nvidia-smi. Nothing is installed on them: each call sends the host program
(``rental/providers/ssh_host.py``) on SSH's standard input and reads its JSON answer
(``rental/providers/ssh_transport.py`` runs OpenSSH).

An "instance" here is an allocation on one server: whole GPUs of one model, never shared
with another lease, and a Unix account of its own (``gp-`` and ten hex digits of the
idempotency key's hash) that lets the engineer's keys in, with ``CUDA_VISIBLE_DEVICES``
set for its logins and the portal's agent running as one of its processes. Its external
id is ``<server name>/<account>``; its zone is the server's name; its region is the one
asked. Terminating it kills every process of the account, removes the account and frees
its GPUs.

Offerings name what to launch: ``own-<count>x-<model slug>``, e.g. ``own-2x-rtx-4090-24gb``
(``instance_type()``); the model is the catalog's name of the card (``catalog_name`` in
the host program). A launch with a zone goes to that server only; without, to the server
that fits the GPUs most tightly.
"""

from __future__ import annotations

import base64
import gzip
import importlib
import json
import re
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from datetime import datetime
from pathlib import Path
from typing import TypeVar

from rental.providers import ssh_host, ssh_transport
from rental.providers.base import (
    MARKET_ON_DEMAND,
    TAG_IDEMPOTENCY_KEY,
    AccountConfig,
    Capability,
    CloudInstance,
    CloudState,
    HostConfig,
    HostGpu,
    HostReport,
    LaunchSpec,
    ProviderError,
    ProviderErrorKind,
)
from rental.providers.ssh_host import model_slug

HOST_PROGRAM = Path(ssh_host.__file__).read_text()
AGENT_SOURCE = Path(__file__).resolve().parents[2] / "agent" / "gpu_portal_agent.py"
INSTANCE_TYPE = re.compile(r"own-(\d+)x-([a-z0-9][a-z0-9-]*)")
STATES = {
    "pending": CloudState.PENDING,
    "running": CloudState.RUNNING,
    "terminated": CloudState.TERMINATED,
}
T = TypeVar("T")


def instance_type(model_name: str, count: int) -> str:
    """The offering's instance type for ``count`` GPUs of the catalog model
    ``model_name``: ``instance_type("RTX 4090 24GB", 2)`` → ``"own-2x-rtx-4090-24gb"``."""
    return f"own-{count}x-{model_slug(model_name)}"


def lease_account(external_id: str) -> str:
    """The Unix account an instance's engineer logs in as: ``"box-1/gp-0a1b2c3d4e"`` →
    ``"gp-0a1b2c3d4e"``."""
    return external_id.partition("/")[2]


def _parse_type(value: str) -> tuple[int, str]:
    match = INSTANCE_TYPE.fullmatch(value)
    if not match or int(match.group(1)) < 1:
        raise ProviderError(
            ProviderErrorKind.INVALID,
            f"Instance type {value!r} is not an own-server type like own-2x-rtx-4090-24gb.",
        )
    return int(match.group(1)), match.group(2)


def _transport(dotted: str) -> Callable[..., ssh_transport.Answer]:
    """How servers are reached: ``""`` for the system's OpenSSH client
    (``ssh_transport.run``), else the dotted path of a function with its signature (the
    demo's servers are local processes: ``PORTAL_SSH_TRANSPORT``)."""
    if not dotted:
        return ssh_transport.run
    module, _, name = dotted.rpartition(".")
    try:
        return getattr(importlib.import_module(module), name)
    except (ImportError, AttributeError, ValueError):
        raise ProviderError(
            ProviderErrorKind.INVALID, f"PORTAL_SSH_TRANSPORT names no function: {dotted!r}."
        ) from None


class SshProvider:
    """The driver for one site of own servers. Every method raises ``ProviderError``."""

    capabilities: frozenset[Capability] = frozenset()

    def __init__(
        self,
        config: AccountConfig,
        *,
        connect_timeout: float = 10,
        command_timeout: float = 120,
        parallel: int = 16,
        transport: str = "",
    ) -> None:
        self.hosts = {host.name: host for host in config.hosts}
        self.connect_timeout = connect_timeout
        self.command_timeout = command_timeout
        self.parallel = parallel
        self.transport = _transport(transport)

    # -- talking to servers ----------------------------------------------------------

    def _call(self, host: HostConfig, request: dict) -> tuple[dict, str]:
        """The host program's answer to ``request`` on ``host`` and the server's host key
        line; a refusal becomes ``ProviderError`` of the kind it names."""
        program = (
            f"{HOST_PROGRAM}\n\nraise SystemExit(serve(json.loads({json.dumps(request)!r})))\n"
        )
        answer = self.transport(
            host, program, connect_timeout=self.connect_timeout, timeout=self.command_timeout
        )
        try:
            reply = json.loads(answer.stdout.strip().splitlines()[-1])
        except (ValueError, IndexError):
            raise ProviderError(
                ProviderErrorKind.TRANSIENT, f"Server {host.name} gave no answer the portal reads."
            ) from None
        if not reply.get("ok"):
            try:
                kind = ProviderErrorKind(reply.get("kind"))
            except ValueError:
                kind = ProviderErrorKind.TRANSIENT
            raise ProviderError(kind, f"Server {host.name}: {reply.get('message', '')}")
        return reply, answer.host_key

    def _each(
        self, hosts: list[HostConfig], work: Callable[[HostConfig], T]
    ) -> list[tuple[HostConfig, T | ProviderError]]:
        """``work`` on every host at once; each host's result or ProviderError."""

        def guarded(host: HostConfig) -> T | ProviderError:
            try:
                return work(host)
            except ProviderError as error:
                return error

        if not hosts:
            return []
        with ThreadPoolExecutor(max_workers=min(self.parallel, len(hosts))) as pool:
            return list(zip(hosts, pool.map(guarded, hosts), strict=True))

    def _host(self, name: str) -> HostConfig:
        try:
            return self.hosts[name]
        except KeyError:
            # A server taken out of service has no room; the launch tries the next place.
            raise ProviderError(
                ProviderErrorKind.CAPACITY, f"This site has no active server named {name!r}."
            ) from None

    # -- what the portal asks ----------------------------------------------------------

    def validate(self) -> None:
        """Every server answers, lets the key in as root (or sudo), runs python3 and reads
        nvidia-smi; raises the first server's ProviderError otherwise (``invalid`` for a
        broken nvidia-smi, and for no servers at all)."""
        if not self.hosts:
            raise ProviderError(ProviderErrorKind.INVALID, "This site has no active servers.")
        for host, result in self._each(list(self.hosts.values()), self._inspect):
            if isinstance(result, ProviderError):
                raise result
            if result[0]["smi_error"]:
                raise ProviderError(
                    ProviderErrorKind.INVALID, f"Server {host.name}: {result[0]['smi_error']}"
                )

    def _inspect(self, host: HostConfig) -> tuple[dict, str]:
        return self._call(host, {"action": "inspect"})

    def inspect_hosts(self) -> list[HostReport]:
        """One report per active server, all asked at once: its GPUs (with the processes
        using each), the leases on it and their GPU indexes, its host key line. A server
        that does not answer is ``reachable=False`` with why; never raises for one."""
        reports = []
        for host, result in self._each(list(self.hosts.values()), self._inspect):
            if isinstance(result, ProviderError):
                reports.append(HostReport(name=host.name, reachable=False, message=str(result)))
                continue
            reply, host_key = result
            gpus = tuple(
                HostGpu(
                    index=gpu["index"],
                    name=gpu["name"],
                    memory_mib=gpu["memory_mib"],
                    uuid=gpu["uuid"],
                    busy_pids=tuple(gpu["busy_pids"]),
                )
                for gpu in reply["gpus"]
            )
            leases = tuple(
                (key, tuple(allocation["gpus"]))
                for key, allocation in sorted(reply["allocations"].items())
                if allocation["state"] != "terminated"
            )
            reports.append(
                HostReport(
                    name=host.name,
                    reachable=True,
                    message=reply["smi_error"],
                    gpus=gpus,
                    leases=leases,
                    host_key=host_key,
                )
            )
        return reports

    def launch(
        self, spec: LaunchSpec, *, idempotency_key: str, client_token: str = ""
    ) -> CloudInstance:
        """Allocate ``count`` whole GPUs of the offering's model on one server, with the
        lease's account and agent. Idempotent by key across the site: an allocation any
        answering server already holds for it is returned (whatever its state); a server
        allocates under a lock, so two launches never get one GPU. ``client_token`` is not
        used: the key alone names the allocation. Raises ``capacity`` when no answering
        server (``spec.zone``'s, when given) has the GPUs free, and the error of the
        servers themselves (``transient``, ``auth``) when none of them answers."""
        count, model = _parse_type(spec.instance_type)
        targets = [self._host(spec.zone)] if spec.zone else list(self.hosts.values())
        if not targets:
            raise ProviderError(ProviderErrorKind.INVALID, "This site has no active servers.")
        looked = self._each(list(self.hosts.values()), self._inspect)
        for host, result in looked:
            if not isinstance(result, ProviderError):
                allocation = result[0]["allocations"].get(idempotency_key)
                if allocation is not None:
                    return self._instance(host, spec.region, idempotency_key, allocation)
        free = {
            host.name: self._free(result[0], model)
            for host, result in looked
            if not isinstance(result, ProviderError)
        }
        unanswered = [
            result
            for host, result in looked
            if isinstance(result, ProviderError) and host in targets
        ]
        if len(unanswered) == len(targets):
            raise unanswered[0]  # not one place to launch answered: why (auth, transient)
        fitting = sorted(
            (host for host in targets if free.get(host.name, 0) >= count),
            key=lambda host: (free[host.name], host.name),
        )
        request = {
            "action": "allocate",
            "key": idempotency_key,
            "count": count,
            "model": model,
            "instance_type": spec.instance_type,
            "tags": [[k, v] for k, v in spec.tags if k != TAG_IDEMPOTENCY_KEY],
            "keys": list(spec.ssh_public_keys),
            "agent_config": spec.agent_config,
            "agent_source": self._agent_source() if spec.agent_config else "",
        }
        failed: list[ProviderError] = []
        for host in fitting:
            try:
                reply, _key = self._call(host, request)
            except ProviderError as error:
                if error.kind != ProviderErrorKind.CAPACITY:
                    failed.append(error)
                continue  # taken meanwhile by another launch, or the server failed: the next
            return self._instance(host, spec.region, idempotency_key, reply["allocation"])
        if failed:
            raise failed[0]
        where = f"server {spec.zone}" if spec.zone else "any server of this site that answers"
        raise ProviderError(
            ProviderErrorKind.CAPACITY,
            f"No {count} free GPU(s) of model {model} on {where}.",
        )

    @staticmethod
    def _free(reply: dict, model: str) -> int:
        taken = {
            index
            for allocation in reply["allocations"].values()
            if allocation["state"] != "terminated"
            for index in allocation["gpus"]
        }
        return sum(
            1
            for gpu in reply["gpus"]
            if ssh_host.gpu_matches(gpu["name"], gpu["memory_mib"], model)
            and gpu["index"] not in taken
            and not gpu["busy_pids"]
        )

    @staticmethod
    def _agent_source() -> str:
        return base64.b64encode(gzip.compress(AGENT_SOURCE.read_bytes(), mtime=0)).decode()

    def describe(self, *, region: str, tag_filter: dict[str, str]) -> list[CloudInstance]:
        """Every allocation carrying all of ``tag_filter`` on the servers that answer (ended
        ones for a day after their end). A server that does not answer is left out (its
        leases stay known by id: ``describe_ids`` raises for them); ``transient`` only
        when no server answers."""
        found = []
        errors = []
        for host, result in self._each(list(self.hosts.values()), self._inspect):
            if isinstance(result, ProviderError):
                errors.append(result)
                continue
            for key, allocation in result[0]["allocations"].items():
                instance = self._instance(host, region, key, allocation)
                if all(instance.tag(k) == v for k, v in tag_filter.items()):
                    found.append(instance)
        if errors and len(errors) == len(self.hosts):
            raise errors[0]
        return sorted(found, key=lambda instance: instance.external_id)

    def describe_ids(self, external_ids: list[str], *, region: str) -> list[CloudInstance]:
        """The allocations among ``external_ids`` their servers know; an id on a server
        this site no longer has, or that its server does not know, is missing from the
        answer. Raises ``transient`` when a server named by an id does not answer, so a
        lease on a server that is down is never taken for gone."""
        wanted: dict[str, set[str]] = {}
        for external_id in external_ids:
            host_name, _, account = external_id.partition("/")
            if host_name in self.hosts and account:
                wanted.setdefault(host_name, set()).add(account)
        found = []
        for host, result in self._each([self.hosts[name] for name in wanted], self._inspect):
            if isinstance(result, ProviderError):
                raise result
            for key, allocation in result[0]["allocations"].items():
                if allocation["account"] in wanted[host.name]:
                    found.append(self._instance(host, region, key, allocation))
        return sorted(found, key=lambda instance: instance.external_id)

    def terminate(self, external_ids: list[str], *, region: str) -> None:
        """End the allocations: every process of each account killed, the account and its
        home removed, the GPUs free. Unknown ids, ended ones and servers this site no
        longer has are ignored; a server that does not answer raises ``transient``."""
        accounts: dict[str, list[str]] = {}
        for external_id in external_ids:
            host_name, _, account = external_id.partition("/")
            if host_name in self.hosts and account.startswith(ssh_host.ACCOUNT_PREFIX):
                accounts.setdefault(host_name, []).append(account)
        hosts = [self.hosts[name] for name in accounts]
        for _host, result in self._each(
            hosts,
            lambda host: self._call(
                host, {"action": "release", "accounts": sorted(accounts[host.name])}
            ),
        ):
            if isinstance(result, ProviderError):
                raise result

    def _instance(self, host: HostConfig, region: str, key: str, allocation: dict) -> CloudInstance:
        tags = tuple(sorted({(k, v) for k, v in allocation["tags"]} | {(TAG_IDEMPOTENCY_KEY, key)}))
        ended = allocation.get("ended_at")
        created = datetime.fromisoformat(allocation["created_at"])
        return CloudInstance(
            external_id=f"{host.name}/{allocation['account']}",
            state=STATES.get(allocation["state"], CloudState.PENDING),
            market=MARKET_ON_DEMAND,
            region=region,
            zone=host.name,
            instance_type=allocation["instance_type"],
            public_address=host.address,
            private_address=host.address,
            launched_at=created,
            state_reason="",
            state_changed_at=datetime.fromisoformat(ended) if ended else created,
            tags=tags,
            login_user=allocation["account"],
        )
