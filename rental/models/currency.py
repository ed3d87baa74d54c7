"""Exchange rates: what one unit of the site's billing currency costs in another currency,
from a dated moment on.

They live in rental's catalog, beside the offerings whose prices they convert, because
the rate in force is captured onto the instance at launch (rental's work) and rental
never imports billing; billing reads them through rental like the rest of the usage.
"""

from decimal import Decimal

from django.conf import settings
from django.db import models
from django.utils import timezone
from django.utils.translation import gettext_lazy as _

RATE_DIGITS = 20
RATE_DECIMALS = 8


def billing_currency() -> str:
    """The site's billing currency (ISO 4217): statements and budgets are in it."""
    return settings.PORTAL_CURRENCY


class ExchangeRate(models.Model):
    """``units_per_billing_unit`` of ``currency`` buy one unit of ``billing_currency``
    from ``valid_from`` on (7.25 CNY per USD). Written once: a correction is a new rate,
    so what a launch captured keeps its provenance."""

    currency = models.CharField(_("currency"), max_length=3)
    billing_currency = models.CharField(
        _("billing currency"), max_length=3, default=billing_currency
    )
    units_per_billing_unit = models.DecimalField(
        _("units per billing-currency unit"),
        max_digits=RATE_DIGITS,
        decimal_places=RATE_DECIMALS,
        help_text=_("How many units of the currency one unit of the billing currency costs."),
    )
    valid_from = models.DateTimeField(_("in force from"))
    source = models.CharField(_("source"), max_length=120)
    created_at = models.DateTimeField(_("recorded at"), default=timezone.now)
    created_by = models.ForeignKey(
        settings.AUTH_USER_MODEL, on_delete=models.SET_NULL, null=True, blank=True, related_name="+"
    )

    class Meta:
        ordering = ["currency", "-valid_from"]
        verbose_name = _("exchange rate")
        verbose_name_plural = _("exchange rates")
        constraints = [
            models.UniqueConstraint(
                fields=["currency", "billing_currency", "valid_from"],
                name="one_exchange_rate_per_moment",
            ),
            models.CheckConstraint(
                condition=models.Q(units_per_billing_unit__gt=0), name="exchange_rate_positive"
            ),
            models.CheckConstraint(
                condition=~models.Q(currency=models.F("billing_currency")),
                name="exchange_rate_between_two_currencies",
            ),
        ]

    def __str__(self) -> str:
        return (
            f"{self.units_per_billing_unit.normalize():f} {self.currency} = 1 "
            f"{self.billing_currency} from {self.valid_from:%Y-%m-%d %H:%M} ({self.source})"
        )


ONE = Decimal("1")
