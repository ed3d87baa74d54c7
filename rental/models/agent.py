"""What the agents report, kept beyond the raw retention window: hourly rollups."""

from django.db import models
from django.utils.translation import gettext_lazy as _


class UtilizationRollup(models.Model):
    """One instance-hour of samples: per-GPU mean and peak utilization, mean memory used."""

    instance = models.ForeignKey(
        "rental.Instance", on_delete=models.CASCADE, related_name="rollups"
    )
    hour = models.DateTimeField(_("hour"))
    samples = models.PositiveSmallIntegerField(_("samples"))
    idle_samples = models.PositiveSmallIntegerField(_("idle samples"))
    gpu_utilization_mean = models.JSONField(_("mean GPU utilization (%)"), default=list)
    gpu_utilization_max = models.JSONField(_("peak GPU utilization (%)"), default=list)
    memory_used_mb_mean = models.JSONField(_("mean memory used (MB)"), default=list)

    class Meta:
        ordering = ["instance", "hour"]
        verbose_name = _("hourly utilization")
        verbose_name_plural = _("hourly utilization")
        constraints = [
            models.UniqueConstraint(fields=["instance", "hour"], name="one_rollup_per_hour"),
        ]

    def __str__(self) -> str:
        return f"{self.instance} {self.hour:%Y-%m-%d %H:00}"
