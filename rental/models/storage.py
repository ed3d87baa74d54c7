"""Storage that exists and is billed apart from GPU time (B8): one row per interval."""

from django.db import models
from django.utils.translation import gettext_lazy as _


class StorageInterval(models.Model):
    """A disk existing-and-billable over [start, end), end empty while it lasts: a data
    volume from its creation to its deletion, or a stopped instance's root disk from the
    stop to the resume or termination. Billing's truth for storage, like UsageRecord."""

    class Kind(models.TextChoices):
        VOLUME = "volume", _("Data volume")
        DISK = "disk", _("Stopped instance's disk")

    project = models.ForeignKey("portal.Project", on_delete=models.PROTECT, related_name="+")
    kind = models.CharField(_("kind"), max_length=8, choices=Kind.choices)
    volume = models.ForeignKey(
        "rental.DataVolume",
        on_delete=models.PROTECT,
        null=True,
        blank=True,
        related_name="storage_intervals",
    )
    instance = models.ForeignKey(
        "rental.Instance",
        on_delete=models.PROTECT,
        null=True,
        blank=True,
        related_name="storage_intervals",
    )
    size_gb = models.PositiveIntegerField(_("size (GB)"))
    rate_per_gb_month = models.DecimalField(
        _("price per GB-month"), max_digits=12, decimal_places=6
    )
    start = models.DateTimeField(_("start"), db_index=True)
    end = models.DateTimeField(_("end"), null=True, blank=True, db_index=True)

    class Meta:
        ordering = ["start", "id"]
        verbose_name = _("storage interval")
        verbose_name_plural = _("storage intervals")
        constraints = [
            models.CheckConstraint(
                condition=(
                    models.Q(kind="volume", volume__isnull=False, instance__isnull=True)
                    | models.Q(kind="disk", instance__isnull=False, volume__isnull=True)
                ),
                name="storage_interval_has_one_subject",
            ),
            models.UniqueConstraint(
                fields=["volume"],
                condition=models.Q(end__isnull=True, volume__isnull=False),
                name="one_open_interval_per_volume",
            ),
            models.UniqueConstraint(
                fields=["instance"],
                condition=models.Q(end__isnull=True, instance__isnull=False),
                name="one_open_interval_per_disk",
            ),
            models.CheckConstraint(
                condition=models.Q(end__isnull=True) | models.Q(end__gte=models.F("start")),
                name="storage_interval_ends_after_start",
            ),
            models.CheckConstraint(
                condition=models.Q(rate_per_gb_month__gte=0), name="storage_rate_not_negative"
            ),
        ]

    def __str__(self) -> str:
        return f"{self.kind} {self.size_gb} GB [{self.start:%Y-%m-%d %H:%M:%S}, {self.end})"
