"""Discovery of the company's own GPU servers: every active ``ssh`` account's hosts
looked at through the driver (``inspect_hosts``: ``nvidia-smi`` over SSH), each host's
GPUs kept and mapped to the catalog, its host key pinned at the first contact, its state
followed (``own_host_health``), and the account's offerings kept in step with what the
answering hosts have.

One provider call per account, never inside a database transaction. Idempotent: a second
look at the same hosts changes nothing.
"""

import logging
from dataclasses import dataclass
from datetime import datetime
from decimal import Decimal

from django.utils import timezone

from rental.catalog import offering_sync
from rental.catalog.offering_sync import WantedOffering
from rental.fleet import own_host_health
from rental.models import GpuModel, Offering, OwnHost, ProviderAccount
from rental.providers.base import HostReport, ProviderError
from rental.providers.registry import get_provider
from rental.providers.ssh import instance_type
from rental.providers.ssh_host import catalog_name

logger = logging.getLogger(__name__)
# An own server's offerings are named by the driver: "own-2x-h100-80gb" (``instance_type``).
OFFERING_PREFIX = "own-"


@dataclass(frozen=True)
class CheckResult:
    """What one look at an account found: hosts answering, hosts not, offerings changed."""

    answering: int
    not_answering: int
    offerings_changed: int


def check_all(*, now: datetime | None = None) -> dict[int, CheckResult]:
    """Every active ``ssh`` account with active hosts, each by itself: a broken account
    is logged and never stops the others'. Returns each account's result."""
    now = now or timezone.now()
    results: dict[int, CheckResult] = {}
    ids = (
        ProviderAccount.objects.filter(driver="ssh", is_active=True, own_hosts__is_active=True)
        .distinct()
        .values_list("pk", flat=True)
    )
    for account_id in list(ids):
        try:
            results[account_id] = check_account(account_id=account_id, now=now)
        except Exception:  # a bug or a broken account: logged, never spread
            logger.exception("own servers of account %s could not be checked", account_id)
    return results


def check_account(*, account_id: int, now: datetime | None = None) -> CheckResult:
    """Look at every active host of one ``ssh`` account (one driver call, outside any
    transaction), keep what each answered and the offerings in step. A driver error for
    the whole account counts as every host not answering, with the error's kind and
    message (never a secret)."""
    now = now or timezone.now()
    account = ProviderAccount.objects.get(pk=account_id, driver="ssh")
    hosts = list(account.own_hosts.filter(is_active=True))
    try:
        reports = get_provider(account.config()).inspect_hosts()
    except ProviderError as exc:
        text = f"{exc.kind}: {exc.message}"
        reports = [HostReport(name=host.name, reachable=False, message=text) for host in hosts]
    by_name = {report.name: report for report in reports}
    models = _catalog_models()
    answering = 0
    for host in hosts:
        report = by_name.get(host.name) or HostReport(
            name=host.name, reachable=False, message="not looked at by the driver"
        )
        answering += report.reachable
        own_host_health.apply_report(
            host_id=host.pk, report=report, gpus=_gpus(report, models), now=now
        )
    changed = sync_offerings(account=account, now=now)
    return CheckResult(answering, len(hosts) - answering, changed)


def _catalog_models() -> dict[str, int]:
    """Catalog model ids by name, lower case (the driver's names are matched so)."""
    return {name.lower(): pk for pk, name in GpuModel.objects.values_list("pk", "name")}


def _gpus(report: HostReport, models: dict[str, int]) -> list[dict]:
    """The host's GPUs as kept on its row: each mapped to its catalog model (None where the
    catalog has no such model), with its busy processes and the lease holding it."""
    if not report.reachable:
        return []
    holder = {index: key for key, indexes in report.leases for index in indexes}
    rows = []
    for gpu in sorted(report.gpus, key=lambda item: item.index):
        mapped = catalog_name(gpu.name, gpu.memory_mib)
        rows.append(
            {
                "index": gpu.index,
                "name": gpu.name,
                "memory_mib": gpu.memory_mib,
                "uuid": gpu.uuid,
                "gpu_model": models.get(mapped.lower()) if mapped else None,
                "busy_pids": list(gpu.busy_pids),
                "lease": holder.get(gpu.index, ""),
            }
        )
    return rows


def offerings_wanted(hosts: list[OwnHost]) -> dict[tuple[int, int], tuple[list[str], Decimal]]:
    """(GPU model id, k) → (zones, price) for k = 1 … the most GPUs of that model on one
    host: the zones are the answering hosts with at least k of that model (none: the
    offering is unavailable), the price per instance-hour k × the power price per GPU-hour
    of those hosts, the highest where they differ (of every host with k when none
    answers)."""
    most: dict[int, int] = {}
    for host in hosts:
        for model_id, count in host.gpu_models().items():
            most[model_id] = max(most.get(model_id, 0), count)
    wanted = {}
    for model_id, top in most.items():
        for k in range(1, top + 1):
            having = [host for host in hosts if host.gpu_models().get(model_id, 0) >= k]
            answering = [host for host in having if host.state == OwnHost.State.OK]
            priced = answering or having
            power = max(host.power_price_per_gpu_hour for host in priced)
            wanted[(model_id, k)] = ([host.name for host in answering], power * k)
    return wanted


def sync_offerings(*, account: ProviderAccount, now: datetime) -> int:
    """Keep the account's own-server offerings in step with its hosts' last reports: one
    per (GPU model, k), priced from the hosts' power price (``offerings_wanted``), written
    by ``offering_sync.sync_offerings`` (created, updated, made unavailable, deleted
    unless a lease or instance refers to it). Idempotent. Returns the offerings created,
    changed or deleted."""
    hosts = list(account.own_hosts.filter(is_active=True))
    found = offerings_wanted(hosts)
    names = dict(
        GpuModel.objects.filter(pk__in={key[0] for key in found}).values_list("pk", "name")
    )
    currency = next((host.currency for host in hosts), Offering.Currency.USD)
    wanted = [
        WantedOffering(
            instance_type=instance_type(names[model_id], k),
            gpu_model_id=model_id,
            gpus_per_instance=k,
            zones=tuple(zones),
            price=price,
            currency=currency,
        )
        for (model_id, k), (zones, price) in found.items()
    ]
    return offering_sync.sync_offerings(
        account=account,
        region=account.default_region,
        prefix=OFFERING_PREFIX,
        wanted=wanted,
        now=now,
    )
