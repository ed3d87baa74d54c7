"""Billing's gauges for ``/metrics`` (``PORTAL_METRICS_FAMILIES``): each active project's
month-to-date spend, as the periodic refresh last kept it (``billing.spend``), and how old
that refresh is. One query. The amounts are handed over as the Decimals they are;
prometheus_client writes them as text (Prometheus keeps floats, for graphs only)."""

from datetime import datetime, timedelta
from decimal import Decimal

from django.conf import settings
from prometheus_client.metrics_core import Metric

from billing.models import SpendSnapshot
from billing.periods import period_start
from portal.metrics import gauge

NEVER = Decimal("Infinity")
SECOND = timedelta(seconds=1)


def families(*, now: datetime) -> list[Metric]:
    spend = gauge(
        "portal_spend_month_to_date",
        "The project's spend this month so far, in the billing currency, as of the last refresh.",
        ["project", "currency"],
    )
    age = gauge(
        "portal_spend_snapshot_age_seconds",
        "Seconds since the month-to-date spend was last refreshed (+Inf: not this month).",
    )
    rows = list(
        SpendSnapshot.objects.filter(period=period_start(now).date(), project__is_active=True)
        .values_list("project__slug", "amount", "as_of")
        .order_by("project__slug")
    )
    for slug, amount, _as_of in rows:
        spend.add_metric([slug, settings.PORTAL_CURRENCY], amount)
    newest = max((as_of for _slug, _amount, as_of in rows), default=None)
    age.add_metric([], NEVER if newest is None else (now - newest) // SECOND)
    return [spend, age]
