"""Rental's gauges for ``/metrics`` (``PORTAL_METRICS_FAMILIES``): instances, pools, the
queue, the sync, failed launches, orphans, unbilled cloud time and the outbox. Eight
aggregate queries, whatever the number of rows; accounts and pools are labelled by name."""

from datetime import datetime
from decimal import Decimal

from django.conf import settings
from django.db.models import Count, Min, Q, Sum
from prometheus_client.core import CounterMetricFamily
from prometheus_client.metrics_core import Metric

from portal.metrics import gauge
from rental.models import (
    GpuModel,
    Instance,
    Orphan,
    OutboxMessage,
    RegionSync,
    Reservation,
    TerminationReason,
    Tier,
    UnbilledCloudTime,
)

INF = float("inf")


def families(*, now: datetime) -> list[Metric]:
    return [
        *_instances(),
        *_pools(now),
        *_unbilled(),
        *_sync(now),
        *_failed_launches(),
        *_orphans(),
        *_outbox(now),
    ]


def _instances() -> list[Metric]:
    live = gauge(
        "portal_live_instances",
        "Instances launching, running or stopping, by provider account and region.",
        ["account", "region"],
    )
    rows = (
        Instance.objects.filter(state__in=Instance.LIVE)
        .values_list("account__name", "region")
        .annotate(n=Count("pk"))
        .order_by("account__name", "region")
    )
    for account, region, count in rows:
        live.add_metric([account, region], count)
    return [live]


def _pools(now: datetime) -> list[Metric]:
    """Per pool (GPU model): its capacity, the GPUs its leases hold by tier (zero where
    none), its queue and how long the oldest queued lease has waited (0 when none)."""
    capacity = gauge("portal_pool_capacity_gpus", "GPUs the pool may run at once (C).", ["pool"])
    in_use = gauge(
        "portal_gpus_in_use",
        "GPUs held by leases provisioning, active or ending, by pool and tier.",
        ["pool", "tier"],
    )
    queued = gauge("portal_queue_length", "Leases queued for room in the pool.", ["pool"])
    oldest = gauge(
        "portal_queue_oldest_wait_seconds",
        "Seconds since the oldest queued lease of the pool was submitted (0: none queued).",
        ["pool"],
    )
    queued_now = Q(reservations__status=Reservation.Status.QUEUED)
    pools = (
        GpuModel.objects.filter(pool__isnull=False)
        .values_list("pk", "name", "pool__capacity")
        .annotate(
            queued=Count("reservations", filter=queued_now),
            oldest=Min("reservations__submitted_at", filter=queued_now),
        )
        .order_by("name")
    )
    names = {}
    for pk, name, pool_capacity, count, since in pools:
        names[pk] = name
        capacity.add_metric([name], pool_capacity)
        queued.add_metric([name], count)
        oldest.add_metric([name], 0 if since is None else max((now - since).total_seconds(), 0))
    held = dict.fromkeys(((pk, tier) for pk in names for tier in Tier.values), 0)
    rows = (
        Reservation.objects.filter(status__in=Reservation.HOLDING, gpu_model__in=list(names))
        .values_list("gpu_model_id", "tier")
        .annotate(gpus=Sum("gpu_count"))
        .order_by()
    )
    for pk, tier, gpus in rows:
        if tier:  # a lease always has its tier once it holds GPUs
            held[(pk, tier)] = gpus
    for (pk, tier), gpus in held.items():
        in_use.add_metric([names[pk], tier], gpus)
    return [capacity, in_use, queued, oldest]


def _unbilled() -> list[Metric]:
    """Cloud time after billing stopped (``rental.fleet.unbilled``), per pool, since the
    first row: a counter, read with ``increase()`` over the window wanted."""
    unbilled = CounterMetricFamily(
        "portal_unbilled_gpu_seconds",
        "GPU-seconds the cloud ran after the lease's billing stopped (the platform pays).",
        labels=["pool"],
    )
    rows = (
        UnbilledCloudTime.objects.values_list("gpu_model__name")
        .annotate(total=Sum("gpu_seconds"))
        .order_by("gpu_model__name")
    )
    for pool, total in rows:
        unbilled.add_metric([pool], total)
    return [unbilled]


def _sync(now: datetime) -> list[Metric]:
    lag = gauge(
        "portal_sync_lag_seconds",
        "Seconds since the region's last good sync with the cloud (+Inf: never).",
        ["account", "region"],
    )
    failing = gauge(
        "portal_sync_failing",
        "1 when the region's last sync failed (its error is on the account's admin page).",
        ["account", "region"],
    )
    period = gauge("portal_sync_period_seconds", "How often beat starts the sync.")
    period.add_metric([], float(settings.CELERY_BEAT_SCHEDULE["sync-instances"]["schedule"]))
    rows = (
        RegionSync.objects.filter(account__is_active=True)
        .exclude(account__credentials_encrypted="")
        .values_list("account__name", "region", "synced_at", "sync_error")
        .order_by("account__name", "region")
    )
    for account, region, synced_at, error in rows:
        lag.add_metric(
            [account, region], INF if synced_at is None else (now - synced_at).total_seconds()
        )
        failing.add_metric([account, region], 1 if error else 0)
    return [lag, failing, period]


def _failed_launches() -> list[Metric]:
    failed = CounterMetricFamily(
        "portal_failed_launches",
        "Instances the portal gave up on (termination reason failed): launches that could "
        "not succeed, and their siblings and replacements.",
    )
    failed.add_metric(
        [], Instance.objects.filter(termination_reason=TerminationReason.FAILED).count()
    )
    return [failed]


def _orphans() -> list[Metric]:
    """Orphans not yet dealt with (reported, terminating, or stuck), and what the open ones
    are estimated to cost an hour."""
    count = gauge(
        "portal_orphans", "Cloud instances with this installation's tag and no lease.", ["status"]
    )
    cost = gauge(
        "portal_orphans_hourly_cost",
        "Estimated cost per hour of those orphans, in each offering's currency (unknown: 0).",
    )
    statuses = (Orphan.Status.OPEN, Orphan.Status.TERMINATING, Orphan.Status.STUCK)
    found = dict.fromkeys(statuses, 0)
    total = Decimal("0")
    rows = (
        Orphan.objects.filter(status__in=statuses)
        .values_list("status")
        .annotate(n=Count("pk"), cost=Sum("hourly_cost"))
        .order_by()
    )
    for status, n, hourly in rows:
        found[status] = n
        total += hourly or 0
    for status, n in found.items():
        count.add_metric([status], n)
    cost.add_metric([], total)
    return [count, cost]


def _outbox(now: datetime) -> list[Metric]:
    """Work for Celery not yet handed to the broker (``rental.jobs``): none for long except
    while the broker is down or no beat runs the outbox sweep."""
    pending = gauge("portal_outbox_pending", "Messages for Celery waiting in the outbox.")
    oldest = gauge(
        "portal_outbox_oldest_pending_seconds",
        "Seconds since the oldest message waiting in the outbox was written (0: none).",
    )
    found = OutboxMessage.objects.filter(sent_at__isnull=True).aggregate(
        n=Count("pk"), since=Min("created")
    )
    pending.add_metric([], found["n"])
    since = found["since"]
    oldest.add_metric([], 0 if since is None else max((now - since).total_seconds(), 0))
    return [pending, oldest]
