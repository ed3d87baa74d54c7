"""Shared pieces of the lease, instance, usage and watch API tests (fixture F0)."""

from datetime import timedelta
from decimal import Decimal

from django.apps import apps
from django.utils import timezone
from rest_framework.test import APIClient

from rental.models import Instance, Reservation, UsageRecord


def client_for(user) -> APIClient:
    client = APIClient()
    if user is not None:
        client.force_authenticate(user)
    return client


def row_counts() -> dict[str, int]:
    """Rows of every table: a refused request must leave them all as they were."""
    return {model._meta.label: model.objects.count() for model in apps.get_models()}


def running_lease(
    f0,
    *,
    project=None,
    requester=None,
    gpus: int = 1,
    market: str = "on_demand",
    hours: int = 8,
    address: str = "203.0.113.10",
) -> Reservation:
    """An active lease with one running instance per GPU and an open usage run each."""
    project = project or f0.alpha
    since = timezone.now().replace(microsecond=0) - timedelta(hours=1)
    lease = Reservation.objects.create(
        project=project,
        requester=requester or f0.engineer_of(project),
        gpu_model=f0.model,
        gpu_count=gpus,
        instance_count=gpus,
        offering=f0.offering,
        market=market,
        priority="experiment",
        image=f0.image,
        purpose="a running lease",
        start=since,
        end=since + timedelta(hours=hours),
        tier="guaranteed" if market == "on_demand" else "spot",
        status=Reservation.Status.ACTIVE,
    )
    for index in range(gpus):
        instance = Instance.objects.create(
            reservation=lease,
            account=f0.account,
            offering=f0.offering,
            region="us-east-1",
            zone="us-east-1a",
            external_id=f"i-{lease.pk:08x}{index:09x}",
            state=Instance.State.RUNNING,
            market=market,
            gpu_count=1,
            rate_per_hour=Decimal("2.50"),
            running_at=since,
            ssh_user="ubuntu",
            public_address=address,
            private_address="10.0.0.10",
        )
        UsageRecord.objects.create(
            instance=instance,
            project=project,
            gpu_model=f0.model,
            tier=lease.tier,
            market=market,
            gpu_count=1,
            start=since,
            rate=Decimal("2.50"),
        )
    return lease
