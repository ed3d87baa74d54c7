"""Own servers' free GPUs by the portal's own count, and a pool's offerings in its
placement order (rental.catalog.placement_rules).

An own server's GPUs of a model are those its last report found; every instance of the
portal on it (by its zone, the host's name) holds its GPUs until it is terminated or has
failed. An instance not aimed at a host yet holds GPUs of its account without a host.
The driver stays the judge of what is really free: this count only orders the places.
"""

from collections import defaultdict
from collections.abc import Iterable
from dataclasses import dataclass, field

from django.db.models import Sum

from rental.catalog.placement_rules import (
    OWN_DRIVER,
    PlacementOrder,
    instances_fit,
    placement_order,
)
from rental.models import Instance, Offering, OwnHost, Pool

# The instance states that hold an own server's GPUs.
HOLDING = (
    Instance.State.REQUESTED,
    Instance.State.LAUNCHING,
    Instance.State.RUNNING,
    Instance.State.STOPPING,
    Instance.State.STOPPED,
)


@dataclass(frozen=True)
class OwnRoom:
    """Free GPUs of one model per own account and host, and GPUs not on a host yet."""

    free: dict[int, dict[str, int]] = field(default_factory=dict)
    unplaced: dict[int, int] = field(default_factory=dict)

    def hosts(self, account_id: int) -> dict[str, int]:
        return self.free.get(account_id, {})

    def has_room(self, offering: Offering, *, instances: int) -> bool:
        """Whether ``instances`` more instances of ``offering`` fit on its hosts."""
        size = offering.gpus_per_instance
        waiting = -(-self.unplaced.get(offering.account_id, 0) // size)
        return instances_fit(
            self.hosts(offering.account_id).values(),
            gpus_per_instance=size,
            instances=instances + waiting,
        )


def is_own(offering: Offering) -> bool:
    return offering.account.driver == OWN_DRIVER


def own_room(gpu_model_id: int, *, leaving_out: int | None = None) -> OwnRoom:
    """Every active own server's free GPUs of the model (two queries); ``leaving_out``: an
    instance whose own GPUs are not counted (the one about to launch)."""
    free: dict[int, dict[str, int]] = defaultdict(dict)
    hosts = OwnHost.objects.filter(
        is_active=True, account__driver=OWN_DRIVER, account__is_active=True
    ).exclude(state=OwnHost.State.UNREACHABLE)
    for host in hosts.only("account_id", "name", "gpus"):
        count = host.gpu_models().get(gpu_model_id, 0)
        if count:
            free[host.account_id][host.name] = count
    unplaced: dict[int, int] = defaultdict(int)
    used = (
        Instance.objects.filter(
            account__driver=OWN_DRIVER,
            offering__gpu_model_id=gpu_model_id,
            state__in=HOLDING,
        )
        .exclude(pk=leaving_out)
        .values("account_id", "zone")
        .annotate(gpus=Sum("gpu_count"))
        .order_by()
    )
    for row in used:
        hosts_of = free.get(row["account_id"], {})
        if row["zone"] in hosts_of:
            hosts_of[row["zone"]] = max(hosts_of[row["zone"]] - row["gpus"], 0)
        elif not row["zone"]:
            unplaced[row["account_id"]] += row["gpus"]
    return OwnRoom(free=dict(free), unplaced=dict(unplaced))


def pool_order(gpu_model_id: int) -> PlacementOrder:
    """The pool's placement order (the default when the model has no pool)."""
    pool = Pool.objects.filter(gpu_model_id=gpu_model_id).only(
        "placement_order", "placement_accounts"
    )
    found = pool.first()
    if found is None:
        return PlacementOrder()
    return placement_order(found.placement_order, found.placement_accounts)


def in_placement_order(offerings: Iterable[Offering], *, gpu_count: int) -> list[Offering]:
    """``offerings`` (of one GPU model, cheapest first, as ``selectors.fitting`` gives
    them) in their pool's placement order for a lease of ``gpu_count`` GPUs. Offerings of
    a single account keep their order, with no query."""
    listed = list(offerings)
    if len({offering.account_id for offering in listed}) <= 1:
        return listed
    model_id = listed[0].gpu_model_id
    order = pool_order(model_id)
    room = own_room(model_id) if any(is_own(offering) for offering in listed) else OwnRoom()

    def key(offering: Offering) -> tuple:
        own = is_own(offering)
        instances = gpu_count // offering.gpus_per_instance
        fits = not own or room.has_room(offering, instances=instances)
        return order.key(account_id=offering.account_id, own=own, has_room=fits)

    return sorted(listed, key=key)
