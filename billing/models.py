"""Monthly statements per project, their lines, and budgets with their alerts."""

from decimal import Decimal

from django.conf import settings
from django.db import models
from django.utils import timezone
from django.utils.translation import gettext_lazy as _

# The provider bill imports live beside the statements; importing them registers them.
from billing import reconcile_models  # noqa: F401


class Statement(models.Model):
    class Status(models.TextChoices):
        DRAFT = "draft", _("Draft")
        CLOSED = "closed", _("Closed")
        APPROVED = "approved", _("Approved")
        DISPUTED = "disputed", _("Disputed")

    project = models.ForeignKey(
        "portal.Project",
        on_delete=models.PROTECT,
        related_name="statements",
        null=True,
        blank=True,
        help_text=_("Empty for the platform's own statement (overhead no project pays)."),
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
            models.UniqueConstraint(
                fields=["period"],
                condition=models.Q(project__isnull=True),
                name="one_platform_statement_per_period",
            ),
            models.CheckConstraint(
                condition=models.Q(period__day=1), name="statement_period_is_month_start"
            ),
        ]

    def __str__(self) -> str:
        return f"{self.project.slug if self.project else 'platform'} {self.period:%Y-%m}"


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
    locked = models.BooleanField(
        _("closed"),
        default=False,
        help_text=_("A closed line never changes; the database refuses to update or delete it."),
    )
    created_at = models.DateTimeField(_("created at"), default=timezone.now)
    created_by = models.ForeignKey(
        settings.AUTH_USER_MODEL, on_delete=models.SET_NULL, null=True, blank=True, related_name="+"
    )

    class Meta:
        ordering = ["statement", "kind", "id"]
        verbose_name = _("statement line")
        verbose_name_plural = _("statement lines")

    def __str__(self) -> str:
        return f"{self.description}: {self.amount}"

    @property
    def gpu_seconds(self) -> int:
        return int(self.references.get("gpu_seconds", 0))


class LineDispute(models.Model):
    """A manager's dispute of one statement line, and the admin's answer (P2).

    Kept apart from the line so that a closed line never changes.
    """

    class Status(models.TextChoices):
        OPEN = "open", _("Open")
        ANSWERED = "answered", _("Answered")

    line = models.ForeignKey(StatementLine, on_delete=models.PROTECT, related_name="disputes")
    comment = models.TextField(_("comment"))
    raised_by = models.ForeignKey(
        settings.AUTH_USER_MODEL, on_delete=models.PROTECT, related_name="+"
    )
    raised_at = models.DateTimeField(_("raised at"), default=timezone.now)
    status = models.CharField(
        _("status"), max_length=16, choices=Status.choices, default=Status.OPEN
    )
    answer = models.TextField(_("answer"), blank=True)
    answered_by = models.ForeignKey(
        settings.AUTH_USER_MODEL, on_delete=models.SET_NULL, null=True, blank=True, related_name="+"
    )
    answered_at = models.DateTimeField(_("answered at"), null=True, blank=True)
    correction = models.ForeignKey(
        StatementLine, on_delete=models.PROTECT, null=True, blank=True, related_name="answers"
    )

    class Meta:
        ordering = ["-raised_at"]
        verbose_name = _("line dispute")
        verbose_name_plural = _("line disputes")

    def __str__(self) -> str:
        return f"{self.line}: {self.comment[:40]}"


class UpfrontPayment(models.Model):
    """A payment for committed capacity made once and spread over its term (B3, B4)."""

    pool = models.ForeignKey("rental.Pool", on_delete=models.PROTECT, related_name="+")
    amount = models.DecimalField(_("amount"), max_digits=14, decimal_places=2)
    first_month = models.DateField(_("first month"), help_text=_("The first day of a month."))
    months = models.PositiveSmallIntegerField(_("term in months"))
    description = models.CharField(_("description"), max_length=200, blank=True)

    class Meta:
        ordering = ["first_month"]
        verbose_name = _("upfront payment")
        verbose_name_plural = _("upfront payments")
        constraints = [
            models.CheckConstraint(
                condition=models.Q(first_month__day=1), name="upfront_starts_on_month_start"
            ),
            models.CheckConstraint(condition=models.Q(months__gte=1), name="upfront_has_term"),
            models.CheckConstraint(condition=models.Q(amount__gte=0), name="upfront_not_negative"),
        ]

    def __str__(self) -> str:
        return f"{self.pool}: {self.amount} over {self.months} months from {self.first_month:%Y-%m}"


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


class SpendSnapshot(models.Model):
    """A project's month-to-date spend as of a moment (BU2 actual), for the budget cap's
    cheap read at admission. Rewritten for every project by the periodic refresh; a manual
    line added to the open period adds its amount here at once (lines are additive)."""

    project = models.ForeignKey(
        "portal.Project", on_delete=models.CASCADE, related_name="+", db_index=False
    )
    period = models.DateField(_("period"))
    amount = models.DecimalField(_("spend"), max_digits=14, decimal_places=2)
    as_of = models.DateTimeField(_("as of"))

    class Meta:
        verbose_name = _("spend snapshot")
        verbose_name_plural = _("spend snapshots")
        constraints = [
            models.UniqueConstraint(fields=["project", "period"], name="one_spend_snapshot"),
        ]

    def __str__(self) -> str:
        return f"{self.project_id} {self.period:%Y-%m}: {self.amount} as of {self.as_of}"


class UsageRollup(models.Model):
    """Billed GPU-seconds of closed usage runs in one period, per project and usage key
    (``billing.periods.GROUP_FIELDS``): what a statement needs of other projects' usage
    without reading their runs. Written only by ``billing.rollups``; open runs and runs not
    rolled up yet are read live beside it."""

    period = models.DateField(_("period"))
    project = models.ForeignKey("portal.Project", on_delete=models.CASCADE, related_name="+")
    gpu_model = models.ForeignKey(
        "rental.GpuModel", on_delete=models.CASCADE, related_name="+", db_index=False
    )
    market = models.CharField(_("market"), max_length=16)
    tier = models.CharField(_("tier"), max_length=16)
    rate = models.DecimalField(_("rate per GPU-hour"), max_digits=12, decimal_places=6)
    currency = models.CharField(_("currency"), max_length=3)
    exchange_rate = models.DecimalField(_("exchange rate"), max_digits=20, decimal_places=8)
    exchange_rate_ref = models.ForeignKey(
        "rental.ExchangeRate",
        on_delete=models.PROTECT,
        null=True,
        blank=True,
        related_name="+",
        db_index=False,
    )
    gpu_seconds = models.BigIntegerField(_("GPU-seconds"))
    runs = models.PositiveIntegerField(_("runs"))

    class Meta:
        verbose_name = _("usage rollup")
        verbose_name_plural = _("usage rollups")
        indexes = [models.Index(fields=["period", "gpu_model"])]

    def __str__(self) -> str:
        return f"{self.period:%Y-%m} project {self.project_id}: {self.gpu_seconds} GPU-s"


class RequesterRollup(models.Model):
    """Billed GPU-seconds of closed usage runs in one period, per project, requester and
    rate (``billing.rollups.REQUESTER_FIELDS``): a statement's "spend per requester"
    without reading the project's month of runs. Written beside ``UsageRollup``, under the
    same period lock and version."""

    period = models.DateField(_("period"))
    project = models.ForeignKey("portal.Project", on_delete=models.CASCADE, related_name="+")
    # A plain id: a person's rows outlive nothing, and the rollup never joins the users.
    requester_id = models.IntegerField(_("requester"), null=True)
    rate = models.DecimalField(_("rate per GPU-hour"), max_digits=12, decimal_places=6)
    currency = models.CharField(_("currency"), max_length=3)
    exchange_rate = models.DecimalField(_("exchange rate"), max_digits=20, decimal_places=8)
    gpu_seconds = models.BigIntegerField(_("GPU-seconds"))
    runs = models.PositiveIntegerField(_("runs"))

    class Meta:
        verbose_name = _("requester rollup")
        verbose_name_plural = _("requester rollups")
        indexes = [models.Index(fields=["period", "project"])]

    def __str__(self) -> str:
        return f"{self.period:%Y-%m} project {self.project_id} by {self.requester_id}"


class RolledPeriod(models.Model):
    """One period's rollup state: the latest end of a run in it (a computation as of an
    earlier moment cannot use the rollups) and a version bumped by every roll-up that
    touches it, so a reader sees the rollups and the live runs from one moment."""

    period = models.DateField(_("period"), unique=True)
    through = models.DateTimeField(_("rolled up through"))
    version = models.PositiveBigIntegerField(_("version"), default=0)

    class Meta:
        verbose_name = _("rolled-up period")
        verbose_name_plural = _("rolled-up periods")

    def __str__(self) -> str:
        return f"{self.period:%Y-%m} through {self.through:%Y-%m-%d %H:%M:%S} (v{self.version})"


class DraftLines(models.Model):
    """One project's computed lines of the open month as of a moment, written for every
    project at once by the minute's spend refresh, so a statement page reads its own lines
    rather than computing every project's. ``project_key`` 0 is the platform's row, written
    at every refresh (it also carries the pools' figures): its ``as_of`` says how fresh the
    period's rows are. Manual lines are not here; they are read live beside these."""

    PLATFORM = 0

    period = models.DateField(_("period"))
    project_key = models.IntegerField(_("project"))
    as_of = models.DateTimeField(_("as of"))
    covered_end = models.DateTimeField(_("computed to"))
    lines = models.JSONField(_("lines"), default=list)
    pools = models.JSONField(_("pools"), default=dict)
    # The lines' count and sum, for the finance page's rows (it draws no line).
    line_count = models.PositiveIntegerField(_("lines"), default=0)
    total = models.DecimalField(_("total"), max_digits=30, decimal_places=2, default=0)
    # Spend per requester as of the same moment: [requester, GPU-seconds, value] rows.
    requesters = models.JSONField(_("requesters"), default=list)

    class Meta:
        verbose_name = _("draft lines")
        verbose_name_plural = _("draft lines")
        constraints = [
            models.UniqueConstraint(fields=["period", "project_key"], name="one_draft_lines"),
        ]

    def __str__(self) -> str:
        return f"{self.period:%Y-%m} project {self.project_key} as of {self.as_of}"


class GpuHourAllocation(models.Model):
    """A project's GPU-hours a month of one GPU model (GA1–GA3), beside its money budget:
    thresholds that warn its managers like a budget's, and an optional hard stop that
    refuses new burst and spot leases of that model once the month's hours are used."""

    project = models.ForeignKey(
        "portal.Project", on_delete=models.CASCADE, related_name="gpu_hour_allocations"
    )
    gpu_model = models.ForeignKey(
        "rental.GpuModel", on_delete=models.CASCADE, related_name="+", db_index=False
    )
    monthly_hours = models.DecimalField(_("GPU-hours a month"), max_digits=12, decimal_places=2)
    thresholds = models.JSONField(
        _("thresholds"),
        default=list,
        blank=True,
        help_text=_('e.g. [{"percent": 80, "kind": "actual"}]'),
    )
    hard_stop = models.BooleanField(
        _("hard stop"),
        default=False,
        help_text=_("Refuse new burst and spot leases of this GPU model once the hours are used."),
    )

    class Meta:
        ordering = ["project_id", "gpu_model_id"]
        verbose_name = _("GPU-hour allocation")
        verbose_name_plural = _("GPU-hour allocations")
        constraints = [
            # Also the index the admission check reads through (project, GPU model).
            models.UniqueConstraint(
                fields=["project", "gpu_model"], name="one_gpu_hour_allocation"
            ),
            models.CheckConstraint(
                condition=models.Q(monthly_hours__gte=0), name="gpu_hours_not_negative"
            ),
        ]

    def __str__(self) -> str:
        return f"{self.project.slug} {self.gpu_model}: {self.monthly_hours} GPU-h/month"


class GpuHourAlert(models.Model):
    """A threshold of a GPU-hour allocation that fired (GA1): once a period each."""

    allocation = models.ForeignKey(
        GpuHourAllocation, on_delete=models.CASCADE, related_name="alerts"
    )
    period = models.DateField(_("period"))
    percent = models.PositiveSmallIntegerField(_("percent"))
    kind = models.CharField(_("kind"), max_length=16, choices=BudgetAlert.Kind.choices)
    value = models.DecimalField(_("GPU-hours"), max_digits=14, decimal_places=2)
    fired_at = models.DateTimeField(_("fired at"), default=timezone.now)

    class Meta:
        ordering = ["-fired_at"]
        verbose_name = _("GPU-hour alert")
        verbose_name_plural = _("GPU-hour alerts")
        constraints = [
            models.UniqueConstraint(
                fields=["allocation", "period", "percent", "kind"],
                name="gpu_hour_alert_once_per_period",
            ),
        ]

    def __str__(self) -> str:
        return f"{self.allocation} {self.period:%Y-%m} {self.percent}% {self.kind}"
