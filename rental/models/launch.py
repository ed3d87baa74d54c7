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
