"""What the pool page shows of the company's own servers: each active host with GPUs of
the pool's model, its state in words, and each of those GPUs free or leased (by which
lease: a link for those who may see it). Two queries however many hosts and GPUs."""

from collections.abc import Iterable
from dataclasses import dataclass, field
from typing import Any

from django.urls import reverse

from portal import access
from rental.catalog.placement_rules import OWN_DRIVER
from rental.models import Instance, OwnHost


@dataclass(frozen=True)
class HostGpuRow:
    index: int
    memory_mib: int
    # Leased, or running processes (of a lease or of no one's: an orphan, for admins).
    busy: bool
    lease_id: int | None = None
    lease_url: str = ""


@dataclass
class HostRow:
    host: OwnHost
    gpus: list[HostGpuRow] = field(default_factory=list)

    @property
    def answering(self) -> bool:
        return self.host.state == OwnHost.State.OK

    @property
    def free(self) -> int:
        return sum(1 for gpu in self.gpus if gpu.lease_id is None and not gpu.busy)


def pool_hosts(gpu_model_id: int, user: Any, *, offered: bool | None = None) -> list[HostRow]:
    """The own servers with GPUs of this model, by name, for ``user``: a leased GPU's
    lease is linked only where the user may see that lease's project. ``offered`` False
    (the caller knows no own server offers this model): none, without a query."""
    if offered is False:
        return []
    hosts = [
        host
        for host in OwnHost.objects.filter(is_active=True).order_by("name", "pk")
        if gpu_model_id in host.gpu_models()
    ]
    keys = {gpu["lease"] for host in hosts for gpu in host.gpus if gpu.get("lease")}
    leases = {
        key: (lease_id, project_id)
        for key, lease_id, project_id in Instance.objects.filter(
            idempotency_key__in=keys, state__in=Instance.LIVE
        ).values_list("idempotency_key", "reservation_id", "reservation__project_id")
    }
    everything = access.sees_everything(user)
    mine = set(access.roles(user)) if not everything else set()
    rows = []
    for host in hosts:
        row = HostRow(host)
        for gpu in host.gpus:
            if gpu.get("gpu_model") != gpu_model_id:
                continue
            lease_id, project_id = leases.get(gpu.get("lease") or "", (None, None))
            shown = lease_id is not None and (everything or project_id in mine)
            row.gpus.append(
                HostGpuRow(
                    index=gpu["index"],
                    memory_mib=gpu["memory_mib"],
                    busy=bool(gpu.get("busy_pids")) or bool(gpu.get("lease")),
                    lease_id=lease_id,
                    lease_url=reverse("rental:lease", kwargs={"pk": lease_id}) if shown else "",
                )
            )
        rows.append(row)
    return rows


def mark_silent_servers(instances: Iterable[Instance]) -> None:
    """Give each instance (its account loaded) ``silent_server``: the own server it runs
    on when that server is known not to answer (``unreachable_since`` set; the sync
    leaves its instances alone and its lease is at risk), else None. One query when a
    live instance runs on own servers, none otherwise."""
    instances = list(instances)
    own = [
        instance
        for instance in instances
        if instance.account.driver == OWN_DRIVER and instance.state in Instance.LIVE
    ]
    own_ids = {instance.pk for instance in own}
    silent: dict[tuple[int, str], OwnHost] = {}
    if own:
        silent = {
            (host.account_id, host.name): host
            for host in OwnHost.objects.filter(
                account_id__in={instance.account_id for instance in own},
                unreachable_since__isnull=False,
            )
        }
    for instance in instances:
        host = instance.zone or instance.external_id.partition("/")[0]
        instance.silent_server = (
            silent.get((instance.account_id, host)) if instance.pk in own_ids else None
        )
