"""Exchange rates (B2 across currencies): recording a dated rate, and capturing the rate
in force onto an instance at launch.

The rate in force at a moment is the latest one for the currency whose ``valid_from`` is
at or before it; a later rate never changes what an earlier launch captured. A currency
with no rate at or before the launch cannot launch: its offerings are not tried (see
``launching.launch_places``), so nothing runs that billing could not convert.
"""

import re
from datetime import datetime
from decimal import Decimal
from typing import Any

from django.db import transaction
from django.utils import timezone
from django.utils.translation import gettext as _

from portal import access, audit
from portal.errors import InvalidInput, NotPermitted
from portal.numbers import decimal_number
from portal.text import plain_text
from rental.models import ExchangeRate, Instance, Offering
from rental.models.currency import ONE, RATE_DECIMALS, RATE_DIGITS, billing_currency

CURRENCY_CODE = re.compile(r"^[A-Z]{3}$")
SOURCE_LENGTH = ExchangeRate._meta.get_field("source").max_length


def rate_in_force(currency: str, at: datetime) -> ExchangeRate | None:
    """The rate converting ``currency`` into the billing currency at ``at``, or None."""
    return (
        ExchangeRate.objects.filter(
            currency=currency, billing_currency=billing_currency(), valid_from__lte=at
        )
        .order_by("-valid_from", "-pk")
        .first()
    )


def can_price(currency: str, at: datetime) -> bool:
    """Whether a launch priced in ``currency`` can be converted at ``at``."""
    return currency == billing_currency() or rate_in_force(currency, at) is not None


def capture(instance: Instance, offering: Offering, *, at: datetime) -> None:
    """Set the instance's currency and the exchange rate in force at ``at`` (not saved:
    the caller saves it with the rate it captures at the same moment)."""
    instance.currency = offering.currency
    if offering.currency == billing_currency():
        instance.exchange_rate, instance.exchange_rate_ref = ONE, None
        return
    rate = rate_in_force(offering.currency, at)
    if rate is None:
        raise InvalidInput(
            _(
                "No exchange rate from %(currency)s to %(billing)s is in force; an admin "
                "must add one before an offering priced in %(currency)s can launch."
            )
            % {"currency": offering.currency, "billing": billing_currency()},
            code="no_exchange_rate",
            field="currency",
        )
    instance.exchange_rate, instance.exchange_rate_ref = rate.units_per_billing_unit, rate


CAPTURED_FIELDS = ["currency", "exchange_rate", "exchange_rate_ref"]


def parse_rate(value: Any) -> Decimal:
    """A rate as typed (the admin's form, a rates file): more than zero, within the
    column's digits (below 10^12, at most 8 decimal places), or InvalidInput."""
    rate = decimal_number(
        value,
        field="units_per_billing_unit",
        places=RATE_DECIMALS,
        below=Decimal(10) ** (RATE_DIGITS - RATE_DECIMALS),
    )
    if rate <= 0:
        raise InvalidInput(_("The rate must be more than zero."), field="units_per_billing_unit")
    return rate


def check_new_rate(
    *, currency: Any, units_per_billing_unit: Any, valid_from: Any, source: Any
) -> tuple[str, Decimal, str]:
    """Validate a new rate; raise InvalidInput naming the field. Returns the cleaned code,
    rate and source."""
    code = str(currency or "").strip().upper()
    if not CURRENCY_CODE.match(code):
        raise InvalidInput(_("Enter an ISO 4217 code such as CNY."), field="currency")
    if code == billing_currency():
        raise InvalidInput(
            _("%(code)s is the billing currency; it needs no rate.") % {"code": code},
            field="currency",
        )
    rate = parse_rate(units_per_billing_unit)
    source = plain_text(source, field="source", max_length=SOURCE_LENGTH, label=_("Source"))
    if not source:
        raise InvalidInput(_("Say where the rate comes from."), field="source")
    if valid_from is None or timezone.is_naive(valid_from):
        raise InvalidInput(_("Enter the date the rate is in force from."), field="valid_from")
    if ExchangeRate.objects.filter(
        currency=code, billing_currency=billing_currency(), valid_from=valid_from
    ).exists():
        raise InvalidInput(
            _("%(code)s already has a rate from %(at)s; record a correction from a later moment.")
            % {"code": code, "at": valid_from.strftime("%Y-%m-%d %H:%M")},
            field="valid_from",
        )
    return code, rate, source


@transaction.atomic
def add_exchange_rate(
    *,
    actor: Any,
    currency: str,
    units_per_billing_unit: Any,
    valid_from: datetime,
    source: str,
    now: datetime | None = None,
    audit_source: str = "web",
) -> ExchangeRate:
    """An admin records a dated rate (one per currency and moment; rates are never
    edited: a correction is a new rate from a later moment)."""
    now = now or timezone.now()
    if actor is not None and not access.is_admin(actor):
        raise NotPermitted(_("Only an admin records exchange rates."))
    code, rate, source = check_new_rate(
        currency=currency,
        units_per_billing_unit=units_per_billing_unit,
        valid_from=valid_from,
        source=source,
    )
    record = ExchangeRate.objects.create(
        currency=code,
        billing_currency=billing_currency(),
        units_per_billing_unit=rate,
        valid_from=valid_from,
        source=source,
        created_at=now,
        created_by=actor if getattr(actor, "is_authenticated", False) else None,
    )
    audit.record(
        actor=actor,
        verb="exchange_rate.added",
        obj=record,
        source=audit_source,
        at=now,
        after={
            "currency": code,
            "units_per_billing_unit": str(rate),
            "valid_from": valid_from.isoformat(),
            "source": record.source,
        },
    )
    return record
