"""How much may run: pools per GPU model, quotas per project, and requests to change them."""

from decimal import Decimal

from django.conf import settings
from django.db import models
from django.utils import timezone
from django.utils.translation import gettext_lazy as _

DEGRADED_REASON_LENGTH = 300
# A fair pool's half-life unless an admin sets another: 7 days.
FAIR_SHARE_HALF_LIFE_HOURS = Decimal("168")


class Pool(models.Model):
    class State(models.TextChoices):
        OK = "ok", _("OK")
        DEGRADED = "degraded", _("Degraded")

    class Apportionment(models.TextChoices):
        BY_USAGE = "by_usage", _("By usage")
        BY_PROJECT = "by_project", _("By project guarantee")
        HYBRID = "hybrid", _("Hybrid")

    class Residual(models.TextChoices):
        SHARED = "shared", _("Split by burst usage")
        PLATFORM = "platform", _("Platform overhead")

    class PlacementOrder(models.TextChoices):
        OWN_FIRST = "own_first", _("Own servers first, then the cheapest cloud offering")
        CHEAPEST = "cheapest", _("Cheapest offering first, whatever the driver")

    gpu_model = models.OneToOneField(
        "rental.GpuModel",
        on_delete=models.PROTECT,
        related_name="pool",
        verbose_name=_("GPU model"),
    )
    capacity = models.PositiveIntegerField(_("capacity (GPUs)"))
    committed_gpus = models.PositiveIntegerField(_("committed GPUs"), default=0)
    committed_monthly_cost = models.DecimalField(
        _("committed monthly cost"), max_digits=14, decimal_places=2, default=Decimal("0")
    )
    state = models.CharField(_("state"), max_length=16, choices=State.choices, default=State.OK)
    apportionment = models.CharField(
        _("cost apportionment"),
        max_length=16,
        choices=Apportionment.choices,
        default=Apportionment.HYBRID,
    )
    residual = models.CharField(
        _("unassigned commitment"),
        max_length=16,
        choices=Residual.choices,
        default=Residual.SHARED,
    )
    # An admin's own mark (the cloud cut the account's GPUs, a region is down): the pool
    # stays degraded while it is set, whatever C and Σ G say. Empty: not marked by hand.
    degraded_reason = models.CharField(
        _("why an admin marked it degraded"), max_length=DEGRADED_REASON_LENGTH, blank=True
    )
    # Q5 fair share: waiting burst and spot leases of one priority are ordered by their
    # projects' usage of the pool, decayed by this half-life, per share (rental.loans.fair_share).
    fair_share = models.BooleanField(_("fair share ordering"), default=False)
    fair_share_half_life_hours = models.DecimalField(
        _("fair share half-life (hours)"),
        max_digits=8,
        decimal_places=2,
        default=FAIR_SHARE_HALF_LIFE_HOURS,
    )
    # Where a lease of this pool is placed (rental.catalog.placement_rules): own servers
    # first or the cheapest first, after the provider accounts listed here, in this order.
    placement_order = models.CharField(
        _("placement order"),
        max_length=16,
        choices=PlacementOrder.choices,
        default=PlacementOrder.OWN_FIRST,
    )
    placement_accounts = models.JSONField(
        _("provider accounts tried first"),
        default=list,
        blank=True,
        help_text=_("Provider account ids, tried in this order before the others, e.g. [3, 1]."),
    )

    class Meta:
        ordering = ["gpu_model__name"]
        verbose_name = _("pool")
        verbose_name_plural = _("pools")
        constraints = [
            models.CheckConstraint(
                condition=models.Q(committed_gpus__lte=models.F("capacity")),
                name="pool_committed_within_capacity",
            ),
            models.CheckConstraint(
                condition=models.Q(committed_monthly_cost__gte=0), name="pool_cost_not_negative"
            ),
            models.CheckConstraint(
                condition=models.Q(fair_share_half_life_hours__gt=0),
                name="pool_fair_share_half_life_positive",
            ),
        ]

    def __str__(self) -> str:
        return f"{self.gpu_model} pool ({self.capacity} GPUs)"

    @property
    def guarantee_bound(self) -> int:
        """Σ G may not exceed this (Q1): the capacity, or the committed GPUs when prepaid."""
        return self.committed_gpus if self.committed_gpus > 0 else self.capacity


class Quota(models.Model):
    project = models.ForeignKey(
        "portal.Project",
        on_delete=models.CASCADE,
        related_name="quotas",
        verbose_name=_("project"),
    )
    gpu_model = models.ForeignKey(
        "rental.GpuModel",
        on_delete=models.PROTECT,
        related_name="quotas",
        verbose_name=_("GPU model"),
    )
    guaranteed = models.PositiveIntegerField(_("guaranteed GPUs (G)"), default=0)
    ceiling = models.PositiveIntegerField(_("ceiling GPUs (L)"), default=0)
    weight = models.DecimalField(_("weight"), max_digits=8, decimal_places=3, default=Decimal("1"))
    max_hours_per_lease = models.PositiveIntegerField(
        _("auto-approve: max hours per lease"), null=True, blank=True
    )
    max_gpus_per_lease = models.PositiveIntegerField(
        _("auto-approve: max GPUs per lease"), null=True, blank=True
    )
    # What the admin allows a manager to set the auto-approve limits to (empty: up to L
    # and the site's maximum lease).
    auto_approve_gpus_cap = models.PositiveIntegerField(
        _("admin cap on the auto-approve GPUs"), null=True, blank=True
    )
    auto_approve_hours_cap = models.PositiveIntegerField(
        _("admin cap on the auto-approve hours"), null=True, blank=True
    )

    class Meta:
        ordering = ["project__slug", "gpu_model__name"]
        verbose_name = _("quota")
        verbose_name_plural = _("quotas")
        constraints = [
            models.UniqueConstraint(
                fields=["project", "gpu_model"], name="one_quota_per_project_and_model"
            ),
            models.CheckConstraint(
                condition=models.Q(ceiling__gte=models.F("guaranteed")),
                name="quota_ceiling_at_least_guarantee",
            ),
            models.CheckConstraint(condition=models.Q(weight__gt=0), name="quota_weight_positive"),
        ]

    def __str__(self) -> str:
        return f"{self.project.slug} · {self.gpu_model}: G {self.guaranteed}, L {self.ceiling}"


class QuotaRequest(models.Model):
    class Status(models.TextChoices):
        PENDING = "pending", _("Pending")
        APPROVED = "approved", _("Approved")
        REJECTED = "rejected", _("Rejected")

    project = models.ForeignKey(
        "portal.Project", on_delete=models.CASCADE, related_name="quota_requests"
    )
    gpu_model = models.ForeignKey("rental.GpuModel", on_delete=models.PROTECT, related_name="+")
    requested_by = models.ForeignKey(
        settings.AUTH_USER_MODEL, on_delete=models.PROTECT, related_name="+"
    )
    guaranteed = models.PositiveIntegerField(_("new guarantee (G)"), null=True, blank=True)
    ceiling = models.PositiveIntegerField(_("new ceiling (L)"), null=True, blank=True)
    reason = models.TextField(_("reason"))
    status = models.CharField(
        _("status"), max_length=16, choices=Status.choices, default=Status.PENDING
    )
    decided_by = models.ForeignKey(
        settings.AUTH_USER_MODEL,
        on_delete=models.SET_NULL,
        null=True,
        blank=True,
        related_name="+",
    )
    decided_at = models.DateTimeField(_("decided at"), null=True, blank=True)
    decision_comment = models.TextField(_("decision comment"), blank=True)
    created_at = models.DateTimeField(_("created at"), default=timezone.now)

    class Meta:
        ordering = ["-created_at"]
        verbose_name = _("quota request")
        verbose_name_plural = _("quota requests")
        constraints = [
            models.CheckConstraint(
                condition=models.Q(guaranteed__isnull=False) | models.Q(ceiling__isnull=False),
                name="quota_request_changes_something",
            ),
        ]

    def __str__(self) -> str:
        return f"{self.project.slug} · {self.gpu_model}: G {self.guaranteed}, L {self.ceiling}"


class AvailabilityWatch(models.Model):
    user = models.ForeignKey(
        settings.AUTH_USER_MODEL, on_delete=models.CASCADE, related_name="availability_watches"
    )
    gpu_model = models.ForeignKey("rental.GpuModel", on_delete=models.CASCADE, related_name="+")
    count = models.PositiveIntegerField(_("GPUs"))
    created_at = models.DateTimeField(_("created at"), default=timezone.now)
    notified_at = models.DateTimeField(_("notified at"), null=True, blank=True)

    class Meta:
        verbose_name = _("availability watch")
        verbose_name_plural = _("availability watches")
        constraints = [
            models.CheckConstraint(condition=models.Q(count__gte=1), name="watch_count_positive"),
        ]

    def __str__(self) -> str:
        return f"{self.user} waits for {self.count}× {self.gpu_model}"
