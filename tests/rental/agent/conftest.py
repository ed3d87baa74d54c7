"""Running leases with an agent token, and the pieces an agent talks to in tests."""

from dataclasses import dataclass
from datetime import datetime, timedelta
from decimal import Decimal

import pytest
from django.utils import timezone

from rental.fleet import agent_install
from rental.models import Instance, Reservation, UsageRecord
from tests import factories


@dataclass
class Running:
    lease: Reservation
    instance: Instance
    token: str


def running_lease(
    f0,
    *,
    priority: str = "learning",
    market: str = "on_demand",
    since: datetime | None = None,
    gpus: int = 1,
) -> Running:
    since = since or timezone.now().replace(microsecond=0) - timedelta(hours=3)
    lease = Reservation.objects.create(
        project=f0.alpha,
        requester=f0.alice,
        gpu_model=f0.model,
        gpu_count=gpus,
        offering=f0.offering,
        market=market,
        priority=priority,
        image=f0.image,
        start=since,
        end=since + timedelta(hours=8),
        tier="guaranteed" if market == "on_demand" else "spot",
        status=Reservation.Status.ACTIVE,
    )
    instance = Instance.objects.create(
        reservation=lease,
        account=f0.account,
        offering=f0.offering,
        region="us-east-1",
        external_id=f"i-{lease.pk:017x}",
        state=Instance.State.RUNNING,
        market=market,
        gpu_count=gpus,
        rate_per_hour=Decimal("2.50") * gpus,
        running_at=since,
        ssh_user="ubuntu",
        public_address="203.0.113.10",
    )
    UsageRecord.objects.create(
        instance=instance,
        project=f0.alpha,
        gpu_model=f0.model,
        tier=lease.tier,
        market=market,
        gpu_count=gpus,
        start=since,
        rate=Decimal("2.50"),
    )
    agent_install.cloud_config(instance, ssh_keys=[])
    instance.refresh_from_db()
    return Running(lease=lease, instance=instance, token=agent_install.agent_token(instance))


@pytest.fixture(autouse=True)
def _agent_policy(settings):
    settings.PORTAL_AGENT_MIN_INTERVAL_SECONDS = 0
    settings.PORTAL_BURN_MIN_PERCENT = 50
    settings.PORTAL_IDLE_THRESHOLD_PERCENT = 5
    settings.PORTAL_IDLE_REQUIRE_NOBODY_CONNECTED = False


@pytest.fixture
def f0(db):
    return factories.fixture_f0()
