"""What the portal offers on an offering, an account or a lease: only what its drivers can
do (stop and start, data volumes, saved images, the spot market).

Every answer reads the registry's static table (``rental.providers.registry``), never a
driver's module or its SDK, so a page learns it from rows it has already loaded. A
refusal is a 400 naming the rule in words, raised before anything is written.
"""

from collections.abc import Iterable

from django.db.models import Q
from django.utils.translation import gettext as _
from django.utils.translation import gettext_noop

from portal.errors import InvalidInput
from rental.models import Instance, Offering, ProviderAccount, Reservation
from rental.providers.base import Capability
from rental.providers.registry import DRIVERS, capabilities
from rental.providers.registry import boots_images as driver_boots_images

# What a lease cannot have done on a driver without the capability, in words.
_REFUSALS = {
    Capability.STOP_START: gettext_noop("This lease runs on %(place)s, which cannot be stopped."),
    Capability.IMAGES: gettext_noop(
        "This lease runs on %(place)s, which cannot save an instance as an image."
    ),
    Capability.VOLUMES: gettext_noop("This lease runs on %(place)s, which has no data volumes."),
    Capability.SPOT: gettext_noop("This lease runs on %(place)s, which has no spot market."),
}


def can(subject: Offering | ProviderAccount, capability: Capability) -> bool:
    """Whether the driver of ``subject`` (an offering, whose account the caller loaded,
    or an account) can do ``capability``."""
    account = subject if isinstance(subject, ProviderAccount) else subject.account
    return capability in capabilities(account.driver)


def boots_images(offering: Offering) -> bool:
    """Whether a lease on ``offering`` boots its image there (its account loaded). One
    whose driver boots none (an own server: the registry's ``boots_images``) runs its
    host's own system: it takes a lease whatever its image, which is not used there."""
    return driver_boots_images(offering.account.driver)


def runs_own_system(lease: Reservation, instances: Iterable[Instance]) -> bool:
    """Whether the lease runs on its server's own system rather than its image: where it
    runs now (its newest instance that did not fail, else its offering; accounts loaded)
    boots no images. Reads nothing."""
    placed = [instance for instance in instances if instance.state != Instance.State.FAILED]
    if placed:
        account = max(placed, key=lambda instance: instance.pk).account
    elif lease.offering_id is not None:
        account = lease.offering.account
    else:
        return False
    return not driver_boots_images(account.driver)


def drivers_that_can(capability: Capability) -> list[str]:
    """The names of the drivers that can do ``capability``, for a query's filter
    (``account__driver__in=``)."""
    return [name for name, entry in DRIVERS.items() if capability in entry.capabilities]


def lease_drivers(lease: Reservation, instances: Iterable[Instance] | None = None) -> list[str]:
    """The drivers a lease runs on: its offering's and its instances' accounts'. Given
    ``instances`` (with their accounts loaded) and the lease's offering with its account,
    it reads nothing; otherwise one query."""
    if instances is None:
        found = (
            ProviderAccount.objects.filter(
                Q(instances__reservation=lease.pk) | Q(offerings__reservations=lease.pk)
            )
            .values_list("driver", flat=True)
            .distinct()
        )
        return sorted(found)
    drivers = {instance.account.driver for instance in instances}
    if lease.offering_id is not None:
        drivers.add(lease.offering.account.driver)
    return sorted(drivers)


def lease_can(
    lease: Reservation, capability: Capability, instances: Iterable[Instance] | None = None
) -> bool:
    """Whether every driver the lease runs on can do ``capability`` (``lease_drivers``);
    a lease placed nowhere yet can do nothing."""
    drivers = lease_drivers(lease, instances)
    return bool(drivers) and all(capability in capabilities(name) for name in drivers)


def check_lease_can(lease: Reservation, capability: Capability) -> None:
    """Refuse (400, code ``not_supported``) what a driver the lease runs on cannot do,
    naming that driver's kind of place; one query. A lease placed nowhere yet passes (its
    status decides)."""
    lacking = [name for name in lease_drivers(lease) if capability not in capabilities(name)]
    if not lacking:
        return
    entry = DRIVERS.get(lacking[0])
    place = entry.place if entry else lacking[0]
    raise InvalidInput(_(_REFUSALS[capability]) % {"place": place}, code="not_supported")
