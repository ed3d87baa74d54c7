"""The launch's failover (L2) against the database: the places a launch may try, its
attempts as rows, aiming an instance row at a place, and the message a person reads
when it gives up. The decisions themselves are rental.fleet.failover's."""

from collections.abc import Iterable
from dataclasses import replace
from datetime import datetime
from typing import Any

from django.conf import settings
from django.utils import timezone
from django.utils.translation import gettext, gettext_noop, ngettext

from portal.phrases import Joined, Phrase, Text, duration, plural_noop
from rental import selectors
from rental.catalog import exchange
from rental.catalog.capabilities import boots_images
from rental.catalog.images import conflict_message
from rental.catalog.own_room import OwnRoom, is_own, own_room, pool_order
from rental.catalog.placement_rules import OWN_DRIVER, PlacementOrder
from rental.fleet.failover import (
    Attempt,
    GiveUp,
    OfferingView,
    Place,
    Policy,
    failure_summary,
    places_in_order,
)
from rental.models import (
    Image,
    Instance,
    LaunchAttempt,
    Market,
    Offering,
    Pool,
    Reservation,
)
from rental.providers.base import ProviderErrorKind


def launch_policy() -> Policy:
    return Policy(
        max_attempts=settings.PORTAL_LAUNCH_MAX_ATTEMPTS,
        timeout_seconds=settings.PORTAL_PROVISIONING_TIMEOUT_SECONDS,
    )


def image_for(lease: Reservation, offering: Offering) -> Image | None:
    """The lease's image where ``offering`` runs: itself in its own account and region,
    elsewhere the active image of the same name there; None where the offering's driver
    boots no images (an own server runs its host's system, whatever the lease's image)."""
    image = lease.image
    if image is None or not boots_images(offering):
        return None
    if (image.account_id, image.region) == (offering.account_id, offering.region):
        return image
    return (
        Image.objects.filter(
            account_id=offering.account_id,
            region=offering.region,
            name=image.name,
            is_active=True,
            state=Image.State.AVAILABLE,
        )
        .order_by("pk")
        .first()
    )


def _driver_runs_image(image: Image | None, offering: Offering) -> bool:
    """Failover never moves a lease to hosts whose driver cannot run its image's CUDA."""
    return not conflict_message(image, offering)


def _view(offering: Offering, market: str, room: OwnRoom) -> OfferingView:
    own = is_own(offering)
    zones = tuple(offering.zones or ())
    hosts = room.hosts(offering.account_id) if own else {}
    return OfferingView(
        offering_id=offering.pk,
        account_id=offering.account_id,
        region=offering.region,
        instance_type=offering.instance_type,
        zones=zones,
        rate=offering.rate_per_gpu_hour(market),
        own=own,
        free=tuple(hosts.get(zone, 0) for zone in zones) if own else (),
    )


def launch_places(instance: Instance) -> list[Place]:
    """Every place this instance's launch may try, in order (L2)."""
    lease = instance.reservation
    chosen = lease.offering or instance.offering
    others = [
        offering
        for offering in Offering.objects.filter(
            gpu_model_id=lease.gpu_model_id,
            gpus_per_instance=chosen.gpus_per_instance,
            is_available=True,
            account__is_active=True,
        )
        .exclude(pk=chosen.pk)
        .select_related("account")
        if offering.price_per_hour(instance.market) is not None
        and exchange.can_price(offering.currency, timezone.now())
        and (
            lease.image is None
            or not boots_images(offering)
            or image_for(lease, offering) is not None
        )
        and _driver_runs_image(lease.image, offering)
    ]
    everyone = [chosen, *others]
    # The pool's order and the own servers' room matter only where there is a choice
    # between accounts, or own servers: read only then.
    several = len({offering.account_id for offering in everyone}) > 1
    order = pool_order(lease.gpu_model_id) if several else PlacementOrder()
    room = (
        own_room(lease.gpu_model_id, leaving_out=instance.pk)
        if any(is_own(offering) for offering in everyone)
        else OwnRoom()
    )
    places = places_in_order(
        chosen=_view(chosen, instance.market, room),
        others=[_view(offering, instance.market, room) for offering in others],
        allow_other_types=lease.allow_other_instance_types,
        order=order,
        gpus=chosen.gpus_per_instance,
    )
    return places_for_volume(lease, places)  # a data volume pins the zone


def places_for_volume(lease: Reservation, places: list[Place]) -> list[Place]:
    """L2's places narrowed to the lease's volume: only its account, region and zone (a
    place where the cloud chooses the zone is told the volume's)."""
    volume = lease.data_volume
    if volume is None:
        return places
    narrowed: list[Place] = []
    for place in places:
        if (place.account_id, place.region) != (volume.account_id, volume.region):
            continue
        if place.zone not in ("", volume.zone):
            continue
        aimed = replace(place, zone=volume.zone)
        if aimed not in narrowed:
            narrowed.append(aimed)
    return narrowed


def attempts_of(instance_id: int) -> list[Attempt]:
    return [
        Attempt(
            place=Place(row.offering_id, row.account_id, row.region, row.instance_type, row.zone),
            kind=row.kind,
            at=row.at,
        )
        for row in LaunchAttempt.objects.filter(instance_id=instance_id).order_by("at", "pk")
    ]


def record_attempt(
    instance: Instance, place: Place, *, kind: str, message: str, at: datetime
) -> None:
    LaunchAttempt.objects.create(
        instance=instance,
        offering_id=place.offering_id,
        account_id=place.account_id,
        region=place.region,
        zone=place.zone,
        instance_type=place.instance_type,
        kind=kind,
        message=message[:500],
        at=at,
    )


def aim(instance: Instance, place: Place, *, now: datetime) -> None:
    """Point the row at ``place`` before its launch: offering, account, region, zone, the
    rate captured at launch (B1) and, for an offering priced in another currency, the
    exchange rate in force now (rental.catalog.exchange) follow the place. Raises
    InvalidInput naming the currency when no rate for it is in force."""
    if (instance.offering_id, instance.account_id, instance.zone) == (
        place.offering_id,
        place.account_id,
        place.zone,
    ):
        exchange.capture(instance, instance.offering, at=now)
        instance.save(update_fields=exchange.CAPTURED_FIELDS)
        return
    offering = Offering.objects.select_related("account").get(pk=place.offering_id)
    instance.offering = offering
    instance.account = offering.account
    instance.region = offering.region
    instance.zone = place.zone
    instance.rate_per_hour = selectors.rate_for(offering, instance.market) * instance.gpu_count
    exchange.capture(instance, offering, at=now)
    instance.root_disk_gb = offering.root_disk_gb
    instance.save(
        update_fields=[
            "offering",
            "account",
            "region",
            "zone",
            "rate_per_hour",
            "root_disk_gb",
            *exchange.CAPTURED_FIELDS,
        ]
    )


def failure_message(
    instance: Instance,
    attempts: list[Attempt],
    decision: GiveUp,
    *,
    last_message: Text,
    now: datetime,
) -> Text:
    """What a person can act on: what was tried, for how long, and what to try instead."""
    lease = instance.reservation
    if decision.reason == "permanent":
        return Phrase(
            gettext_noop("The cloud refused the launch: %(message)s"), message=last_message
        )
    started_at = instance.provisioning_since or lease.start
    summary = failure_summary(attempts=attempts, started_at=started_at, now=now)
    # The counts in words, each singular or plural in the reader's language.
    figures: dict[str, Any] = {
        "model": lease.gpu_model.name,
        "tries": Phrase(plural_noop("%(n)s try", "%(n)s tries"), n=summary["tries"]),
        "elapsed": duration(summary["seconds"]),
    }
    if summary["kind"] == "quota":
        tried = gettext_noop(
            "The cloud accounts' quota for %(model)s is reached in %(places)s after "
            "%(tries)s over %(elapsed)s"
        )
        figures["places"] = Phrase(
            plural_noop("%(n)s region or account", "%(n)s regions or accounts"),
            n=summary["places"],
        )
    elif summary["kind"] == "capacity":
        tried = gettext_noop(
            "No %(model)s capacity in %(zones)s and %(types)s after %(tries)s over %(elapsed)s"
        )
        figures["zones"] = Phrase(plural_noop("%(n)s zone", "%(n)s zones"), n=summary["zones"])
        figures["types"] = Phrase(
            plural_noop("%(n)s instance type", "%(n)s instance types"), n=summary["types"]
        )
    else:
        tried = gettext_noop(
            "The cloud kept failing (%(kind)s) for %(model)s after %(tries)s over %(elapsed)s"
        )
        figures["kind"] = summary["kind"]
    message: Text = Phrase(tried, **figures)
    if decision.reason == "timeout":
        message = Phrase(
            gettext_noop("Not running within the provisioning timeout. %(tried)s"), tried=message
        )
    # Translators: what was tried, then what to try instead.
    return Phrase(
        gettext_noop("%(tried)s; %(suggestion)s"), tried=message, suggestion=suggestion(lease)
    )


def suggestion(lease: Reservation) -> Text:
    """What to ask for instead: spot (for an on-demand lease) and GPU models whose pool
    has room for this many GPUs now."""
    choices: list[Text] = []
    if lease.market == Market.ON_DEMAND:
        choices.append(Phrase(gettext_noop("spot")))
    for pool in Pool.objects.exclude(gpu_model_id=lease.gpu_model_id).select_related("gpu_model"):
        if pool.capacity - selectors.pool_running_gpus(pool.gpu_model_id) >= lease.gpu_count:
            choices.append(pool.gpu_model.name)
    if not choices:
        return Phrase(gettext_noop("try fewer GPUs or a later start."))
    return Phrase(
        gettext_noop("try %(choices)s, which have room, or fewer GPUs."),
        choices=Joined(choices[:3], Phrase(gettext_noop(" or "))),
    )


def describe_attempts(instances: Iterable[Instance]) -> None:
    """Give each prefetched launch attempt (its account loaded) ``answer``: how an own
    server answered, in the reader's words ("own server gpu-box-1: no 2 free GPUs"); an
    empty one for a cloud's, which the page shows as the cloud said it."""
    for instance in instances:
        for attempt in instance.attempts.all():
            attempt.answer = _own_answer(attempt, gpus=instance.gpu_count)


def _own_answer(attempt: LaunchAttempt, *, gpus: int) -> str:
    if attempt.account.driver != OWN_DRIVER:
        return ""
    host = attempt.zone or attempt.account.name
    if not attempt.kind:
        return gettext("own server %(host)s: launched") % {"host": host}
    if attempt.kind == ProviderErrorKind.CAPACITY:
        return ngettext(
            "own server %(host)s: no %(n)s free GPU",
            "own server %(host)s: no %(n)s free GPUs",
            gpus,
        ) % {"host": host, "n": gpus}
    return gettext("own server %(host)s: %(kind)s, %(message)s") % {
        "host": host,
        "kind": attempt.kind,
        "message": attempt.message or "—",
    }
