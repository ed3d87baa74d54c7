"""The company's own GPU servers: hosts of a provider account whose driver is ``ssh``.

A host's GPUs are found by the driver (``nvidia-smi`` over SSH) and kept here as the last
report; offerings of its account are made from them, one per GPU model and GPU count, with
the hosts as the offering's zones. What it cost to buy is spread over its months of
amortisation as committed cost (B4); power is the offering's price per GPU-hour.
"""

from decimal import Decimal

from django.core.validators import MaxValueValidator, MinValueValidator
from django.db import models
from django.utils import timezone
from django.utils.translation import gettext_lazy as _

from portal import crypto
from rental.models.catalog import ProviderAccount
from rental.providers.base import HostConfig


class OwnHost(models.Model):
    class State(models.TextChoices):
        UNKNOWN = "unknown", _("Not checked yet")
        OK = "ok", _("Answering")
        UNREACHABLE = "unreachable", _("Not answering")

    account = models.ForeignKey(
        ProviderAccount,
        on_delete=models.PROTECT,
        related_name="own_hosts",
        verbose_name=_("provider account"),
        limit_choices_to={"driver": "ssh"},
    )
    name = models.SlugField(
        _("name"), max_length=40, help_text=_("Short and unique in its site, e.g. gpu-box-1.")
    )
    address = models.CharField(_("address"), max_length=255, help_text=_("Host name or IP."))
    port = models.PositiveIntegerField(
        _("SSH port"), default=22, validators=[MinValueValidator(1), MaxValueValidator(65535)]
    )
    username = models.CharField(
        _("SSH user"),
        max_length=32,
        default="root",
        help_text=_("root, or an account that may run sudo without a password."),
    )
    private_key_encrypted = models.TextField(
        _("private key (encrypted)"), blank=True, editable=False
    )
    host_key = models.TextField(
        _("host key"),
        blank=True,
        help_text=_("The server's known_hosts line; empty: pinned at the first contact."),
    )
    purchase_price = models.DecimalField(
        _("purchase price"), max_digits=14, decimal_places=2, default=Decimal("0")
    )
    currency = models.CharField(_("currency"), max_length=3, default="USD")
    amortisation_months = models.PositiveIntegerField(
        _("months of amortisation"), default=36, validators=[MinValueValidator(1)]
    )
    in_service_since = models.DateField(_("in service since"), default=timezone.now)
    power_price_per_gpu_hour = models.DecimalField(
        _("power price per GPU-hour"), max_digits=10, decimal_places=4, default=Decimal("0")
    )
    # The last report of nvidia-smi: [{"index", "name", "memory_mib", "uuid", "gpu_model"
    # (a GpuModel id, or null where the catalog has no such model)}, ...]
    gpus = models.JSONField(_("GPUs found"), default=list, blank=True)
    state = models.CharField(
        _("state"), max_length=16, choices=State.choices, default=State.UNKNOWN
    )
    state_message = models.TextField(_("state message"), blank=True)
    checked_at = models.DateTimeField(_("checked at"), null=True, blank=True)
    unreachable_since = models.DateTimeField(_("not answering since"), null=True, blank=True)
    is_active = models.BooleanField(_("active"), default=True)

    class Meta:
        ordering = ["account", "name"]
        verbose_name = _("own GPU server")
        verbose_name_plural = _("own GPU servers")
        constraints = [
            models.UniqueConstraint(fields=["account", "name"], name="one_own_host_per_name"),
            models.CheckConstraint(
                condition=models.Q(purchase_price__gte=0), name="own_host_price_not_negative"
            ),
            models.CheckConstraint(
                condition=models.Q(power_price_per_gpu_hour__gte=0),
                name="own_host_power_not_negative",
            ),
        ]

    def __str__(self) -> str:
        return self.name

    @property
    def has_private_key(self) -> bool:
        return bool(self.private_key_encrypted)

    def set_private_key(self, private_key: str) -> None:
        self.private_key_encrypted = crypto.encrypt({"private_key": private_key})

    def config(self) -> HostConfig:
        """The plain data the driver needs; decrypts the key in memory only."""
        values = crypto.decrypt(self.private_key_encrypted) if self.private_key_encrypted else {}
        return HostConfig(
            name=self.name,
            address=self.address,
            port=self.port,
            username=self.username,
            private_key=values.get("private_key", ""),
            host_key=self.host_key,
        )

    def gpu_models(self) -> dict[int, int]:
        """GPUs per catalog model id among the GPUs found (unmapped ones left out)."""
        counts: dict[int, int] = {}
        for gpu in self.gpus:
            model_id = gpu.get("gpu_model")
            if model_id is not None:
                counts[model_id] = counts.get(model_id, 0) + 1
        return counts
