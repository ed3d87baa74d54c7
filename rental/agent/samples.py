"""Keeping the samples table bounded: hourly rollups, then raw samples past the retention
window are deleted (site policy ``PORTAL_SAMPLE_RETENTION_DAYS``), and rollups past theirs
(``PORTAL_ROLLUP_RETENTION_DAYS``)."""

from collections import defaultdict
from datetime import datetime, timedelta

from django.conf import settings
from django.db import transaction
from django.utils import timezone

from rental.models import UtilizationRollup, UtilizationSample
from rental.models.agent import ROLL_BACK_HOURS, hour_of, rollup


def roll_up_hours(*, now: datetime | None = None, hours: int = ROLL_BACK_HOURS) -> int:
    """Write (or rewrite) the rollups of the last complete ``hours``. Returns rows written."""
    now = now or timezone.now()
    end = hour_of(now)
    start = end - timedelta(hours=hours)
    groups: dict[tuple[int, datetime], list] = defaultdict(list)
    rows = UtilizationSample.objects.filter(at__gte=start, at__lt=end).values_list(
        "instance_id", "at", "gpu_utilization", "memory_used_mb"
    )
    for instance_id, at, util, memory in rows.iterator(chunk_size=5000):
        groups[(instance_id, hour_of(at))].append((util, memory))
    threshold = settings.PORTAL_IDLE_THRESHOLD_PERCENT
    objects = [
        UtilizationRollup(instance_id=instance_id, hour=hour, **rollup(group, threshold=threshold))
        for (instance_id, hour), group in groups.items()
    ]
    with transaction.atomic():
        UtilizationRollup.objects.bulk_create(
            objects,
            batch_size=2000,
            update_conflicts=True,
            unique_fields=["instance", "hour"],
            update_fields=[
                "samples",
                "idle_samples",
                "gpu_utilization_mean",
                "gpu_utilization_max",
                "memory_used_mb_mean",
            ],
        )
    return len(objects)


def purge_samples(*, now: datetime | None = None) -> int:
    """Delete raw samples older than the retention window (their hours are rolled up) and
    rollups older than theirs. Returns the raw samples deleted."""
    now = now or timezone.now()
    cutoff = hour_of(now) - timedelta(days=settings.PORTAL_SAMPLE_RETENTION_DAYS)
    deleted, _by_model = UtilizationSample.objects.filter(at__lt=cutoff).delete()
    rollup_cutoff = hour_of(now) - timedelta(days=settings.PORTAL_ROLLUP_RETENTION_DAYS)
    UtilizationRollup.objects.filter(hour__lt=rollup_cutoff).delete()
    return deleted
