"""A project's data volumes: cloud disks that outlive the instances they attach to."""

import uuid

from django.conf import settings
from django.db import models
from django.utils import timezone
from django.utils.translation import gettext_lazy as _

from portal.phrases import PhraseField
from rental.models.leases import Instance


class DataVolume(models.Model):
    """A project's EBS-style disk that outlives leases (issue 8.9): created through the
    driver, attached to one lease's instance at a time, never deleted by the platform."""

    class State(models.TextChoices):
        CREATING = "creating", _("Creating")
        AVAILABLE = "available", _("Available")
        ATTACHING = "attaching", _("Attaching")
        IN_USE = "in_use", _("In use")
        FAILED = "failed", _("Failed")
        DELETING = "deleting", _("Deleting")
        DELETED = "deleted", _("Deleted")

    # States in which the volume exists in the cloud (and is billed, B8).
    EXISTING = (State.AVAILABLE, State.ATTACHING, State.IN_USE, State.DELETING)

    project = models.ForeignKey("portal.Project", on_delete=models.PROTECT, related_name="volumes")
    account = models.ForeignKey(
        "rental.ProviderAccount", on_delete=models.PROTECT, related_name="volumes"
    )
    name = models.CharField(_("name"), max_length=80)
    region = models.CharField(_("region"), max_length=32, default="")
    zone = models.CharField(_("zone"), max_length=40)
    size_gb = models.PositiveIntegerField(_("size (GB)"))
    volume_id = models.CharField(_("volume id"), max_length=64, blank=True)
    idempotency_key = models.CharField(
        _("idempotency key"), max_length=64, unique=True, default="", editable=False
    )
    state = models.CharField(
        _("state"), max_length=16, choices=State.choices, default=State.CREATING
    )
    storage_rate_per_gb_month = models.DecimalField(
        _("storage price per GB-month"), max_digits=12, decimal_places=6, default=0
    )
    attached_instance = models.ForeignKey(
        Instance, on_delete=models.SET_NULL, null=True, blank=True, related_name="volumes"
    )
    device = models.CharField(_("device"), max_length=32, blank=True)
    claimed_at = models.DateTimeField(_("cloud work claimed at"), null=True, blank=True)
    last_error = PhraseField(_("last error"))
    created_by = models.ForeignKey(
        settings.AUTH_USER_MODEL,
        on_delete=models.SET_NULL,
        null=True,
        blank=True,
        related_name="+",
        verbose_name=_("created by"),
    )
    created_at = models.DateTimeField(_("created at"), default=timezone.now)
    deleted_at = models.DateTimeField(_("deleted at"), null=True, blank=True)

    class Meta:
        ordering = ["name"]
        verbose_name = _("data volume")
        verbose_name_plural = _("data volumes")
        constraints = [
            models.CheckConstraint(condition=models.Q(size_gb__gte=1), name="volume_has_size"),
            models.UniqueConstraint(
                fields=["project", "name"],
                condition=~models.Q(state="deleted"),
                name="one_live_volume_name_per_project",
            ),
        ]

    def __str__(self) -> str:
        return f"{self.name} ({self.size_gb} GB)"

    def save(self, *args: object, **kwargs: object) -> None:
        if not self.idempotency_key:
            self.idempotency_key = f"{settings.PORTAL_INSTALLATION_ID}-vol-{uuid.uuid4().hex}"[:64]
        super().save(*args, **kwargs)
