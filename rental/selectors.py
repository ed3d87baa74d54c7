"""Non-trivial reads of the compute side. Billing reads usage only through here."""

from collections.abc import Iterable
from dataclasses import dataclass
from datetime import datetime
from decimal import Decimal

from django.db.models import Q, QuerySet, Sum

from portal.models import Project
from rental.models import (
    GpuModel,
    Image,
    Instance,
    Market,
    Offering,
    Pool,
    Quota,
    Reservation,
    Tier,
    UsageRecord,
)


@dataclass(frozen=True)
class QuotaStatus:
    """A project's standing in one GPU model's pool, in GPUs."""

    guaranteed: int
    ceiling: int
    used_guaranteed: int
    used: int
    pool_capacity: int
    pool_running: int

    @property
    def guaranteed_left(self) -> int:
        return max(self.guaranteed - self.used_guaranteed, 0)

    @property
    def ceiling_left(self) -> int:
        return max(self.ceiling - self.used, 0)

    @property
    def pool_free(self) -> int:
        return max(self.pool_capacity - self.pool_running, 0)


def pool_running_gpus(gpu_model: GpuModel | int) -> int:
    """GPUs held by leases that run or are being started or ended (Q4)."""
    return (
        Reservation.objects.filter(gpu_model=gpu_model, status__in=Reservation.HOLDING).aggregate(
            n=Sum("gpu_count")
        )["n"]
        or 0
    )


def project_running_gpus(project: Project | int, gpu_model: GpuModel | int) -> tuple[int, int]:
    """(Ug, U): the project's running guaranteed GPUs and all its running non-spot GPUs."""
    totals = Reservation.objects.filter(
        project=project, gpu_model=gpu_model, status__in=Reservation.HOLDING
    ).aggregate(
        guaranteed=Sum("gpu_count", filter=Q(tier=Tier.GUARANTEED)),
        non_spot=Sum("gpu_count", filter=~Q(tier=Tier.SPOT)),
    )
    return totals["guaranteed"] or 0, totals["non_spot"] or 0


def quota_for(project: Project | int, gpu_model: GpuModel | int) -> Quota | None:
    return Quota.objects.filter(project=project, gpu_model=gpu_model).first()


def quota_status(*, project: Project | int, gpu_model: GpuModel | int) -> QuotaStatus:
    quota = quota_for(project, gpu_model)
    pool = Pool.objects.filter(gpu_model=gpu_model).first()
    used_guaranteed, used = project_running_gpus(project, gpu_model)
    return QuotaStatus(
        guaranteed=quota.guaranteed if quota else 0,
        ceiling=quota.ceiling if quota else 0,
        used_guaranteed=used_guaranteed,
        used=used,
        pool_capacity=pool.capacity if pool else 0,
        pool_running=pool_running_gpus(gpu_model),
    )


def fitting_offerings(*, gpu_model: GpuModel | int, gpu_count: int, market: str) -> list[Offering]:
    """Offerings that can carry exactly ``gpu_count`` GPUs, cheapest first.

    An offering fits when its GPUs per instance divide the count; its price for
    the market must be known. Ties go to fewer, larger instances.
    """
    candidates = Offering.objects.filter(
        gpu_model=gpu_model, is_available=True, account__is_active=True
    ).select_related("account", "gpu_model")
    fitting = [
        offering
        for offering in candidates
        if gpu_count % offering.gpus_per_instance == 0
        and offering.price_per_hour(market) is not None
    ]
    return sorted(
        fitting,
        key=lambda o: (o.rate_per_gpu_hour(market), -o.gpus_per_instance, o.instance_type),
    )


def images_for(*, project: Project | int, offering: Offering | None = None) -> QuerySet[Image]:
    images = Image.objects.filter(is_active=True).filter(
        Q(project__isnull=True) | Q(project=project)
    )
    if offering is not None:
        images = images.filter(account_id=offering.account_id, region=offering.region)
    return images.order_by("name")


def requestable_gpu_models(project: Project | int) -> QuerySet[GpuModel]:
    """GPU models the project has a quota for and that some offering sells."""
    return (
        GpuModel.objects.filter(
            quotas__project=project, quotas__ceiling__gt=0, offerings__is_available=True
        )
        .distinct()
        .order_by("name")
    )


def leases(queryset: QuerySet[Reservation] | None = None) -> QuerySet[Reservation]:
    """Leases with everything a list shows, in a fixed number of queries."""
    base = queryset if queryset is not None else Reservation.objects.all()
    return base.select_related(
        "project", "requester", "gpu_model", "offering", "image", "approved_by"
    ).prefetch_related("instances")


def live_instances(account_id: int | None = None) -> QuerySet[Instance]:
    instances = Instance.objects.filter(state__in=Instance.LIVE)
    if account_id is not None:
        instances = instances.filter(account_id=account_id)
    return instances


def usage_for_period(
    *, start: datetime, end: datetime, project_ids: Iterable[int] | None = None
) -> QuerySet[UsageRecord]:
    """Usage records that may bill in [start, end): they began before its end and had not
    ended before its start (a run ending exactly at ``start`` may owe a top-up there)."""
    records = UsageRecord.objects.filter(start__lt=end).filter(
        Q(end__isnull=True) | Q(end__gte=start)
    )
    if project_ids is not None:
        records = records.filter(project_id__in=list(project_ids))
    return records.select_related("gpu_model").order_by("start", "id")


def rate_for(offering: Offering, market: str) -> Decimal:
    rate = offering.rate_per_gpu_hour(market)
    if rate is None:
        raise ValueError(f"{offering} has no {Market(market).label} price")
    return rate
