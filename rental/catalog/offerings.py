"""The terms an offering is sold on, as an admin sets them: its prices per hour and
whether it is sold at all.

A price changes what the next launch captures and what estimates show; an instance
already running keeps the rate it captured at launch (B2), so no bill of the past moves.
"""

from datetime import datetime
from decimal import Decimal
from typing import Any

from django.db import transaction
from django.utils import timezone
from django.utils.translation import gettext as _

from portal import access, audit
from portal.errors import InvalidInput, NotPermitted
from portal.numbers import decimal_number
from rental.models import Offering

# The price columns: 12 digits with six decimals.
PRICE_PLACES = 6
PRICE_BELOW = Decimal(10) ** 6
TERMS = ("on_demand_price_per_hour", "spot_price_per_hour", "is_available")


def check_terms(offering: Offering, **asked: Any) -> dict[str, Any]:
    """The terms ``asked`` (raw; a name left out keeps its value) cleaned: the on-demand
    price a number within its column, the spot price one too or empty (not sold on spot),
    the available flag a boolean. Raises InvalidInput naming the field at fault; returns
    every term's new value."""
    unknown = set(asked) - set(TERMS)
    if unknown:
        raise ValueError(f"not offering terms: {sorted(unknown)}")
    values = {name: getattr(offering, name) for name in TERMS}
    if "on_demand_price_per_hour" in asked:
        values["on_demand_price_per_hour"] = decimal_number(
            asked["on_demand_price_per_hour"],
            field="on_demand_price_per_hour",
            places=PRICE_PLACES,
            below=PRICE_BELOW,
        )
    if "spot_price_per_hour" in asked:
        spot = asked["spot_price_per_hour"]
        values["spot_price_per_hour"] = (
            None
            if spot is None or str(spot).strip() == ""
            else decimal_number(
                spot, field="spot_price_per_hour", places=PRICE_PLACES, below=PRICE_BELOW
            )
        )
    if "is_available" in asked:
        if not isinstance(asked["is_available"], bool):
            raise InvalidInput(_("Say whether the offering is sold."), field="is_available")
        values["is_available"] = asked["is_available"]
    return values


@transaction.atomic
def set_offering_terms(
    *,
    actor: Any,
    offering: Offering,
    now: datetime | None = None,
    source: str = "web",
    **asked: Any,
) -> Offering:
    """An admin changes some of the offering's ``TERMS`` (a name left out keeps its
    value): the row is locked, the terms checked (``check_terms``; a refusal writes
    nothing), the changed ones written with one audit event (``offering.changed``,
    before and after of what changed), and a new price dated today. Asking for the terms
    it already has changes nothing."""
    if not access.is_admin(actor):
        raise NotPermitted(_("Only admins set prices."))
    locked = Offering.objects.select_for_update().get(pk=offering.pk)
    values = check_terms(locked, **asked)
    changed = [name for name in TERMS if values[name] != getattr(locked, name)]
    if not changed:
        return locked
    before = {name: getattr(locked, name) for name in changed}
    for name in changed:
        setattr(locked, name, values[name])
    fields = list(changed)
    if {"on_demand_price_per_hour", "spot_price_per_hour"} & set(changed):
        locked.price_updated_at = (now or timezone.now()).date()
        fields.append("price_updated_at")
    locked.save(update_fields=fields)
    audit.record(
        actor=actor,
        verb="offering.changed",
        obj=locked,
        source=source,
        before=before,
        after={name: values[name] for name in changed},
    )
    return locked
