"""What the bad-number tests of the pages and of the API share: the bad values, the rows
a refusal must leave as they were, and a world with something for every form to act on."""

from datetime import timedelta
from typing import Any

from django.utils import timezone

from billing import services
from billing.models import Budget, LineDispute, Statement, StatementLine
from billing.periods import period_start
from portal.models import ApiToken, AuditEvent, Notification
from rental.loans import admission
from rental.models import (
    AvailabilityWatch,
    DataVolume,
    GpuModel,
    Offering,
    Pool,
    Quota,
    QuotaRequest,
    Reservation,
)
from tests import factories
from tests.billing.helpers import lease, run

BAD = {
    "empty": "",
    "negative": "-1",
    "huge": "1" + "0" * 26,
    "text": "abc",
    "nul": "4\x00",
    "bidi": "\u202e4",
    "long": "1" * 100_000,
}
WATCHED = [
    Reservation,
    GpuModel,
    AvailabilityWatch,
    Quota,
    QuotaRequest,
    DataVolume,
    Pool,
    Offering,
    Budget,
    Statement,
    StatementLine,
    LineDispute,
    ApiToken,
    AuditEvent,
    Notification,
]


def written() -> dict[str, list[dict[str, Any]]]:
    """Every row a form here could write, as values: equal before and after a refusal."""
    return {model.__name__: list(model.objects.order_by("pk").values()) for model in WATCHED}


def build(f0):
    """F0 with a running lease and a booking of alice's, zones to make volumes in, and a
    dispute on a closed statement line of alpha's last month."""
    f0.admin.is_superuser = True
    f0.admin.save(update_fields=["is_superuser"])
    f0.finance = factories.user("fiona", finance=True)
    Offering.objects.filter(pk=f0.offering.pk).update(zones=["us-east-1a"])
    Quota.objects.filter(project=f0.alpha).update(max_hours_per_lease=100)
    now = timezone.now()
    f0.running = lease(
        f0, f0.alpha, tier="burst", status="active", start=now, end=now + timedelta(hours=4)
    )
    start = now + timedelta(days=7)
    f0.booking = admission.submit_reservation(
        actor=f0.alice,
        project=f0.alpha,
        gpu_model=f0.model,
        gpu_count=1,
        duration_hours="2",
        priority="experiment",
        market="on_demand",
        start=start.replace(hour=9, minute=0, second=0, microsecond=0),
    )
    last_month = period_start(period_start(now) - timedelta(days=1))
    run(lease(f0, f0.alpha, tier="burst"), start=last_month, hours=2)
    services.close_period(period=last_month, now=period_start(now) + timedelta(seconds=1))
    line = StatementLine.objects.filter(statement__project=f0.alpha).first()
    f0.dispute = services.dispute_line(line_id=line.pk, actor=f0.alpha_manager, comment="Why?")
    return f0
