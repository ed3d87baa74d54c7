"""R1 over a request's fields, before any lock: the duration, the GPU count against the
project's ceiling, the offering that carries it and the image it boots. Each break is a
field error naming the field, nothing written: ``InvalidInput`` (400) for a value no
request may hold, ``Conflict`` (409) for one that the site's settings, the catalog or the
project's quota refuse today."""

from dataclasses import dataclass
from decimal import Decimal, InvalidOperation

from django.conf import settings
from django.utils.translation import gettext as _

from portal.errors import Conflict, InvalidInput
from portal.models import Project
from rental import selectors
from rental.catalog.capabilities import boots_images
from rental.catalog.own_room import in_placement_order
from rental.loans.request_reads import RequestReads, read_for_request
from rental.models import GpuModel, Image, Market, Offering, Priority, Quota


def parse_hours(value: object, *, field: str = "duration_hours") -> Decimal:
    """``value`` as a number of hours a lease may last, or InvalidInput on ``field`` (a
    request's ``duration_hours``, an extension's ``hours``)."""
    try:
        hours = Decimal(str(value))
    except (InvalidOperation, ValueError):
        raise InvalidInput(_("Enter the duration in hours."), field=field) from None
    if not hours.is_finite() or hours <= 0:
        raise InvalidInput(_("The duration must be more than zero hours."), field=field)
    if hours > settings.PORTAL_MAX_LEASE_HOURS:
        raise Conflict(
            _("A lease may last at most %(max)s hours.") % {"max": settings.PORTAL_MAX_LEASE_HOURS},
            code="over_max_lease",
            field=field,
        )
    if lease_seconds(hours) < 1:
        # Time has one-second resolution: a shorter lease would end before it starts.
        raise Conflict(
            _("A lease lasts at least one second (%(h)s hours is less).") % {"h": hours},
            code="too_short",
            field=field,
        )
    return hours


def lease_seconds(hours: Decimal) -> int:
    return int(hours * 3600)


def cheapest_offering(
    *,
    gpu_model: GpuModel,
    gpu_count: int,
    market: str,
    candidates: list[Offering] | None = None,
) -> Offering:
    """The first offering that carries the GPUs in the pool's placement order (the
    cheapest, unless own servers have room or the admin listed accounts first), or
    InvalidInput on the GPU count; ``candidates``: the offerings selling the model, when
    the caller has read them."""
    if candidates is None:
        candidates = list(selectors.offerings_of(gpu_model))
    fitting = selectors.fitting(candidates, gpu_count=gpu_count, market=market)
    if not fitting:
        raise Conflict(
            _("No offering carries %(n)s× %(model)s on the %(market)s market.")
            % {"n": gpu_count, "model": gpu_model, "market": Market(market).label},
            code="no_offering",
            field="gpu_count",
        )
    # The pool's placement order (own servers with room first, by default), then price.
    return in_placement_order(fitting, gpu_count=gpu_count)[0]


def choose_offering(
    *,
    gpu_model: GpuModel,
    gpu_count: int,
    market: str,
    offering: Offering | None,
    candidates: list[Offering] | None = None,
) -> Offering:
    """The offering asked for, or the cheapest that fits; ``candidates``: the offerings
    selling the model, when the caller has read them already."""
    if candidates is None:
        candidates = list(selectors.offerings_of(gpu_model))
    if offering is None:
        return cheapest_offering(
            gpu_model=gpu_model, gpu_count=gpu_count, market=market, candidates=candidates
        )
    fitting = selectors.fitting(candidates, gpu_count=gpu_count, market=market)
    if offering not in fitting:
        raise Conflict(
            _("%(offering)s cannot carry %(n)s× %(model)s on the %(market)s market.")
            % {
                "offering": offering,
                "n": gpu_count,
                "model": gpu_model,
                "market": Market(market).label,
            },
            field="offering",
        )
    return offering


def image_on(images: list[Image], image: Image | None) -> Image | None:
    """Of ``images`` (those usable on one offering), ``image`` itself, else the one of its
    name; with no image asked, the first. None when there is none."""
    if image is None:
        return images[0] if images else None
    same = [usable for usable in images if usable.pk == image.pk]
    return (same or [usable for usable in images if usable.name == image.name] or [None])[0]


@dataclass(frozen=True)
class Validated:
    """A request that passed R1: what it runs on, for how long, under which quota."""

    offering: Offering
    image: Image | None  # None: an own server, and no cloud of the pool has an image
    hours: Decimal
    quota: Quota


def validate_request(
    *,
    project: Project,
    gpu_model: GpuModel,
    gpu_count: int,
    offering: Offering | None,
    duration_hours: object,
    priority: str,
    market: str,
    image: Image | None,
) -> tuple[Offering, Image | None, Decimal]:
    """Check a request's fields (R1); returns the offering, image and hours to use."""
    valid = validated(
        project=project,
        gpu_model=gpu_model,
        gpu_count=gpu_count,
        offering=offering,
        duration_hours=duration_hours,
        priority=priority,
        market=market,
        image=image,
    )
    return valid.offering, valid.image, valid.hours


def validated(
    *,
    project: Project,
    gpu_model: GpuModel,
    gpu_count: int,
    offering: Offering | None,
    duration_hours: object,
    priority: str,
    market: str,
    image: Image | None,
    reads: RequestReads | None = None,
) -> Validated:
    """R1 over the request's fields; ``reads``: its rows, when the caller has read them
    (``read_for_request``)."""
    if priority not in Priority.values:
        raise InvalidInput(_("Choose a priority."), field="priority")
    if market not in Market.values:
        raise InvalidInput(_("Choose on-demand or spot."), field="market")
    if not isinstance(gpu_count, int) or isinstance(gpu_count, bool) or gpu_count < 1:
        raise InvalidInput(_("Ask for at least one GPU."), field="gpu_count")
    hours = parse_hours(duration_hours)
    if reads is None:
        reads = read_for_request(actor=None, project=project, gpu_model=gpu_model)
    quota = reads.quota
    ceiling = quota.ceiling if quota else 0
    if quota is None or ceiling == 0:
        raise Conflict(
            _("%(project)s has no quota for %(model)s.") % {"project": project, "model": gpu_model},
            code="no_quota",
            field="gpu_model",
        )
    if gpu_count > ceiling:
        raise Conflict(
            _("At most %(ceiling)s GPUs: the project's ceiling for %(model)s.")
            % {"ceiling": ceiling, "model": gpu_model},
            code="over_ceiling",
            field="gpu_count",
            figures={"asked": gpu_count, "ceiling": ceiling},
        )
    chosen = choose_offering(
        gpu_model=gpu_model,
        gpu_count=gpu_count,
        market=market,
        offering=offering,
        candidates=reads.offerings,
    )
    fitting = selectors.fitting(reads.offerings, gpu_count=gpu_count, market=market)
    if offering is None and not _takes(reads, chosen, image):
        # The first in the pool's order cannot boot the image: the next that can (an own
        # server takes any image, a cloud needs the image of the same name there).
        ordered = in_placement_order(fitting, gpu_count=gpu_count)
        chosen = next((c for c in ordered if _takes(reads, c, image)), chosen)
    if not boots_images(chosen):
        # An own server runs its host's system: the lease keeps the image asked for (or
        # the default of the first cloud in the pool's order) for a failover to a cloud.
        if image is None:
            image = _first_cloud_image(reads, in_placement_order(fitting, gpu_count=gpu_count))
        return Validated(offering=chosen, image=image, hours=hours, quota=quota)
    images = reads.images_on(chosen)
    if image is None:
        if not images:
            raise Conflict(
                _("No image is available for %(offering)s.") % {"offering": chosen}, field="image"
            )
        image = images[0]
    else:
        # Placed by the portal: the image of that name where the lease is placed.
        found = image_on(images, image) if offering is None else None
        if found is not None:
            image = found
        elif image.pk not in {usable.pk for usable in images}:
            raise Conflict(
                _("This image cannot be used with %(offering)s.") % {"offering": chosen},
                field="image",
            )
    return Validated(offering=chosen, image=image, hours=hours, quota=quota)


def _takes(reads: RequestReads, offering: Offering, image: Image | None) -> bool:
    """Whether a lease asking for ``image`` may be placed on ``offering``."""
    return not boots_images(offering) or image_on(reads.images_on(offering), image) is not None


def _first_cloud_image(reads: RequestReads, ordered: list[Offering]) -> Image | None:
    for offering in ordered:
        images = reads.images_on(offering) if boots_images(offering) else []
        if images:
            return images[0]
    return None
