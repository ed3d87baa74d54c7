"""What the portal tried to get an instance from the cloud, so the next decision
survives a restart and the lease page can show it (L2)."""

from django.db import models
from django.utils.translation import gettext_lazy as _


class LaunchAttempt(models.Model):
    """One launch call: where it was aimed and how the cloud answered (kind empty: the
    cloud accepted it)."""

    instance = models.ForeignKey(
        "rental.Instance", on_delete=models.CASCADE, related_name="attempts"
    )
    offering = models.ForeignKey("rental.Offering", on_delete=models.PROTECT, related_name="+")
    account = models.ForeignKey(
        "rental.ProviderAccount", on_delete=models.PROTECT, related_name="+"
    )
    region = models.CharField(_("region"), max_length=32)
    zone = models.CharField(_("zone"), max_length=40, blank=True)
    instance_type = models.CharField(_("instance type"), max_length=40)
    kind = models.CharField(_("failure kind"), max_length=16, blank=True)
    message = models.CharField(_("message"), max_length=500, blank=True)
    at = models.DateTimeField(_("at"))

    class Meta:
        ordering = ["at", "id"]
        verbose_name = _("launch attempt")
        verbose_name_plural = _("launch attempts")
        indexes = [models.Index(fields=["instance", "at"])]

    def __str__(self) -> str:
        where = self.zone or self.region
        return f"{self.instance_type} in {where}: {self.kind or 'launched'}"

    @property
    def succeeded(self) -> bool:
        return not self.kind


class Orphan(models.Model):
    """An instance carrying this installation's tag that no live row stands for (L4):
    unknown to the database, or known as ended while the cloud still runs it."""

    class Status(models.TextChoices):
        OPEN = "open", _("Reported")
        TERMINATING = "terminating", _("Terminating")
        TERMINATED = "terminated", _("Terminated")
        ADOPTED = "adopted", _("Adopted into a lease")
        STUCK = "stuck", _("Termination keeps failing")

    account = models.ForeignKey(
        "rental.ProviderAccount", on_delete=models.PROTECT, related_name="orphans"
    )
    region = models.CharField(_("region"), max_length=32)
    external_id = models.CharField(_("cloud id"), max_length=64)
    instance_type = models.CharField(_("instance type"), max_length=40, blank=True)
    cloud_state = models.CharField(_("cloud state"), max_length=20, blank=True)
    tags = models.JSONField(_("tags"), default=dict, blank=True)
    launched_at = models.DateTimeField(_("launched at"), null=True, blank=True)
    hourly_cost = models.DecimalField(
        _("estimated cost per hour"), max_digits=12, decimal_places=6, null=True, blank=True
    )
    known_instance = models.ForeignKey(
        "rental.Instance",
        on_delete=models.SET_NULL,
        null=True,
        blank=True,
        related_name="+",
        verbose_name=_("ended row it belonged to"),
    )
    status = models.CharField(
        _("status"), max_length=16, choices=Status.choices, default=Status.OPEN
    )
    first_seen_at = models.DateTimeField(_("first seen at"))
    last_seen_at = models.DateTimeField(_("last seen at"))
    reported_at = models.DateTimeField(_("reported to admins at"), null=True, blank=True)
    terminate_failures = models.PositiveSmallIntegerField(_("failed terminations"), default=0)
    last_error = models.CharField(_("last error"), max_length=500, blank=True)
    adopted_into = models.ForeignKey(
        "rental.Reservation",
        on_delete=models.SET_NULL,
        null=True,
        blank=True,
        related_name="+",
        verbose_name=_("adopted into"),
    )

    class Meta:
        ordering = ["-first_seen_at", "-id"]
        verbose_name = _("orphan instance")
        verbose_name_plural = _("orphan instances")
        constraints = [
            models.UniqueConstraint(
                fields=["account", "external_id"], name="one_orphan_per_cloud_instance"
            ),
        ]

    def __str__(self) -> str:
        return f"{self.external_id} ({self.get_status_display()})"


class RegionSync(models.Model):
    """The sync of one provider account in one region (L3): each runs as its own task,
    claimed here so a duplicate delivery never runs the same region twice at once, and
    its last good sync and error are kept per region (the account shows them together)."""

    account = models.ForeignKey(
        "rental.ProviderAccount", on_delete=models.CASCADE, related_name="region_syncs"
    )
    region = models.CharField(_("region"), max_length=32)
    claimed_until = models.DateTimeField(_("claimed until"), null=True, blank=True)
    # When the last sync the beat asked for began: a tick of another beat within three
    # quarters of a period finds the period taken (rental.fleet.sync), however many beats.
    period_started_at = models.DateTimeField(_("last periodic sync began"), null=True, blank=True)
    synced_at = models.DateTimeField(_("last good sync"), null=True, blank=True)
    sync_error = models.TextField(_("last sync error"), blank=True)
    sync_failed_at = models.DateTimeField(_("last sync failed at"), null=True, blank=True)

    class Meta:
        ordering = ["account", "region"]
        verbose_name = _("region sync")
        verbose_name_plural = _("region syncs")
        constraints = [
            models.UniqueConstraint(fields=["account", "region"], name="one_sync_per_region")
        ]

    def __str__(self) -> str:
        return f"{self.account_id} {self.region}"
