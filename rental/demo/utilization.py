"""The demo history's utilization: hourly rollups of what the agents of its ended leases
would have reported, so that the idle-waste report has weeks to show.

One rollup per instance-hour of each history instance that ran, as the beat writes them
from raw samples (``rental.agent.samples``): the samples the hour held at the agent's
interval, how many were idle, per-GPU mean and peak utilization and mean memory. How idle
an hour is follows the lease: a lease reaped as idle ends on the idle stretch that reaped
it; learning leases (notebooks, courses) idle often, experiments now and then, production
runs hardly ever.
"""

from __future__ import annotations

import random
from datetime import datetime, timedelta

from portal.models import Project
from rental.demo.history import HISTORY_KEY_PREFIX
from rental.models import Instance, Priority, TerminationReason, UtilizationRollup
from rental.models.agent import hour_of

IDLE_SHARE = {Priority.LEARNING: 0.35, Priority.EXPERIMENT: 0.12, Priority.PRODUCTION: 0.03}


def seed_utilization(project: Project, *, sample_seconds: int) -> int:
    """Rollups for the project's history instances that have none yet (so, once);
    ``sample_seconds`` is the agent's interval. Returns the rollups written."""
    instances = (
        Instance.objects.filter(
            idempotency_key__startswith=f"{HISTORY_KEY_PREFIX}-{project.slug}-",
            running_at__isnull=False,
            terminated_at__isnull=False,
            rollups__isnull=True,
        )
        .select_related("reservation", "offering__gpu_model")
        .order_by("pk")
    )
    rollups: list[UtilizationRollup] = []
    for instance in instances:
        rollups += instance_rollups(instance, sample_seconds=sample_seconds)
    UtilizationRollup.objects.bulk_create(rollups, batch_size=2000, ignore_conflicts=True)
    return len(rollups)


def instance_rollups(instance: Instance, *, sample_seconds: int) -> list[UtilizationRollup]:
    """One instance's hours, from its start of running to its termination."""
    lease = instance.reservation
    rng = random.Random(instance.idempotency_key)
    start, end = instance.running_at, instance.terminated_at
    if start is None or end is None:
        return []
    # A lease reaped as idle idled for its last half hour (L6: 30 samples of a minute).
    idle_from = end - timedelta(minutes=30) if lease.end_reason == TerminationReason.IDLE else end
    share = IDLE_SHARE.get(lease.priority, 0.1)
    memory = instance.offering.gpu_model.memory_gb * 1024 if instance.offering else 24 * 1024
    rows = []
    hour = hour_of(start)
    while hour < end:
        covered = _overlap(hour, start, end)
        samples = max(1, int(covered.total_seconds()) // sample_seconds)
        tail = _overlap(hour, max(start, idle_from), end)
        idle = int(tail.total_seconds()) // sample_seconds
        busy_part = samples - idle
        idle += sum(1 for _ in range(busy_part) if rng.random() < share)
        idle = min(idle, samples)
        active = 1 - idle / samples
        level = rng.uniform(55, 92)
        means = [
            round(active * (level + rng.uniform(-6, 6)) + (1 - active), 2)
            for _gpu in range(instance.gpu_count)
        ]
        rows.append(
            UtilizationRollup(
                instance=instance,
                hour=hour,
                samples=samples,
                idle_samples=idle,
                gpu_utilization_mean=means,
                gpu_utilization_max=[
                    min(100.0, mean + rng.uniform(4, 12)) if active else 2.0 for mean in means
                ],
                memory_used_mb_mean=[round(memory * rng.uniform(0.3, 0.85), 1)]
                * instance.gpu_count,
            )
        )
        hour += timedelta(hours=1)
    return rows


def _overlap(hour: datetime, start: datetime, end: datetime) -> timedelta:
    return max(timedelta(0), min(end, hour + timedelta(hours=1)) - max(start, hour))
