"""Monthly statements per project, their lines, and budgets with their alerts."""

from decimal import Decimal

from django.conf import settings
from django.db import models
from django.utils import timezone
from django.utils.translation import gettext_lazy as _


class Statement(models.Model):
    class Status(models.TextChoices):
        DRAFT = "draft", _("Draft")
        CLOSED = "closed", _("Closed")
        APPROVED = "approved", _("Approved")
        DISPUTED = "disputed", _("Disputed")

    project = models.ForeignKey(
        "portal.Project", on_delete=models.PROTECT, related_name="statements"
    )
    period = models.DateField(_("period"), help_text=_("The first day of the month."))
    status = models.CharField(
        _("status"), max_length=16, choices=Status.choices, default=Status.DRAFT
    )
    total = models.DecimalField(_("total"), max_digits=14, decimal_places=2, default=Decimal("0"))
    currency = models.CharField(_("currency"), max_length=3, default="USD")
    closed_at = models.DateTimeField(_("closed at"), null=True, blank=True)
    decided_by = models.ForeignKey(
        settings.AUTH_USER_MODEL, on_delete=models.SET_NULL, null=True, blank=True, related_name="+"
    )
    decided_at = models.DateTimeField(_("decided at"), null=True, blank=True)

    class Meta:
        ordering = ["-period", "project__slug"]
        verbose_name = _("statement")
        verbose_name_plural = _("statements")
        constraints = [
            models.UniqueConstraint(fields=["project", "period"], name="one_statement_per_period"),
            models.CheckConstraint(
                condition=models.Q(period__day=1), name="statement_period_is_month_start"
            ),
        ]

    def __str__(self) -> str:
        return f"{self.project.slug} {self.period:%Y-%m}"


class StatementLine(models.Model):
    class Kind(models.TextChoices):
        USAGE = "usage", _("Usage")
        COMMITTED_SHARE = "committed_share", _("Committed share")
        RESERVATION = "reservation", _("Reservation")
        SHARED_RESIDUAL = "shared_residual", _("Shared residual")
        STORAGE = "storage", _("Storage")
        ADJUSTMENT = "adjustment", _("Adjustment")
        CREDIT = "credit", _("Credit")

    statement = models.ForeignKey(Statement, on_delete=models.CASCADE, related_name="lines")
    kind = models.CharField(_("kind"), max_length=20, choices=Kind.choices)
    gpu_model = models.ForeignKey(
        "rental.GpuModel", on_delete=models.PROTECT, null=True, blank=True, related_name="+"
    )
    market = models.CharField(_("market"), max_length=16, blank=True)
    tier = models.CharField(_("tier"), max_length=16, blank=True)
    quantity = models.DecimalField(
        _("GPU-hours"), max_digits=16, decimal_places=6, default=Decimal("0")
    )
    unit_price = models.DecimalField(
        _("unit price"), max_digits=12, decimal_places=6, default=Decimal("0")
    )
    amount = models.DecimalField(_("amount"), max_digits=14, decimal_places=2)
    description = models.CharField(_("description"), max_length=300)
    references = models.JSONField(_("references"), default=dict, blank=True)
    dispute_comment = models.TextField(_("dispute comment"), blank=True)

    class Meta:
        ordering = ["statement", "kind", "id"]
        verbose_name = _("statement line")
        verbose_name_plural = _("statement lines")

    def __str__(self) -> str:
        return f"{self.description}: {self.amount}"


class Budget(models.Model):
    class CapPolicy(models.TextChoices):
        REFUSE_NEW = "refuse_new", _("Refuse new burst, spot and reservations")
        STOP_BURST = "stop_burst", _("Also stop running burst leases")

    project = models.OneToOneField(
        "portal.Project", on_delete=models.CASCADE, related_name="budget"
    )
    monthly_amount = models.DecimalField(_("monthly amount"), max_digits=14, decimal_places=2)
    thresholds = models.JSONField(
        _("thresholds"),
        default=list,
        blank=True,
        help_text=_(
            'e.g. [{"percent": 50, "kind": "actual"}, {"percent": 100, "kind": "forecast"}]'
        ),
    )
    cap_policy = models.CharField(
        _("cap policy"), max_length=16, choices=CapPolicy.choices, default=CapPolicy.REFUSE_NEW
    )

    class Meta:
        verbose_name = _("budget")
        verbose_name_plural = _("budgets")
        constraints = [
            models.CheckConstraint(
                condition=models.Q(monthly_amount__gte=0), name="budget_not_negative"
            ),
        ]

    def __str__(self) -> str:
        return f"{self.project.slug}: {self.monthly_amount}/month"


class BudgetAlert(models.Model):
    class Kind(models.TextChoices):
        ACTUAL = "actual", _("Actual")
        FORECAST = "forecast", _("Forecast")

    budget = models.ForeignKey(Budget, on_delete=models.CASCADE, related_name="alerts")
    period = models.DateField(_("period"))
    percent = models.PositiveSmallIntegerField(_("percent"))
    kind = models.CharField(_("kind"), max_length=16, choices=Kind.choices)
    value = models.DecimalField(_("value"), max_digits=14, decimal_places=2)
    fired_at = models.DateTimeField(_("fired at"), default=timezone.now)

    class Meta:
        ordering = ["-fired_at"]
        verbose_name = _("budget alert")
        verbose_name_plural = _("budget alerts")
        constraints = [
            models.UniqueConstraint(
                fields=["budget", "period", "percent", "kind"], name="alert_once_per_period"
            ),
        ]

    def __str__(self) -> str:
        return f"{self.budget.project.slug} {self.period:%Y-%m} {self.percent}% {self.kind}"
