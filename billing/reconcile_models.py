"""A provider's bill for a month, imported, and what the portal made of it (reconciliation).

The bill's lines are never kept one by one: an import keeps, per cloud resource, what the
provider charged each day at each rate (``CostImportItem.days`` and ``rates``), and the
portal's cost of the same instance beside it. Registered with the app by billing.models.
"""

from decimal import Decimal

from django.conf import settings
from django.db import models
from django.utils import timezone
from django.utils.translation import gettext_lazy as _


class CostImport(models.Model):
    class Format(models.TextChoices):
        CUR_CSV = "cur_csv", _("AWS Cost and Usage Report (CSV)")
        CUR_PARQUET = "cur_parquet", _("AWS Cost and Usage Report (Parquet)")
        SIMPLE_CSV = "simple_csv", _("Simple CSV (other providers)")

    class Status(models.TextChoices):
        CLEAR = "clear", _("Matches")
        REVIEW = "review", _("To be looked at")
        ACKNOWLEDGED = "acknowledged", _("Looked at")
        SUPERSEDED = "superseded", _("Replaced by a later import")

    account = models.ForeignKey(
        "rental.ProviderAccount",
        on_delete=models.PROTECT,
        null=True,
        blank=True,
        related_name="+",
        help_text=_("Empty: another provider's bill, matched by resource id and tags only."),
    )
    period = models.DateField(_("period"), help_text=_("The first day of the month."))
    file_name = models.CharField(_("file"), max_length=200)
    format = models.CharField(_("format"), max_length=16, choices=Format.choices)
    imported_by = models.ForeignKey(
        settings.AUTH_USER_MODEL, on_delete=models.SET_NULL, null=True, related_name="+"
    )
    imported_at = models.DateTimeField(_("imported at"), default=timezone.now)
    line_count = models.PositiveIntegerField(_("lines"), default=0)
    instance_line_count = models.PositiveIntegerField(_("instance lines"), default=0)
    currency = models.CharField(_("currency"), max_length=3)
    provider_total = models.DecimalField(
        _("provider's instance cost"), max_digits=24, decimal_places=10, default=Decimal("0")
    )
    other_total = models.DecimalField(
        _("provider's other charges"), max_digits=24, decimal_places=10, default=Decimal("0")
    )
    portal_total = models.DecimalField(
        _("portal's cost"), max_digits=24, decimal_places=10, default=Decimal("0")
    )
    threshold_percent = models.DecimalField(_("threshold (%)"), max_digits=5, decimal_places=2)
    flagged_count = models.PositiveIntegerField(_("flagged"), default=0)
    status = models.CharField(_("status"), max_length=16, choices=Status.choices)
    acknowledged_by = models.ForeignKey(
        settings.AUTH_USER_MODEL, on_delete=models.SET_NULL, null=True, blank=True, related_name="+"
    )
    acknowledged_at = models.DateTimeField(_("looked at on"), null=True, blank=True)
    acknowledgement = models.TextField(_("note"), blank=True)

    class Meta:
        ordering = ["-period", "-imported_at", "-id"]
        verbose_name = _("provider bill import")
        verbose_name_plural = _("provider bill imports")
        indexes = [models.Index(fields=["period", "status"])]
        constraints = [
            models.CheckConstraint(
                condition=models.Q(period__day=1), name="cost_import_period_is_month_start"
            ),
        ]

    def __str__(self) -> str:
        return f"{self.file_name} ({self.period:%Y-%m})"

    @property
    def difference(self) -> Decimal:
        return self.provider_total - self.portal_total


class CostImportItem(models.Model):
    """One cloud resource of an import: an instance the portal knew (matched by its cloud id
    or its tags), or one it did not; the provider's and the portal's cost of the month."""

    class Finding(models.TextChoices):
        MATCHES = "matches", _("Matches")
        PRICE = "price", _("Charged at another price")
        UNKNOWN = "unknown", _("Instance the portal never knew")
        MISSING_DAY = "missing_day", _("Day missing from the bill")
        EXTRA_DAY = "extra_day", _("Day the portal did not meter")
        PORTAL_ONLY = "portal_only", _("Not on the bill")
        HOURS = "hours", _("Different hours")
        CURRENCY = "currency", _("Other currency")

    cost_import = models.ForeignKey(CostImport, on_delete=models.CASCADE, related_name="items")
    instance = models.ForeignKey(
        "rental.Instance", on_delete=models.PROTECT, null=True, blank=True, related_name="+"
    )
    resource_id = models.CharField(_("resource id"), max_length=200)
    matched_by = models.CharField(_("matched by"), max_length=20, blank=True)
    project = models.ForeignKey(
        "portal.Project", on_delete=models.PROTECT, null=True, blank=True, related_name="+"
    )
    project_tag = models.CharField(_("project tag"), max_length=100, blank=True)
    gpu_model = models.ForeignKey(
        "rental.GpuModel", on_delete=models.PROTECT, null=True, blank=True, related_name="+"
    )
    instance_type = models.CharField(_("instance type"), max_length=60, blank=True)
    provider_hours = models.DecimalField(max_digits=20, decimal_places=8, default=Decimal("0"))
    provider_cost = models.DecimalField(max_digits=24, decimal_places=10, default=Decimal("0"))
    portal_hours = models.DecimalField(max_digits=20, decimal_places=8, default=Decimal("0"))
    portal_cost = models.DecimalField(max_digits=24, decimal_places=10, default=Decimal("0"))
    difference = models.DecimalField(max_digits=24, decimal_places=10, default=Decimal("0"))
    portal_rate = models.DecimalField(
        _("rate captured at launch"), max_digits=16, decimal_places=8, null=True, blank=True
    )
    provider_rate = models.DecimalField(
        _("rate charged"), max_digits=16, decimal_places=8, null=True, blank=True
    )
    explaining_offering = models.ForeignKey(
        "rental.Offering", on_delete=models.SET_NULL, null=True, blank=True, related_name="+"
    )
    finding = models.CharField(_("finding"), max_length=16, choices=Finding.choices)
    flagged = models.BooleanField(_("flagged"), default=False)
    # The findings' figures (findings beyond the first, days missing either side, the
    # catalog price that explains a rate) and the provider's days: {"YYYY-MM-DD": [hours,
    # cost]}; what the page explains in words.
    details = models.JSONField(_("details"), default=dict, blank=True)
    correction = models.ForeignKey(
        "billing.StatementLine", on_delete=models.PROTECT, null=True, blank=True, related_name="+"
    )

    class Meta:
        ordering = ["-flagged", "resource_id"]
        verbose_name = _("provider bill item")
        verbose_name_plural = _("provider bill items")
        indexes = [
            models.Index(fields=["cost_import", "flagged", "resource_id"]),
        ]

    def __str__(self) -> str:
        return f"{self.resource_id}: {self.get_finding_display()}"
