"""Rows for billing tests: a lease per project and its usage runs, with exact times."""

from datetime import UTC, datetime, timedelta
from decimal import Decimal

from rental.models import Instance, Reservation, TerminationReason, UsageRecord


def at(*parts: int) -> datetime:
    return datetime(*parts, tzinfo=UTC)


def lease(
    f0,
    project,
    *,
    tier="guaranteed",
    gpus=1,
    start=None,
    end=None,
    status="ended",
    market="on_demand",
    requester=None,
):
    return Reservation.objects.create(
        project=project,
        requester=requester or f0.engineer_of(project),
        gpu_model=f0.model,
        gpu_count=gpus,
        offering=f0.offering,
        start=start or at(2026, 1, 1),
        end=end or at(2027, 1, 1),
        status=status,
        tier=tier,
        market=market,
    )


def run(
    reservation,
    *,
    start,
    seconds=None,
    hours=None,
    gpus=1,
    rate="2.50",
    tier=None,
    reason=TerminationReason.LEASE_END,
    market="on_demand",
    end=None,
):
    """One usage run of ``gpus`` GPUs from ``start`` for ``seconds`` (or ``hours``, or up to
    ``end``); None for all three leaves it running."""
    if hours is not None:
        seconds = int(hours * 3600)
    if end is None and seconds is not None:
        end = start + timedelta(seconds=seconds)
    instance = Instance.objects.create(
        reservation=reservation,
        account=reservation.offering.account,
        offering=reservation.offering,
        region="us-east-1",
        market=market,
        gpu_count=gpus,
        rate_per_hour=Decimal(rate) * gpus,
        state="terminated" if end else "running",
    )
    return UsageRecord.objects.create(
        instance=instance,
        project=reservation.project,
        gpu_model=reservation.gpu_model,
        tier=tier or reservation.tier,
        market=market,
        gpu_count=gpus,
        start=start,
        end=end,
        rate=Decimal(rate),
        end_reason=reason if end else "",
    )
