"""Kubernetes GPU pools' offerings kept in step with their nodes: every active
``kubernetes`` account's nodes read through the driver (``inspect_nodes``: allocatable
``nvidia.com/gpu`` and GPU feature discovery's product label), and one offering per
(GPU model, k) kept for k = 1 … the most of that model on one node, its zones the ready
nodes with at least k (``kubernetes_naming.offerings_wanted``).

The price is the admin's: a new offering starts at 0 and unavailable, a price an admin
set is never changed here, and an offering is available only while a node fits and its
price is above 0. A cluster that does not answer leaves the offerings as they are and
records the account's sync error.

One provider call per account, never inside a database transaction. Idempotent: a second
look at the same nodes changes nothing.
"""

import logging
from dataclasses import dataclass
from datetime import datetime

from django.utils import timezone

from rental.catalog import offering_sync
from rental.catalog.offering_sync import WantedOffering
from rental.models import GpuModel, ProviderAccount
from rental.providers.base import ProviderError
from rental.providers.kubernetes_naming import KubernetesNode, instance_type, offerings_wanted
from rental.providers.registry import get_provider

logger = logging.getLogger(__name__)
DRIVER = "kubernetes"
# A pool's offerings are named by the driver: "k8s-2x-a100-80gb" (``instance_type``).
OFFERING_PREFIX = "k8s-"
# What this module writes into ``sync_error``, so a good look clears its own error only
# (the region sync of rental.fleet.sync writes there too).
ERROR_PREFIX = "nodes: "
COLUMN_MOST = 32767  # the offering's vCPU column (memory is kept within it too)


@dataclass(frozen=True)
class NodeCheck:
    """What one look at a cluster found: whether it answered, offerings changed."""

    answered: bool
    offerings_changed: int


def check_all(*, now: datetime | None = None) -> dict[int, NodeCheck]:
    """Every active ``kubernetes`` account, each by itself: a broken account is logged and
    never stops the others'. Returns each account's result."""
    now = now or timezone.now()
    results: dict[int, NodeCheck] = {}
    ids = ProviderAccount.objects.filter(driver=DRIVER, is_active=True).values_list("pk", flat=True)
    for account_id in list(ids):
        try:
            results[account_id] = check_account(account_id=account_id, now=now)
        except Exception:  # a bug or a broken account: logged, never spread
            logger.exception("nodes of Kubernetes account %s could not be checked", account_id)
    return results


def check_account(*, account_id: int, now: datetime | None = None) -> NodeCheck:
    """Read one cluster's nodes (one driver call, outside any transaction) and keep the
    account's offerings in step. A driver error is recorded as the account's sync error
    (its kind and message, never the token) and the offerings are left as they are; a
    good look clears an error it recorded before."""
    now = now or timezone.now()
    account = ProviderAccount.objects.get(pk=account_id, driver=DRIVER)
    try:
        nodes = get_provider(account.config()).inspect_nodes()
    except ProviderError as exc:
        text = f"{ERROR_PREFIX}{exc.kind}: {exc.message}"
        ProviderAccount.objects.filter(pk=account_id).update(
            sync_error=text[:1000], sync_failed_at=now
        )
        return NodeCheck(answered=False, offerings_changed=0)
    changed = offering_sync.sync_offerings(
        account=account,
        region=account.default_region,
        prefix=OFFERING_PREFIX,
        wanted=wanted_offerings(nodes),
        now=now,
    )
    ProviderAccount.objects.filter(pk=account_id, sync_error__startswith=ERROR_PREFIX).update(
        sync_error=""
    )
    return NodeCheck(answered=True, offerings_changed=changed)


def wanted_offerings(nodes: list[KubernetesNode]) -> list[WantedOffering]:
    """The offerings the nodes call for, of the catalog's models only (a node whose card
    the catalog does not know is logged and offers nothing). An offering of k GPUs gets
    k/n of the CPUs and memory of its smallest node of n GPUs (0 where no node says);
    its price is left to the admin."""
    models = {name.lower(): (pk, name) for pk, name in GpuModel.objects.values_list("pk", "name")}
    by_name = {node.name: node for node in nodes}
    wanted = []
    for (model, k), zones in offerings_wanted(nodes).items():
        found = models.get(model.lower())
        if found is None:
            logger.warning("no catalog GPU model %s: its nodes offer nothing", model)
            continue
        model_id, name = found
        fitting = [by_name[zone] for zone in zones]
        wanted.append(
            WantedOffering(
                instance_type=instance_type(name, k),
                gpu_model_id=model_id,
                gpus_per_instance=k,
                zones=tuple(zones),
                # No node fits: the row keeps what it had.
                vcpus=min(_share(node.vcpus, node, k) for node in fitting) if fitting else None,
                memory_gib=(
                    min(_share(node.memory_gib, node, k) for node in fitting) if fitting else None
                ),
            )
        )
    return wanted


def _share(amount: int, node: KubernetesNode, k: int) -> int:
    """k of the node's GPUs' share of ``amount`` (its CPUs or memory), rounded down and
    within the offering's columns."""
    return min(amount * k // node.allocatable, COLUMN_MOST) if node.allocatable else 0
