"""The sync (L3): every live instance's state brought from the cloud in bulk, one
paginated describe per account and region, applied to the rows read before it; rows
missing past the grace period confirmed by a describe by id; orphans found on the way
(L4); lost and overdue launches sent again or failed.

A provider call is never made inside a database transaction.
"""

import logging
from collections import defaultdict
from dataclasses import dataclass
from datetime import datetime, timedelta

from django.conf import settings
from django.db import transaction
from django.db.models import Q
from django.utils import timezone
from django.utils.translation import gettext as _

from rental import jobs
from rental.models import Instance, Offering, ProviderAccount, Reservation
from rental.providers.base import CloudInstance, CloudState, ProviderError
from rental.providers.registry import get_provider
from rental.services import orphans
from rental.services.instances import (
    _enqueue_provision,
    _enqueue_terminate,
    _link,
    fail_instance,
    installation_tags,
    launch_may_be_in_flight,
    mark_running,
    mark_terminated,
    mark_terminated_many,
)

logger = logging.getLogger(__name__)
State = Instance.State
Status = Reservation.Status


@dataclass(frozen=True)
class SyncRow:
    """An instance row as the sync read it *before* asking the cloud: what the describe
    answer is compared with (a cloud id recorded after this read is not in the snapshot)."""

    pk: int
    external_id: str


def sync_instances(*, now: datetime | None = None) -> int:
    """Bring every live instance's state from the cloud (L3): one paginated describe per
    account and region, never one call per instance. The rows are read before the
    describe, so the snapshot is never older than the rows compared with it. An account
    whose sync fails is recorded as such and does not stop the others. Returns the
    instances changed."""
    now = now or timezone.now()
    rows: dict[tuple[int, str], list[SyncRow]] = defaultdict(list)
    for pk, account_id, region, external_id in Instance.objects.filter(
        state__in=Instance.LIVE
    ).values_list("pk", "account_id", "region", "external_id"):
        rows[(account_id, region)].append(SyncRow(pk, external_id))
    changed = 0
    accounts = {
        account.pk: account
        for account in ProviderAccount.objects.filter(
            Q(pk__in={key[0] for key in rows}) | Q(is_active=True)
        ).exclude(credentials_encrypted="")
    }
    # Regions without a live row are described too: an orphan may run there (L4).
    offered = set(
        Offering.objects.filter(account__in=list(accounts)).values_list("account_id", "region")
    )
    for account in accounts.values():
        if account.is_active:
            for region in {*account.regions, *(r for a, r in offered if a == account.pk)}:
                rows.setdefault((account.pk, region), [])
    errors: dict[int, list[str]] = defaultdict(list)
    for (account_id, region), group in sorted(rows.items()):
        account = accounts.get(account_id)
        if account is None:
            continue  # no credentials: nothing can be asked
        try:
            changed += sync_region(account=account, region=region, rows=group, now=now)
        except ProviderError as exc:
            errors[account_id].append(f"{region}: {exc.kind}: {exc.message}")
            logger.warning("sync of account %s in %s failed: %s", account_id, region, exc.kind)
        except Exception as exc:  # one broken account never blocks the others
            errors[account_id].append(f"{region}: {type(exc).__name__}")
            logger.exception("sync of account %s in %s failed", account_id, region)
    # An account's sync is good only when every one of its regions was.
    for account_id in {key[0] for key in rows} & set(accounts):
        if errors[account_id]:
            ProviderAccount.objects.filter(pk=account_id).update(
                sync_error="; ".join(errors[account_id])[:1000], sync_failed_at=now
            )
        else:
            ProviderAccount.objects.filter(pk=account_id).update(synced_at=now, sync_error="")
    _requeue_lost_launches(now)
    changed += _time_out_launches(now)
    return changed


def _time_out_launches(now: datetime) -> int:
    """L2: a launch that has been provisioning longer than the provisioning timeout (from
    the lease's start, or from the replacement or resume that began it) fails, and what it
    created is terminated."""
    timeout = settings.PORTAL_PROVISIONING_TIMEOUT_SECONDS
    cut = now - timedelta(seconds=timeout)
    overdue = (
        Instance.objects.filter(state=State.LAUNCHING, reservation__status=Status.PROVISIONING)
        .filter(
            Q(provisioning_since__lt=cut)
            | Q(provisioning_since__isnull=True, reservation__start__lt=cut)
        )
        .values_list("pk", flat=True)
    )
    message = _(
        "Not running %(minutes)s minutes after the launch began (the provisioning timeout); "
        "what was started is terminated. Try again, or another GPU model or region."
    ) % {"minutes": round(timeout / 60)}
    for pk in list(overdue):
        fail_instance(instance_id=pk, message=message, now=now, code="provisioning_timeout")
    return len(overdue)


def sync_region(
    *, account: ProviderAccount, region: str, rows: list[SyncRow], now: datetime
) -> int:
    """One account and region: one describe by the installation's tag, the changes applied
    in one transaction, then one describe by id of the instances missing past the grace
    period before any of them is marked gone."""
    provider = get_provider(account.config())
    cloud = provider.describe(region=region, tag_filter=installation_tags())
    changed, missing = apply_sync(rows=rows, cloud=cloud, now=now)
    if missing:
        confirmed = provider.describe_ids([row.external_id for row in missing], region=region)
        changed += apply_gone(rows=missing, cloud=confirmed, now=now)
    found = orphans.find_orphans(account=account, region=region, cloud=cloud, now=now)
    orphans.handle_orphans(
        provider=provider, account=account, region=region, orphans=found, cloud=cloud, now=now
    )
    return changed


@transaction.atomic
def apply_sync(
    *, rows: list[SyncRow], cloud: list[CloudInstance], now: datetime
) -> tuple[int, list[SyncRow]]:
    """Apply one describe taken after ``rows`` were read. Returns the instances changed
    and the rows missing from the cloud for longer than the grace period, which only a
    describe by id may mark gone (``apply_gone``)."""
    by_id = {item.external_id: item for item in cloud}
    by_key = {item.idempotency_key: item for item in cloud if item.idempotency_key}
    read = {row.pk: row for row in rows}
    grace = timedelta(seconds=settings.PORTAL_SYNC_GRACE_SECONDS)
    changed = 0
    overdue: list[SyncRow] = []
    ended: dict[int, datetime] = {}
    newly_missing: list[int] = []
    seen_again: list[int] = []
    instances = Instance.objects.select_for_update().filter(
        pk__in=list(read), state__in=Instance.LIVE
    )
    for instance in instances.select_related("reservation"):
        row = read[instance.pk]
        found = (
            by_id.get(row.external_id) if row.external_id else by_key.get(instance.idempotency_key)
        )
        if found is None:
            if row.external_id and instance.external_id == row.external_id:
                if instance.missing_since is None:
                    newly_missing.append(instance.pk)
                elif now - instance.missing_since >= grace:
                    overdue.append(row)
            elif not row.external_id and not instance.external_id:
                changed += _handle_unseen_launch(instance, now=now)
            continue
        if instance.missing_since is not None:
            seen_again.append(instance.pk)
        changed += _apply_cloud_state(instance, found, now=now, ended=ended)
    if newly_missing:
        Instance.objects.filter(pk__in=newly_missing).update(missing_since=now)
    if seen_again:
        Instance.objects.filter(pk__in=seen_again).update(missing_since=None)
    mark_terminated_many(ended)
    return changed, overdue


def _handle_unseen_launch(instance: Instance, *, now: datetime) -> int:
    """A row with no cloud id that the describe does not list by its key either."""
    if instance.state == State.STOPPING:
        _enqueue_terminate(instance.pk)  # it decides whether a launch is still in flight
        return 0
    if instance.state == State.LAUNCHING and not launch_may_be_in_flight(instance, now=now):
        instance.state = State.REQUESTED  # its worker died before reaching the cloud
        instance.save(update_fields=["state"])
        _enqueue_provision(instance.pk)
        return 1
    return 0


def _apply_cloud_state(
    instance: Instance,
    found: CloudInstance,
    *,
    now: datetime,
    ended: dict[int, datetime],
) -> int:
    """Apply what one describe says of one row; terminations are gathered in ``ended``
    (row id → the cloud's time) and written in bulk by the caller."""
    changed = 0
    if not instance.external_id:
        _link(instance, found, now=now)  # a launch whose worker died before recording it
        changed += 1
    if found.state in (CloudState.SHUTTING_DOWN, CloudState.TERMINATED):
        at = found.state_changed_at or now
        at = min(max(at, instance.running_at or at), now)
        from rental.services import spot

        reason = spot.reason_from_cloud(instance, found.state_reason)
        if reason:  # a spot interruption (L7): rare, so handled one by one
            mark_terminated(instance_id=instance.pk, at=at, reason=reason)
            spot.after_sync_interruption(instance_id=instance.pk, now=now)
        else:
            ended[instance.pk] = at
        return changed + 1
    if found.state == CloudState.RUNNING and instance.state == State.LAUNCHING:
        mark_running(instance, found, now=now)
        return changed + 1
    if instance.state == State.STOPPING:
        _enqueue_terminate(instance.pk)  # the terminate task may have been lost
    return changed


@transaction.atomic
def apply_gone(*, rows: list[SyncRow], cloud: list[CloudInstance], now: datetime) -> int:
    """Apply a describe by id of instances missing past the grace period: one the cloud
    does not know is gone (its usage closes when it was first missed: the cloud gives no
    time for an instance it forgot); one it lists is handled as any describe answer."""
    by_id = {item.external_id: item for item in cloud}
    read = {row.pk: row for row in rows}
    changed = 0
    ended: dict[int, datetime] = {}
    instances = Instance.objects.select_for_update().filter(
        pk__in=list(read), state__in=Instance.LIVE
    )
    for instance in instances.select_related("reservation"):
        if instance.external_id != read[instance.pk].external_id:
            continue
        found = by_id.get(instance.external_id)
        if found is None:
            at = instance.missing_since or now
            ended[instance.pk] = max(at, instance.running_at or at)
            changed += 1
            continue
        Instance.objects.filter(pk=instance.pk).update(missing_since=None)
        changed += _apply_cloud_state(instance, found, now=now, ended=ended)
    mark_terminated_many(ended)
    return changed


def _requeue_lost_launches(now: datetime) -> None:
    """A launch task lost by the broker (or held by a dead worker): requested instances of
    admitted leases that nobody claimed within the stale-claim time of their admission or
    of their scheduled retry are sent again (a duplicate would find nothing to claim)."""
    stale = now - timedelta(seconds=settings.PORTAL_LAUNCH_STALE_SECONDS)
    lost = (
        Instance.objects.filter(state=State.REQUESTED, reservation__status=Status.PROVISIONING)
        .filter(
            Q(next_attempt_at__isnull=True, reservation__start__lt=stale)
            | Q(next_attempt_at__lt=stale)
        )
        .values_list("pk", flat=True)
    )
    for pk in lost:
        jobs.provision_now(pk)
