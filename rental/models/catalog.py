"""What can be rented: GPU models, provider accounts, their offerings and images."""

from decimal import Decimal

from django.conf import settings
from django.db import models
from django.utils import timezone
from django.utils.translation import gettext_lazy as _

from portal import crypto
from portal.phrases import PhraseField
from rental.providers.account_options import frozen
from rental.providers.base import AccountConfig, Credentials
from rental.providers.registry import DRIVER_CHOICES


class GpuModel(models.Model):
    class Vendor(models.TextChoices):
        NVIDIA = "nvidia", "NVIDIA"
        HUAWEI = "huawei", _("Huawei Ascend")
        AMD = "amd", "AMD"

    class Interconnect(models.TextChoices):
        PCIE = "pcie", "PCIe"
        NVLINK = "nvlink", "NVLink"
        HCCS = "hccs", "HCCS"

    name = models.CharField(_("name"), max_length=60, unique=True)
    vendor = models.CharField(_("vendor"), max_length=16, choices=Vendor.choices)
    memory_gb = models.PositiveIntegerField(_("memory (GB)"))
    memory_bandwidth_gbps = models.PositiveIntegerField(_("memory bandwidth (GB/s)"))
    bf16_tflops = models.DecimalField(_("BF16 TFLOPS (dense)"), max_digits=8, decimal_places=1)
    fp16_tflops = models.DecimalField(_("FP16 TFLOPS (dense)"), max_digits=8, decimal_places=1)
    interconnect = models.CharField(_("interconnect"), max_length=16, choices=Interconnect.choices)
    notes = models.TextField(_("notes"), blank=True)

    class Meta:
        ordering = ["vendor", "memory_gb", "name"]
        verbose_name = _("GPU model")
        verbose_name_plural = _("GPU models")

    def __str__(self) -> str:
        return self.name


class ProviderAccount(models.Model):
    class Status(models.TextChoices):
        UNVERIFIED = "unverified", _("Unverified")
        OK = "ok", _("OK")
        FAILED = "failed", _("Failed")

    name = models.CharField(_("name"), max_length=80, unique=True)
    driver = models.CharField(_("driver"), max_length=16, choices=DRIVER_CHOICES)
    regions = models.JSONField(_("regions"), default=list, help_text=_('e.g. ["us-east-1"]'))
    endpoint_url = models.URLField(
        _("endpoint URL"),
        blank=True,
        help_text=_("Optional: any EC2-compatible endpoint. Empty means the provider's own."),
    )
    credentials_encrypted = models.TextField(
        _("credentials (encrypted)"), blank=True, editable=False
    )
    status = models.CharField(
        _("status"), max_length=16, choices=Status.choices, default=Status.UNVERIFIED
    )
    status_message = models.TextField(_("status message"), blank=True)
    checked_at = models.DateTimeField(_("checked at"), null=True, blank=True)
    is_active = models.BooleanField(_("active"), default=True)
    synced_at = models.DateTimeField(_("last good sync"), null=True, blank=True)
    sync_error = models.TextField(_("last sync error"), blank=True)
    sync_failed_at = models.DateTimeField(_("last sync failed at"), null=True, blank=True)
    # The cloud account these credentials reach, as the cloud names it (EC2: the owner id
    # of the instances a sync lists); two accounts reaching one are reported to admins.
    cloud_account_id = models.CharField(_("cloud account"), max_length=64, blank=True)
    # What the driver declares it takes (rental.providers.registry: ``account_options``),
    # checked by ``clean_account_options`` wherever an admin sets them.
    options = models.JSONField(
        _("driver options"),
        default=dict,
        blank=True,
        help_text=_("Settings of this account's driver, as a JSON object; not secrets."),
    )

    class Meta:
        ordering = ["name"]
        verbose_name = _("provider account")
        verbose_name_plural = _("provider accounts")

    def __str__(self) -> str:
        return self.name

    @property
    def has_credentials(self) -> bool:
        return bool(self.credentials_encrypted)

    @property
    def default_region(self) -> str:
        return self.regions[0] if self.regions else "us-east-1"

    def set_credentials(
        self, *, access_key_id: str, secret_access_key: str, session_token: str = ""
    ) -> None:
        self.credentials_encrypted = crypto.encrypt(
            {
                "access_key_id": access_key_id,
                "secret_access_key": secret_access_key,
                "session_token": session_token,
            }
        )

    def config(self) -> AccountConfig:
        """The plain data a driver needs; decrypts the credentials in memory only."""
        values = crypto.decrypt(self.credentials_encrypted) if self.credentials_encrypted else {}
        return AccountConfig(
            driver=self.driver,
            credentials=Credentials(
                access_key_id=values.get("access_key_id", ""),
                secret_access_key=values.get("secret_access_key", ""),
                session_token=values.get("session_token", ""),
            ),
            endpoint_url=self.endpoint_url,
            default_region=self.default_region,
            hosts=self._host_configs(),
            options=frozen(self.options or {}),
        )

    def _host_configs(self) -> tuple:
        """The active own servers of an ``ssh`` account (none for a cloud's)."""
        if self.driver != "ssh" or self.pk is None:
            return ()
        return tuple(host.config() for host in self.own_hosts.filter(is_active=True))


class Offering(models.Model):
    class Currency(models.TextChoices):
        USD = "USD", "USD"
        CNY = "CNY", "CNY"
        EUR = "EUR", "EUR"

    account = models.ForeignKey(
        ProviderAccount,
        on_delete=models.CASCADE,
        related_name="offerings",
        verbose_name=_("provider account"),
    )
    region = models.CharField(_("region"), max_length=32)
    instance_type = models.CharField(_("instance type"), max_length=40)
    gpu_model = models.ForeignKey(
        GpuModel, on_delete=models.PROTECT, related_name="offerings", verbose_name=_("GPU model")
    )
    gpus_per_instance = models.PositiveSmallIntegerField(_("GPUs per instance"))
    vcpus = models.PositiveSmallIntegerField(_("vCPUs"))
    memory_gib = models.PositiveIntegerField(_("memory (GiB)"))
    on_demand_price_per_hour = models.DecimalField(
        _("on-demand price per hour"), max_digits=12, decimal_places=6
    )
    spot_price_per_hour = models.DecimalField(
        _("spot price per hour"), max_digits=12, decimal_places=6, null=True, blank=True
    )
    storage_price_per_gb_month = models.DecimalField(
        _("storage price per GB-month"), max_digits=12, decimal_places=6, default=Decimal("0.08")
    )
    currency = models.CharField(
        _("currency"), max_length=3, choices=Currency.choices, default=Currency.USD
    )
    root_disk_gb = models.PositiveIntegerField(
        _("root disk (GB)"),
        default=100,
        help_text=_("The instance's root disk; billed as storage while it is stopped (B8)."),
    )
    price_updated_at = models.DateField(_("price taken on"), default=timezone.now)
    is_available = models.BooleanField(_("available"), default=True)
    zones = models.JSONField(
        _("availability zones"),
        default=list,
        blank=True,
        help_text=_(
            'Tried in this order when one has no capacity, e.g. ["us-east-1a"]. '
            "Empty: the cloud chooses."
        ),
    )
    driver_version = models.CharField(
        _("NVIDIA driver"),
        max_length=30,
        blank=True,
        help_text=_("The driver its hosts run, e.g. 535.183. Empty: unknown, not checked."),
    )
    max_cuda_version = models.CharField(
        _("highest CUDA"),
        max_length=30,
        blank=True,
        help_text=_("The highest CUDA version that driver supports, e.g. 12.2."),
    )

    class Meta:
        ordering = ["gpu_model__name", "gpus_per_instance", "on_demand_price_per_hour"]
        verbose_name = _("offering")
        verbose_name_plural = _("offerings")
        constraints = [
            models.UniqueConstraint(
                fields=["account", "region", "instance_type"], name="one_offering_per_type"
            ),
            models.CheckConstraint(
                condition=models.Q(gpus_per_instance__gte=1), name="offering_has_gpus"
            ),
            models.CheckConstraint(
                condition=models.Q(on_demand_price_per_hour__gte=0), name="offering_price_positive"
            ),
        ]

    def __str__(self) -> str:
        return f"{self.instance_type} ({self.gpus_per_instance}× {self.gpu_model}, {self.region})"

    def price_per_hour(self, market: str) -> Decimal | None:
        """The instance-hour price for a market, None where that market is not sold."""
        if market == "spot":
            return self.spot_price_per_hour
        return self.on_demand_price_per_hour

    def rate_per_gpu_hour(self, market: str) -> Decimal | None:
        price = self.price_per_hour(market)
        if price is None:
            return None
        return (price / self.gpus_per_instance).quantize(Decimal("0.000001"))


class Image(models.Model):
    """A machine image: a site image (no project) or one a project saved from a lease."""

    class State(models.TextChoices):
        PENDING = "pending", _("Being saved")
        AVAILABLE = "available", _("Available")
        FAILED = "failed", _("Failed")

    name = models.CharField(_("name"), max_length=120)
    account = models.ForeignKey(
        ProviderAccount,
        on_delete=models.CASCADE,
        related_name="images",
        verbose_name=_("provider account"),
    )
    region = models.CharField(_("region"), max_length=32)
    image_id = models.CharField(_("image id"), max_length=64, blank=True)
    os = models.CharField(_("operating system"), max_length=60)
    driver_version = models.CharField(
        _("NVIDIA driver required"),
        max_length=30,
        blank=True,
        help_text=_("The oldest driver its CUDA runs on, e.g. 550.54."),
    )
    cuda_version = models.CharField(_("CUDA"), max_length=30, blank=True)
    frameworks = models.CharField(
        _("software"),
        max_length=200,
        blank=True,
        help_text=_("Free text shown with the image, e.g. 'PyTorch 2.5, JupyterLab 4.2'."),
    )
    framework_versions = models.JSONField(
        _("framework versions"),
        default=dict,
        blank=True,
        help_text=_('Framework → version, e.g. {"PyTorch": "2.5.1", "PaddlePaddle": "2.6.2"}.'),
    )
    state = models.CharField(
        _("state"), max_length=16, choices=State.choices, default=State.AVAILABLE, db_index=True
    )
    # Why it failed, kept as a phrase (portal.phrases), said in the reader's language.
    state_message = PhraseField(_("state detail"))
    # Saved from a lease (project images): which instance, by whom, and the key that makes
    # the cloud's CreateImage happen once however often its task is delivered.
    source_instance = models.ForeignKey(
        "rental.Instance",
        on_delete=models.SET_NULL,
        null=True,
        blank=True,
        related_name="saved_images",
        verbose_name=_("saved from instance"),
    )
    created_by = models.ForeignKey(
        settings.AUTH_USER_MODEL,
        on_delete=models.SET_NULL,
        null=True,
        blank=True,
        related_name="+",
        verbose_name=_("saved by"),
    )
    idempotency_key = models.CharField(max_length=64, blank=True, editable=False)
    available_at = models.DateTimeField(_("available since"), null=True, blank=True)
    ssh_user = models.CharField(_("SSH user"), max_length=32, default="ubuntu")
    project = models.ForeignKey(
        "portal.Project",
        on_delete=models.CASCADE,
        null=True,
        blank=True,
        related_name="images",
        help_text=_("Empty: public to all projects."),
    )
    source_reservation = models.ForeignKey(
        "rental.Reservation",
        on_delete=models.SET_NULL,
        null=True,
        blank=True,
        related_name="+",
    )
    is_active = models.BooleanField(_("active"), default=True)
    created_at = models.DateTimeField(_("created at"), default=timezone.now)

    class Meta:
        ordering = ["name"]
        verbose_name = _("image")
        verbose_name_plural = _("images")
        constraints = [
            models.UniqueConstraint(
                fields=["account", "region", "image_id"],
                condition=~models.Q(image_id=""),
                name="one_image_per_id",
            ),
            models.UniqueConstraint(
                fields=["project", "name"],
                condition=models.Q(project__isnull=False),
                name="one_image_name_per_project",
            ),
        ]

    def __str__(self) -> str:
        return self.name

    @property
    def is_site_image(self) -> bool:
        return self.project_id is None
