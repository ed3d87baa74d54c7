"""Cloud time after billing stopped (L5): recorded by ``rental.fleet.unbilled``, shown on
the pool's page and billed to the platform."""

from django.db import models
from django.utils.translation import gettext_lazy as _

from rental.models.currency import ONE, RATE_DECIMALS, RATE_DIGITS, billing_currency
from rental.models.leases import Instance, Market


class UnbilledCloudTime(models.Model):
    """Cloud time after billing stopped: from an instance's last usage end to the cloud's
    own termination time (a termination that waited for a worker, a retry, the cloud's
    shutdown). The company pays it and no project does, so billing shows it as the pool's
    platform line and the pool's cost still reconciles with the cloud's bill."""

    instance = models.OneToOneField(Instance, on_delete=models.PROTECT, related_name="unbilled")
    gpu_model = models.ForeignKey("rental.GpuModel", on_delete=models.PROTECT, related_name="+")
    gpu_count = models.PositiveSmallIntegerField(_("GPUs"))
    market = models.CharField(_("market"), max_length=16, choices=Market.choices)
    start = models.DateTimeField(_("billing stopped at"), db_index=True)
    end = models.DateTimeField(_("the cloud ended it at"))
    gpu_seconds = models.PositiveBigIntegerField(_("GPU-seconds"))
    rate = models.DecimalField(_("rate per GPU-hour"), max_digits=12, decimal_places=6)
    currency = models.CharField(_("currency"), max_length=3, default=billing_currency)
    exchange_rate = models.DecimalField(
        _("exchange rate at launch"),
        max_digits=RATE_DIGITS,
        decimal_places=RATE_DECIMALS,
        default=ONE,
    )

    class Meta:
        ordering = ["start", "id"]
        verbose_name = _("unbilled cloud time")
        verbose_name_plural = _("unbilled cloud time")
        constraints = [
            models.CheckConstraint(
                condition=models.Q(end__gt=models.F("start")), name="unbilled_ends_after_start"
            ),
        ]

    def __str__(self) -> str:
        return f"{self.instance_id}: {self.start:%Y-%m-%d %H:%M:%S} to {self.end:%H:%M:%S} UTC"
