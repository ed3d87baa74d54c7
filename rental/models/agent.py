"""What the agents report, kept beyond the raw retention window: hourly rollups."""

from datetime import datetime

from django.db import models
from django.utils.translation import gettext_lazy as _

from rental.models.packed import PackedReadingsField

# Hourly rollups of the samples: the hour a sample falls in, and one hour's figures
# (pure, so that billing's reads and the agent's retention share them).
ROLL_BACK_HOURS = 2  # each run re-rolls the last complete hours, so late samples count


def hour_of(moment: datetime) -> datetime:
    return moment.replace(minute=0, second=0, microsecond=0)


def rollup(rows: list[tuple[list[float], list[float]]], *, threshold: float) -> dict:
    """Per-GPU mean and peak utilization and mean memory of one instance-hour's samples
    (utilization, memory used); a pure function. Samples without readings are skipped."""
    readable = [(u, m) for u, m in rows if u]
    gpus = max((len(u) for u, _m in readable), default=0)
    util: list[list[float]] = [[] for _ in range(gpus)]
    memory: list[list[float]] = [[] for _ in range(gpus)]
    for u, m in readable:
        for i, value in enumerate(u):
            util[i].append(value)
        for i, value in enumerate(m[:gpus]):
            memory[i].append(value)
    # Idle as L6 counts it on the GPUs alone: every reading under the threshold (the SSH
    # condition is the reaper's, not the rollup's). tests/rental/agent/test_retention.py
    # holds this to rental.agent.idle_rules.classify.
    idle = sum(1 for u, _m in readable if all(value < threshold for value in u))
    return {
        "samples": len(rows),
        "idle_samples": idle,
        "gpu_utilization_mean": [round(sum(v) / len(v), 2) if v else None for v in util],
        "gpu_utilization_max": [max(v) if v else None for v in util],
        "memory_used_mb_mean": [round(sum(v) / len(v), 1) if v else None for v in memory],
    }


class UtilizationRollup(models.Model):
    """One instance-hour of samples: per-GPU mean and peak utilization, mean memory used."""

    # Keyed by (instance, hour): no id column, no second index (see UtilizationSample).
    pk = models.CompositePrimaryKey("instance", "hour")
    instance = models.ForeignKey(
        "rental.Instance", on_delete=models.CASCADE, related_name="rollups", db_index=False
    )
    hour = models.DateTimeField(_("hour"))
    samples = models.PositiveSmallIntegerField(_("samples"))
    idle_samples = models.PositiveSmallIntegerField(_("idle samples"))
    gpu_utilization_mean = PackedReadingsField(_("mean GPU utilization (%)"), scale=100)
    gpu_utilization_max = PackedReadingsField(_("peak GPU utilization (%)"), scale=100)
    memory_used_mb_mean = PackedReadingsField(_("mean memory used (MB)"), width=4)

    class Meta:
        ordering = ["instance", "hour"]
        verbose_name = _("hourly utilization")
        verbose_name_plural = _("hourly utilization")

    def __str__(self) -> str:
        return f"{self.instance_id} {self.hour:%Y-%m-%d %H:00}"
