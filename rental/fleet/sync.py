"""The sync (L3): every live instance's state brought from the cloud in bulk, one
paginated describe per account and region, applied to the rows read before it; rows
missing past the grace period confirmed by a describe by id; orphans found on the way
(L4); lost and overdue launches sent again or failed.

A provider call is never made inside a database transaction.
"""

import gc
import logging
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from datetime import datetime, timedelta

from django.conf import settings
from django.db import transaction
from django.db.models import F, Q
from django.utils import timezone
from django.utils.translation import gettext_noop

from portal.phrases import Phrase, duration
from portal.sql_arrays import AnyOf
from rental import jobs
from rental.catalog.placement_rules import OWN_DRIVER
from rental.fleet import orphans, recovery, spot
from rental.fleet.cloud import installation_tags
from rental.fleet.instances import _link, fail_instance, mark_running
from rental.fleet.termination import launch_may_be_in_flight, mark_terminated, mark_terminated_many
from rental.loans.locks import lock_leases_of
from rental.models import (
    Instance,
    Offering,
    OwnHost,
    ProviderAccount,
    RegionSync,
    Reservation,
)
from rental.providers.base import (
    CloudInstance,
    CloudState,
    Provider,
    ProviderError,
    ProviderErrorKind,
)
from rental.providers.registry import get_provider

logger = logging.getLogger(__name__)
State = Instance.State
Status = Reservation.Status


@dataclass(frozen=True)
class SyncRow:
    """An instance row as the sync read it *before* asking the cloud: what the describe
    answer is compared with (a cloud id recorded after this read is not in the snapshot)."""

    pk: int
    external_id: str
    zone: str = ""  # an own server's name (its host)


def sync_plan() -> list[tuple[int, str]]:
    """Every (provider account, region) to sync: where a live row is, and every region an
    active account names or offers (an orphan may run there, L4). Accounts without
    credentials are left out: nothing can be asked (an ``ssh`` account of own servers
    has none: its hosts' keys are its credentials)."""
    pairs = set(
        Instance.objects.filter(state__in=Instance.LIVE)
        .order_by()
        .values_list("account_id", "region")
        .distinct()
    )
    accounts = {
        account.pk: account
        for account in ProviderAccount.objects.filter(
            Q(pk__in={pair[0] for pair in pairs}) | Q(is_active=True)
        ).exclude(Q(credentials_encrypted="") & ~Q(driver="ssh"))  # own servers: host keys
    }
    offered = set(
        Offering.objects.filter(account__in=list(accounts)).values_list("account_id", "region")
    )
    for account in accounts.values():
        if account.is_active:
            pairs.update((account.pk, region) for region in account.regions)
            pairs.update(pair for pair in offered if pair[0] == account.pk)
    plan = sorted(pair for pair in pairs if pair[0] in accounts)
    # Every region has its row before any of its tasks runs, so an account counts as
    # synced only once each of its regions has been.
    RegionSync.objects.bulk_create(
        [RegionSync(account_id=account_id, region=region) for account_id, region in plan],
        ignore_conflicts=True,
    )
    return plan


# A periodic sync that began less than this share of a period ago leaves the region alone.
PERIOD_CLAIM = 0.75


def sync_period() -> float:
    """Seconds between the beat's syncs (``PORTAL_SYNC_INTERVAL``)."""
    return float(settings.CELERY_BEAT_SCHEDULE["sync-instances"]["schedule"])


def start_sync(*, now: datetime | None = None) -> list[tuple[int, str]]:
    """The periodic sync (L3): one small task per account and region, each isolated (one
    slow or failing region delays no other), then the launches past their timeout. Each
    task claims its region's period, so a second beat's tick syncs nothing twice."""
    now = now or timezone.now()
    pairs = sync_plan()
    jobs.sync_regions(pairs, tick=now)
    _time_out_launches(now)
    return pairs


def sync_instances(*, now: datetime | None = None) -> int:
    """One whole tick in this process (tests, the benchmark, ``manage.py``): every account
    and region in turn, as their tasks would, then the launch sweep and timeouts. Returns
    the instances changed."""
    now = now or timezone.now()
    changed = 0
    for account_id, region in sync_plan():
        changed += sync_account_region(account_id=account_id, region=region, now=now) or 0
    recovery.sweep_launches(now=now)
    recovery.sweep_terminations(now=now)
    changed += _time_out_launches(now)
    return changed


def sync_account_region(
    *, account_id: int, region: str, now: datetime | None = None, tick: datetime | None = None
) -> int | None:
    """Sync one account in one region, unless another delivery holds its claim, or, for
    the beat's sync (``tick``: when its tick fired), the region's period (then None). The
    rows are read before the describe, so the snapshot is never older than the rows
    compared with it. A failure is recorded for this region and the account; it never
    reaches another region's task. Returns the instances changed."""
    now = now or timezone.now()
    claim = _claim_region(account_id, region, now, tick=tick)
    if claim is None:
        return None
    error, changed = "", 0
    try:
        account = ProviderAccount.objects.exclude(
            Q(credentials_encrypted="") & ~Q(driver="ssh")
        ).get(pk=account_id)
        live = Instance.objects.filter(
            state__in=Instance.LIVE, account_id=account_id, region=region
        )
        if account.driver == OWN_DRIVER:
            live = live.exclude(on_silent_hosts(account_id))
        rows = [
            SyncRow(pk, external_id, zone)
            for pk, external_id, zone in live.values_list("pk", "external_id", "zone")
        ]
        changed = sync_region(account=account, region=region, rows=rows, now=now)
    except ProviderError as exc:
        logger.warning("sync of account %s in %s failed: %s", account_id, region, exc.kind)
        error = f"{exc.kind}: {exc.message}"
    except Exception as exc:  # a bug or a broken account: recorded, never spread
        logger.exception("sync of account %s in %s failed", account_id, region)
        error = type(exc).__name__
    finally:  # the result and the claim's release in one write (also after a BaseException)
        _record_region(claim, now=now, error=error)
    return changed


def _claim_region(
    account_id: int, region: str, now: datetime, *, tick: datetime | None = None
) -> RegionSync | None:
    """Claim one region's sync for PORTAL_SYNC_CLAIM_SECONDS (a conditional update: one
    delivery wins). A worker that dies mid-sync holds it at most that long.

    The beat's sync also claims the region's period, by the time its tick fired: when a
    tick less than PERIOD_CLAIM of a period before this one synced the region, it is left
    alone. Each beat sends its own tick every period, so with two beats (a second one by
    mistake, or one on each worker host) every region would otherwise be synced twice a
    period; now one beat's ticks sync and the other's find the period taken. The tick's
    time, not the task's: a task run late by a busy queue does not make the next tick's
    look early. Three quarters, not a half: two beats half a period apart would otherwise
    take turns, each tick just past the other's. A sync asked for outside the schedule
    (after a launch) claims no period."""
    row, _created = RegionSync.objects.get_or_create(account_id=account_id, region=region)
    until = now + timedelta(seconds=settings.PORTAL_SYNC_CLAIM_SECONDS)
    free = Q(claimed_until__isnull=True) | Q(claimed_until__lte=now)
    taken: dict[str, datetime] = {"claimed_until": until}
    if tick is not None:
        before = tick - timedelta(seconds=sync_period() * PERIOD_CLAIM)
        free &= Q(period_started_at__isnull=True) | Q(period_started_at__lte=before)
        taken["period_started_at"] = tick
    won = RegionSync.objects.filter(pk=row.pk).filter(free).update(**taken)
    if not won:
        return None
    row.claimed_until = until
    return row


def _record_region(claim: RegionSync, *, now: datetime, error: str) -> None:
    """This region's result (releasing its claim), and the account's: good only when
    none of its regions' last sync failed; its error names every failing region."""
    result = (
        {"sync_error": error[:1000], "sync_failed_at": now}
        if error
        else {"synced_at": now, "sync_error": ""}
    )
    RegionSync.objects.filter(pk=claim.pk, claimed_until=claim.claimed_until).update(
        claimed_until=None, **result
    )
    regions = list(
        RegionSync.objects.filter(account_id=claim.account_id).values_list(
            "region", "sync_error", "synced_at"
        )
    )
    failing = [(name, text) for name, text, _at in regions if text]
    account = ProviderAccount.objects.filter(pk=claim.account_id)
    if failing:
        message = "; ".join(f"{name}: {text}" for name, text in failing)
        account.update(sync_error=message[:1000], sync_failed_at=now)
    elif all(at is not None for _name, _text, at in regions):
        # The account's last good sync: when the last of its regions was last good.
        account.update(synced_at=min(at for _name, _text, at in regions), sync_error="")
    else:
        account.update(sync_error="")


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
    message = Phrase(
        gettext_noop(
            "Not running %(elapsed)s after the launch began (the provisioning timeout); "
            "what was started is terminated. Try again, or another GPU model or region."
        ),
        elapsed=duration(timeout),
    )
    for pk in list(overdue):
        fail_instance(instance_id=pk, message=message, now=now, code="provisioning_timeout")
    return len(overdue)


def sync_region(
    *, account: ProviderAccount, region: str, rows: list[SyncRow], now: datetime
) -> int:
    """One account and region: one describe by the installation's tag, the changes applied
    in one transaction, then one describe by id of the instances missing past the grace
    period before any of them is marked gone."""
    with collector_paused():
        provider = get_provider(account.config())
        cloud = provider.describe(region=region, tag_filter=installation_tags())
        changed, missing = apply_sync(rows=rows, cloud=cloud, now=now)
        if missing:
            asked, confirmed = _describe_missing(provider, account, missing, region=region)
            changed += apply_gone(rows=asked, cloud=confirmed, now=now)
        orphans.note_cloud_account(account=account, cloud=cloud)
        found = orphans.find_orphans(account=account, region=region, cloud=cloud, now=now)
        orphans.handle_orphans(
            provider=provider, account=account, region=region, orphans=found, cloud=cloud, now=now
        )
    return changed


@contextmanager
def collector_paused() -> Iterator[None]:
    """Python's cycle collector off for one region's sync, back on after it (unless it was
    off already). A region of 5,000 instances makes some 200,000 short-lived objects (the
    describe's XML elements and dicts, the rows read); each batch of them set off a
    collection, and the full ones walked the worker's whole heap (Django, botocore's EC2
    model): half of the tick's CPU, for no garbage, since these objects hold no cycles and
    are freed as soon as they are dropped. Any cyclic garbage made meanwhile is collected
    by the next collection after it (issue 19, ``bench/sync.py``)."""
    if not gc.isenabled():
        yield
        return
    gc.disable()
    try:
        yield
    finally:
        gc.enable()


def on_silent_hosts(account_id: int) -> Q:
    """The instances (of an own-server account) on its servers known not to answer
    (``OwnHost.unreachable_since`` set): the sync leaves them as they are, since a server
    that does not answer cannot say an instance is gone (their leases are at risk,
    ``rental.fleet.own_host_health``). One query."""
    silent = Q(pk__in=[])
    for name in OwnHost.objects.filter(
        account_id=account_id, unreachable_since__isnull=False
    ).values_list("name", flat=True):
        silent |= Q(zone=name) | Q(external_id__startswith=f"{name}/")
    return silent


def _describe_missing(
    provider: Provider, account: ProviderAccount, missing: list[SyncRow], *, region: str
) -> tuple[list[SyncRow], list[CloudInstance]]:
    """The describe by id of the rows missing past the grace period: the rows it answered
    for and what it found. A cloud answers for all of them in one call; own servers are
    asked one server at a time, and the rows of a server that does not answer (the
    driver raises ``transient`` rather than call them gone) are left as they are, so one
    server down never stops the sync of the others."""
    ids = [row.external_id for row in missing]
    if account.driver != OWN_DRIVER:
        return missing, provider.describe_ids(ids, region=region)
    by_host: dict[str, list[SyncRow]] = {}
    for row in missing:
        by_host.setdefault(row.zone, []).append(row)
    asked: list[SyncRow] = []
    found: list[CloudInstance] = []
    for host, rows in sorted(by_host.items()):
        try:
            found += provider.describe_ids([row.external_id for row in rows], region=region)
        except ProviderError as exc:
            if exc.kind != ProviderErrorKind.TRANSIENT:
                raise
            logger.warning("sync of account %s: server %s is not answering", account.pk, host)
            continue
        asked += rows
    return asked, found


# What the comparison with a describe answer reads of each row; the whole row (and its
# lease) is read only for the few the answer changes.
_COMPARED = ("pk", "external_id", "idempotency_key", "state", "missing_since")


@transaction.atomic
def apply_sync(
    *, rows: list[SyncRow], cloud: list[CloudInstance], now: datetime
) -> tuple[int, list[SyncRow]]:
    """Apply one describe taken after ``rows`` were read. Returns the instances changed
    and the rows missing from the cloud for longer than the grace period, which only a
    describe by id may mark gone (``apply_gone``).

    Every row is locked and compared as plain values; a model is built only for a row
    the answer acts on, so a steady fleet costs no model per instance."""
    by_id = {item.external_id: item for item in cloud}
    by_key = {item.idempotency_key: item for item in cloud if item.idempotency_key}
    read = {row.pk: row for row in rows}
    grace = timedelta(seconds=settings.PORTAL_SYNC_GRACE_SECONDS)
    changed = 0
    overdue: list[SyncRow] = []
    ended: dict[int, datetime] = {}
    newly_missing: list[int] = []
    seen_again: list[int] = []
    acted_on: dict[int, CloudInstance | None] = {}  # None: a launch the answer does not list
    lock_leases_of(read)  # the lock order: leases before their instances
    compared = (
        Instance.objects.select_for_update()
        .filter(AnyOf(F("pk"), read), state__in=Instance.LIVE)  # one array, not 5,000 %s
        .order_by()
        .values_list(*_COMPARED)
    )
    for pk, external_id, idempotency_key, state, missing_since in compared:
        row = read[pk]
        found = by_id.get(row.external_id) if row.external_id else by_key.get(idempotency_key)
        if found is None:
            if row.external_id and external_id == row.external_id:
                if missing_since is None:
                    newly_missing.append(pk)
                elif now - missing_since >= grace:
                    overdue.append(row)
            elif not row.external_id and not external_id:
                acted_on[pk] = None
            continue
        if missing_since is not None:
            seen_again.append(pk)
        if _cloud_state_acts(external_id=external_id, state=state, found=found):
            acted_on[pk] = found
    if acted_on:  # already locked above
        for instance in Instance.objects.filter(pk__in=list(acted_on)).select_related(
            "reservation"
        ):
            found = acted_on[instance.pk]
            if found is None:
                changed += _handle_unseen_launch(instance, now=now)
            else:
                changed += _apply_cloud_state(instance, found, now=now, ended=ended)
    if newly_missing:
        Instance.objects.filter(pk__in=newly_missing).update(missing_since=now)
    if seen_again:
        Instance.objects.filter(pk__in=seen_again).update(missing_since=None)
    mark_terminated_many(ended)
    return changed, overdue


def _cloud_state_acts(*, external_id: str, state: str, found: CloudInstance) -> bool:
    """Whether ``_apply_cloud_state`` would do anything for a row in ``state`` (with
    ``external_id``) that the describe lists as ``found``."""
    return (
        not external_id
        or found.state in (CloudState.SHUTTING_DOWN, CloudState.TERMINATED)
        or (found.state == CloudState.RUNNING and state == State.LAUNCHING)
        or state == State.STOPPING
    )


def _handle_unseen_launch(instance: Instance, *, now: datetime) -> int:
    """A row with no cloud id that the describe does not list by its key either."""
    if instance.state == State.STOPPING:
        _terminate_again(instance, now=now)  # it decides whether a launch is still in flight
        return 0
    if instance.state == State.LAUNCHING and not launch_may_be_in_flight(instance, now=now):
        instance.state = State.REQUESTED  # its worker died before reaching the cloud
        instance.save(update_fields=["state"])
        jobs.provision_on_commit([instance.pk])
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
        _terminate_again(instance, now=now)  # the terminate task may have been lost
    return changed


def _terminate_again(instance: Instance, *, now: datetime) -> None:
    """The sync's own resend of a termination that may have been lost: only once its
    last sending is stale (never a spot instance's before its notice ends)."""
    if recovery.termination_is_stale(instance, now=now):
        Instance.objects.filter(pk=instance.pk).update(terminate_sent_at=now)
        jobs.terminate_on_commit(instance.pk)


@transaction.atomic
def apply_gone(*, rows: list[SyncRow], cloud: list[CloudInstance], now: datetime) -> int:
    """Apply a describe by id of instances missing past the grace period: one the cloud
    does not know is gone (its usage closes when it was first missed: the cloud gives no
    time for an instance it forgot); one it lists is handled as any describe answer."""
    by_id = {item.external_id: item for item in cloud}
    read = {row.pk: row for row in rows}
    changed = 0
    ended: dict[int, datetime] = {}
    lock_leases_of(read)  # the lock order: leases before their instances
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
