"""L4: instances in the cloud that carry this installation's tag but that no live row
stands for. Each sync records them from the describe it already made (no extra call);
a second sync that still sees one handles it by site policy (PORTAL_ORPHAN_POLICY):
report to admins, terminate (one call per account and region), or adopt into a lease of
the project its tags name."""

import logging
from datetime import datetime, timedelta

from django.conf import settings
from django.contrib.auth import get_user_model
from django.db import transaction
from django.db.models import F, Q
from django.urls import reverse
from django.utils.translation import gettext as _
from django.utils.translation import gettext_noop

from portal import audit
from portal.models import Project
from portal.notifications import admins, notify
from portal.phrases import Joined, Phrase
from portal.sql_arrays import AnyOf
from rental.catalog import accounts, exchange
from rental.fleet.instances import mark_running
from rental.fleet.termination import tell_admins_still_billing
from rental.models import (
    Instance,
    Offering,
    Orphan,
    Priority,
    ProviderAccount,
    Reservation,
    Tier,
)
from rental.providers.base import (
    TAG_PROJECT,
    TAG_REQUESTER,
    CloudInstance,
    CloudState,
    Provider,
    ProviderError,
)

logger = logging.getLogger(__name__)
ENDED = (Instance.State.TERMINATED, Instance.State.FAILED)
GONE = (CloudState.TERMINATED, CloudState.SHUTTING_DOWN)


def find_orphans(
    *, account: ProviderAccount, region: str, cloud: list[CloudInstance], now: datetime
) -> list[Orphan]:
    """Record the orphans in one describe answer (bulk) and close those no longer running.
    An instance is an orphan only when no account of this installation stands for it (two
    accounts may reach one cloud account, and each describe lists the other's instances)
    and it is not being terminated: one whose row ended less than the orphan grace period
    ago is the termination on its way, seen by a describe taken before it. Returns the
    open ones first seen at least the grace period ago: those to handle now."""
    grace = timedelta(seconds=settings.PORTAL_ORPHAN_GRACE_SECONDS)
    running = [item for item in cloud if item.state not in GONE]
    ids = [item.external_id for item in running]
    keys = [item.idempotency_key for item in running if item.idempotency_key]
    # The ids and keys as two array parameters (a region's answer lists thousands).
    match = Q()
    if ids:
        match |= Q(AnyOf(F("external_id"), ids))
    if keys:
        match |= Q(AnyOf(F("idempotency_key"), keys))
    rows = Instance.objects.filter(match) if match else Instance.objects.none()
    alive_ids, alive_keys, ended_by_id = set(), set(), {}
    for pk, external_id, key, state, terminated_at in rows.values_list(
        "pk", "external_id", "idempotency_key", "state", "terminated_at"
    ):
        being_terminated = (
            state in ENDED and terminated_at is not None and now - terminated_at < grace
        )
        if state in ENDED and not being_terminated:
            if external_id:
                ended_by_id[external_id] = pk
        else:
            alive_ids.add(external_id)
            alive_keys.add(key)
    orphans = [
        item
        for item in running
        if item.external_id not in alive_ids and item.idempotency_key not in alive_keys
    ]
    seen = {item.external_id for item in orphans}
    with transaction.atomic():
        open_ = dict(
            Orphan.objects.select_for_update()
            .filter(account=account, region=region)
            .exclude(status__in=(Orphan.Status.TERMINATED, Orphan.Status.ADOPTED))
            .values_list("external_id", "pk")
        )
        over = [pk for external_id, pk in open_.items() if external_id not in seen]
        if over:  # the cloud no longer runs them
            Orphan.objects.filter(pk__in=over).update(
                status=Orphan.Status.TERMINATED, last_seen_at=now
            )
        if not seen:
            return []
        existing = set(
            Orphan.objects.filter(account=account, external_id__in=seen).values_list(
                "external_id", flat=True
            )
        )
        Orphan.objects.filter(account=account, external_id__in=existing).update(last_seen_at=now)
        prices = _prices(account, region)
        Orphan.objects.bulk_create(
            Orphan(
                account=account,
                region=region,
                external_id=item.external_id,
                instance_type=item.instance_type,
                cloud_state=item.state.value,
                tags=dict(item.tags),
                launched_at=item.launched_at,
                hourly_cost=prices.get((item.instance_type, item.market)),
                known_instance_id=ended_by_id.get(item.external_id),
                first_seen_at=now,
                last_seen_at=now,
            )
            for item in orphans
            if item.external_id not in existing
        )
    return list(
        Orphan.objects.filter(
            account=account,
            region=region,
            external_id__in=seen,
            first_seen_at__lte=now - grace,
            status__in=(Orphan.Status.OPEN, Orphan.Status.TERMINATING, Orphan.Status.STUCK),
        )
    )


def note_cloud_account(*, account: ProviderAccount, cloud: list[CloudInstance]) -> None:
    """Record which cloud account ``account`` reaches (the owner of the instances one
    describe lists). When it is found, or changes, and another account of this
    installation reaches the same one, admins are told once: each account's sync lists
    the other's instances (never orphans, see ``find_orphans``), and two accounts for one
    cloud account is usually a mistake in the catalog."""
    owners = {item.owner_id for item in cloud if item.owner_id}
    if len(owners) != 1:
        return  # nothing listed, or an endpoint that names no owner
    (owner,) = owners
    if owner == account.cloud_account_id:
        return
    with transaction.atomic():
        changed = ProviderAccount.objects.filter(pk=account.pk).exclude(cloud_account_id=owner)
        if not changed.update(cloud_account_id=owner):
            return  # another region's sync of this account recorded it first
        account.cloud_account_id = owner
        others = accounts.shared_cloud_account(account)
        if not others:
            return
        logger.warning(
            "accounts %s and %s reach the same cloud account", account.name, ", ".join(others)
        )
        notify(
            admins(),
            subject=Phrase(
                gettext_noop("Accounts %(account)s and %(others)s reach the same cloud account"),
                account=account.name,
                others=", ".join(others),
            ),
            body=Phrase(
                gettext_noop(
                    "The provider accounts %(account)s and %(others)s both reach cloud account "
                    "%(id)s, so each sync lists the other's instances. The portal never takes "
                    "them for orphans, but one cloud account is usually meant to have one "
                    "provider account here: deactivate the one that is not needed."
                ),
                account=account.name,
                others=", ".join(others),
                id=owner,
            ),
            link=reverse("admin:rental_provideraccount_change", args=[account.pk]),
        )


def _prices(account: ProviderAccount, region: str) -> dict[tuple[str, str], object]:
    prices = {}
    for offering in Offering.objects.filter(account=account, region=region):
        for market in ("on_demand", "spot"):
            price = offering.price_per_hour(market)
            if price is not None:
                prices[(offering.instance_type, market)] = price
    return prices


def handle_orphans(
    *,
    provider: Provider,
    account: ProviderAccount,
    region: str,
    orphans: list[Orphan],
    cloud: list[CloudInstance],
    now: datetime,
) -> None:
    """Apply the site's policy to orphans seen by two syncs at least the orphan grace
    period apart."""
    if not orphans:
        return
    policy = settings.PORTAL_ORPHAN_POLICY
    by_id = {item.external_id: item for item in cloud}
    to_report = [orphan for orphan in orphans if orphan.reported_at is None]
    if policy == "adopt":
        for orphan in orphans:
            if orphan.status == Orphan.Status.OPEN and by_id.get(orphan.external_id):
                adopt_orphan(orphan=orphan, cloud=by_id[orphan.external_id], now=now)
    elif policy == "terminate":
        terminate_orphans(provider=provider, region=region, orphans=orphans, now=now)
    report_orphans(account=account, orphans=to_report, now=now)


# An orphan's status in a sentence (the same words as its choices).
ORPHAN_STATUS_WORDS = {
    Orphan.Status.OPEN: gettext_noop("Reported"),
    Orphan.Status.TERMINATING: gettext_noop("Terminating"),
    Orphan.Status.TERMINATED: gettext_noop("Terminated"),
    Orphan.Status.ADOPTED: gettext_noop("Adopted into a lease"),
    Orphan.Status.STUCK: gettext_noop("Termination keeps failing"),
}


def report_orphans(*, account: ProviderAccount, orphans: list[Orphan], now: datetime) -> None:
    if not orphans:
        return
    statuses = dict(
        Orphan.objects.filter(pk__in=[o.pk for o in orphans]).values_list("pk", "status")
    )
    lines = [
        Phrase(
            gettext_noop(
                "%(id)s (%(type)s, %(region)s), launched %(launched)s, about %(cost)s an hour: "
                "%(what)s"
            ),
            id=orphan.external_id,
            type=orphan.instance_type or "?",
            region=orphan.region,
            launched=Phrase(gettext_noop("%(at)s UTC"), at=orphan.launched_at)
            if orphan.launched_at
            else "?",
            cost=orphan.hourly_cost if orphan.hourly_cost is not None else "?",
            what=Phrase(ORPHAN_STATUS_WORDS[statuses[orphan.pk]])
            if statuses.get(orphan.pk) in ORPHAN_STATUS_WORDS
            else statuses.get(orphan.pk, ""),
        )
        for orphan in orphans
    ]
    with transaction.atomic():
        notify(
            admins(),
            subject=Phrase(
                gettext_noop("%(n)s orphan instance(s) in %(account)s"),
                n=len(orphans),
                account=account.name,
            ),
            body=Joined(lines, "\n"),
            link="/admin/rental/orphan/",
        )
        Orphan.objects.filter(pk__in=[o.pk for o in orphans]).update(reported_at=now)


def terminate_orphans(
    *, provider: Provider, region: str, orphans: list[Orphan], now: datetime
) -> None:
    """One terminate call for all of them; a failure counts against each, and after
    PORTAL_TERMINATE_MAX_ATTEMPTS admins are told they may still be billing."""
    pks = [orphan.pk for orphan in orphans]
    try:
        provider.terminate([orphan.external_id for orphan in orphans], region=region)
    except ProviderError as exc:
        stuck = []
        for orphan in orphans:
            orphan.terminate_failures += 1
            orphan.last_error = exc.message[:500]
            if (
                orphan.terminate_failures >= settings.PORTAL_TERMINATE_MAX_ATTEMPTS
                and orphan.status != Orphan.Status.STUCK
            ):
                orphan.status = Orphan.Status.STUCK
                stuck.append(orphan)
        Orphan.objects.bulk_update(orphans, ["terminate_failures", "last_error", "status"])
        for orphan in stuck:
            tell_admins_still_billing(
                external_id=orphan.external_id,
                account=orphan.account,
                region=orphan.region,
                failures=orphan.terminate_failures,
                error=exc.message,
            )
        return
    Orphan.objects.filter(pk__in=pks).update(status=Orphan.Status.TERMINATING, last_error="")
    for orphan in orphans:
        orphan.status = Orphan.Status.TERMINATING
        audit.record(
            actor=None,
            verb="orphan.terminated",
            obj=orphan,
            source="worker",
            at=now,
            after={"external_id": orphan.external_id},
        )


@transaction.atomic
def adopt_orphan(*, orphan: Orphan, cloud: CloudInstance, now: datetime) -> Reservation | None:
    """Adopt a running orphan into a new lease of the project its tags name, billed from
    now. Reported instead (None) when that project or an offering of its type is unknown.
    An adopted lease skips admission: its GPUs already run."""
    project = Project.objects.filter(slug=cloud.tag(TAG_PROJECT), is_active=True).first()
    offering = (
        Offering.objects.filter(
            account=orphan.account, region=orphan.region, instance_type=cloud.instance_type
        )
        .select_related("gpu_model")
        .first()
    )
    requester = get_user_model().objects.filter(
        username=cloud.tag(TAG_REQUESTER), is_active=True
    ).first() or next(iter(admins()), None)
    if project is None or offering is None or requester is None:
        return None
    rate = offering.price_per_hour(cloud.market) or offering.on_demand_price_per_hour
    lease = Reservation.objects.create(
        project=project,
        requester=requester,
        gpu_model=offering.gpu_model,
        gpu_count=offering.gpus_per_instance,
        offering=offering,
        instance_count=1,
        market=cloud.market,
        priority=Priority.EXPERIMENT,
        purpose=_("Adopted from orphan %(id)s") % {"id": orphan.external_id},
        start=now,
        end=now + timedelta(hours=settings.PORTAL_ADOPTED_LEASE_HOURS),
        submitted_at=now,
        status=Reservation.Status.PROVISIONING,
        tier=Tier.SPOT if cloud.market == "spot" else Tier.BURST,
        status_code="adopted",
    )
    instance = Instance.objects.create(
        reservation=lease,
        account=orphan.account,
        offering=offering,
        region=orphan.region,
        zone=cloud.zone,
        external_id=cloud.external_id,
        state=Instance.State.LAUNCHING,
        market=cloud.market,
        gpu_count=offering.gpus_per_instance,
        rate_per_hour=rate,
        launched_at=cloud.launched_at or now,
        tags=dict(cloud.tags),
        claimed_at=now,
    )
    exchange.capture(instance, offering, at=now)  # adopted: captured as at a launch
    instance.save(update_fields=exchange.CAPTURED_FIELDS)
    mark_running(instance, cloud, now=now)
    Orphan.objects.filter(pk=orphan.pk).update(status=Orphan.Status.ADOPTED, adopted_into=lease)
    audit.record(
        actor=None,
        verb="orphan.adopted",
        obj=lease,
        project=project.pk,
        source="worker",
        at=now,
        after={"external_id": cloud.external_id},
    )
    return lease
