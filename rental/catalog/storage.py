"""Storage intervals (B8): when each data volume and each stopped instance's disk exists
and is billable. Written here, read by billing through rental.selectors."""

from collections.abc import Iterable
from datetime import datetime

from rental.models import DataVolume, Instance, StorageInterval

Kind = StorageInterval.Kind


def open_volume(volume: DataVolume, *, at: datetime) -> None:
    """Within the caller's transaction: the volume exists in the cloud from ``at``."""
    if StorageInterval.objects.filter(volume=volume, end__isnull=True).exists():
        return
    StorageInterval.objects.create(
        project_id=volume.project_id,
        kind=Kind.VOLUME,
        volume=volume,
        size_gb=volume.size_gb,
        rate_per_gb_month=volume.storage_rate_per_gb_month,
        start=at,
    )


def close_volume(volume: DataVolume, *, at: datetime) -> None:
    for interval in StorageInterval.objects.select_for_update().filter(
        volume=volume, end__isnull=True
    ):
        interval.end = max(at, interval.start)
        interval.save(update_fields=["end"])


def open_disks(instances: Iterable[Instance], *, project_id: int, at: datetime) -> None:
    """Within the caller's transaction: these instances stopped at ``at``; their root disks
    are billed as storage from then on at their offering's storage price (L9, B8)."""
    instances = list(instances)
    already = set(
        StorageInterval.objects.filter(instance__in=instances, end__isnull=True).values_list(
            "instance_id", flat=True
        )
    )
    StorageInterval.objects.bulk_create(
        StorageInterval(
            project_id=project_id,
            kind=Kind.DISK,
            instance=instance,
            size_gb=instance.root_disk_gb or instance.offering.root_disk_gb,
            rate_per_gb_month=instance.offering.storage_price_per_gb_month,
            start=at,
        )
        for instance in instances
        if instance.pk not in already
    )


def close_disks(ended: dict[int, datetime]) -> None:
    """Within the caller's transaction: the disks of these instances (id → when) stop being
    billed as storage (resumed, or terminated with the instance)."""
    if not ended:
        return
    intervals = list(
        StorageInterval.objects.select_for_update().filter(
            instance_id__in=list(ended), end__isnull=True
        )
    )
    for interval in intervals:
        interval.end = max(ended[interval.instance_id], interval.start)
    StorageInterval.objects.bulk_update(intervals, ["end"])
