"""What the agents report, kept beyond the raw retention window: hourly rollups."""

from django.db import models
from django.utils.translation import gettext_lazy as _

from rental.models.packed import PackedReadingsField


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
