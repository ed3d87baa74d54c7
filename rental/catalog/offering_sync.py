"""An account's offerings kept in step with the GPUs a driver found (own servers' hosts,
a Kubernetes cluster's nodes): the caller says which offerings it wants, this writes them.

One offering per wanted instance type, in one region, among the account's offerings whose
instance type starts with the driver's prefix ("own-", "k8s-"): created, updated or made
unavailable; one no longer wanted is deleted unless a lease or an instance refers to it
(then it stays, unavailable and without zones). Offerings with other names (an admin's
own) are never touched. Idempotent: the same wanted offerings a second time change
nothing.
"""

import logging
from dataclasses import dataclass
from datetime import datetime
from decimal import Decimal
from typing import Any

from django.db import transaction
from django.db.models import Q

from rental.models import Instance, Offering, ProviderAccount, Reservation

logger = logging.getLogger(__name__)
INSTANCE_TYPE_LENGTH = Offering._meta.get_field("instance_type").max_length


@dataclass(frozen=True)
class WantedOffering:
    """One offering as the GPUs found call for it. ``zones``: where it can run now (none:
    unavailable). ``price``: the instance-hour price the caller sets, or None where an
    admin sets it: a new offering then starts at 0 and the one on the row is kept, and it
    is available only once that price is above 0. ``vcpus``/``memory_gib``: None keeps
    the row's (a new row: 0). ``currency``: None keeps the row's (a new row: USD)."""

    instance_type: str
    gpu_model_id: int
    gpus_per_instance: int
    zones: tuple[str, ...]
    price: Decimal | None = None
    currency: str | None = None
    vcpus: int | None = None
    memory_gib: int | None = None


def _values(wanted: WantedOffering, offering: Offering | None) -> dict[str, Any]:
    """The columns ``wanted`` sets on ``offering`` (None: a new row)."""
    values: dict[str, Any] = {
        "gpu_model_id": wanted.gpu_model_id,
        "gpus_per_instance": wanted.gpus_per_instance,
        "zones": list(wanted.zones),
    }
    if wanted.price is not None:
        values["on_demand_price_per_hour"] = wanted.price
        values["spot_price_per_hour"] = None
        values["is_available"] = bool(wanted.zones)
    else:
        price = offering.on_demand_price_per_hour if offering else Decimal("0")
        values["is_available"] = bool(wanted.zones) and price > 0
    for field in ("currency", "vcpus", "memory_gib"):
        if getattr(wanted, field) is not None:
            values[field] = getattr(wanted, field)
    return values


def sync_offerings(
    *,
    account: ProviderAccount,
    region: str,
    prefix: str,
    wanted: list[WantedOffering],
    now: datetime,
) -> int:
    """The account's ``prefix`` offerings in ``region`` made to match ``wanted`` (see the
    module's docstring), in one transaction with the rows locked. An instance type longer
    than the column is logged and left out, never cut (drivers launch by that name).
    Returns the offerings created, changed or deleted."""
    changed = 0
    with transaction.atomic():
        existing = {
            offering.instance_type: offering
            for offering in Offering.objects.select_for_update().filter(
                account=account, region=region, instance_type__startswith=prefix
            )
        }
        kept = set()
        for item in sorted(wanted, key=lambda each: each.instance_type):
            if len(item.instance_type) > INSTANCE_TYPE_LENGTH:
                logger.warning("offering %s is too long to keep", item.instance_type)
                continue
            kept.add(item.instance_type)
            offering = existing.get(item.instance_type)
            values = _values(item, offering)
            if offering is None:
                defaults = {
                    "vcpus": 0,
                    "memory_gib": 0,
                    "on_demand_price_per_hour": Decimal("0"),
                    "spot_price_per_hour": None,
                }
                Offering.objects.create(
                    account=account,
                    region=region,
                    instance_type=item.instance_type,
                    root_disk_gb=0,
                    storage_price_per_gb_month=Decimal("0"),
                    price_updated_at=now.date(),
                    **(defaults | values),
                )
                changed += 1
            elif any(getattr(offering, field) != value for field, value in values.items()):
                priced = values.get("on_demand_price_per_hour", offering.on_demand_price_per_hour)
                if priced != offering.on_demand_price_per_hour:
                    offering.price_updated_at = now.date()
                for field, value in values.items():
                    setattr(offering, field, value)
                offering.save()
                changed += 1
        gone = [offering for name, offering in existing.items() if name not in kept]
        changed += _retire(gone)
    return changed


def _retire(offerings: list[Offering]) -> int:
    """Offerings no longer wanted: deleted, or unavailable where a lease or an instance
    refers to them."""
    if not offerings:
        return 0
    ids = [offering.pk for offering in offerings]
    used = set(
        Reservation.objects.filter(offering_id__in=ids).values_list("offering_id", flat=True)
    ) | set(Instance.objects.filter(offering_id__in=ids).values_list("offering_id", flat=True))
    Offering.objects.filter(pk__in=set(ids) - used).delete()
    stale = Offering.objects.filter(pk__in=used).filter(Q(is_available=True) | ~Q(zones=[]))
    return len(set(ids) - used) + stale.update(is_available=False, zones=[])
