"""Admin for billing. Statements and their lines are produced by billing itself and never
edited by hand (corrections are adjustment lines, rule P2), so they are read-only here;
budgets and GPU-hour allocations are editable, with their thresholds checked as field
errors."""

from typing import Any

from django.contrib import admin
from django.db.models import QuerySet
from django.http import HttpRequest
from django.utils.translation import gettext_lazy as _

from billing.models import (
    Budget,
    BudgetAlert,
    GpuHourAlert,
    GpuHourAllocation,
    Statement,
    StatementLine,
)
from billing.thresholds import clean_thresholds, readable_thresholds
from portal.admin import PortalAdmin, PortalInline, ReadOnlyAdmin
from portal.numbers import NonNegativeNumbersForm


class StatementLineInline(PortalInline):
    model = StatementLine
    extra = 0
    can_delete = False
    fields = [
        "kind",
        "gpu_model",
        "market",
        "tier",
        "quantity",
        "unit_price",
        "amount",
        "description",
        "locked",
    ]
    readonly_fields = fields

    def get_queryset(self, request: HttpRequest) -> QuerySet[StatementLine]:
        return super().get_queryset(request).select_related("gpu_model")

    def has_add_permission(self, request: HttpRequest, obj: Any = None) -> bool:
        return False

    def has_change_permission(self, request: HttpRequest, obj: Any = None) -> bool:
        return False


@admin.register(Statement)
class StatementAdmin(ReadOnlyAdmin):
    inlines = [StatementLineInline]
    list_display = [
        "project",
        "month",
        "status",
        "total",
        "currency",
        "closed_at",
        "decided_by",
        "decided_at",
    ]
    list_filter = ["status", "currency"]
    search_fields = ["project__slug", "project__name"]
    list_select_related = ["project", "decided_by"]
    date_hierarchy = "period"

    @admin.display(description=_("period"), ordering="period")
    def month(self, obj: Statement) -> str:
        return f"{obj.period:%Y-%m}"


class BudgetForm(NonNegativeNumbersForm):
    class Meta:
        model = Budget
        fields = ["project", "monthly_amount", "thresholds", "cap_policy"]

    def clean_thresholds(self) -> list[dict[str, Any]]:
        """A list of {"percent": 1-1000, "kind": "actual" | "forecast"}, each pair once."""
        return clean_thresholds(self.cleaned_data["thresholds"])


@admin.register(Budget)
class BudgetAdmin(PortalAdmin):
    form = BudgetForm
    list_display = ["project", "monthly_amount", "threshold_list", "cap_policy"]
    list_filter = ["cap_policy"]
    search_fields = ["project__slug", "project__name"]
    list_select_related = ["project"]
    autocomplete_fields = ["project"]

    @admin.display(description=_("thresholds"))
    def threshold_list(self, obj: Budget) -> str:
        kept, problem = readable_thresholds(obj.thresholds)
        shown = ", ".join(f"{item['percent']}% {item['kind']}" for item in kept)
        return f"{shown} ({problem})" if problem else shown


@admin.register(BudgetAlert)
class BudgetAlertAdmin(ReadOnlyAdmin):
    list_display = ["project", "month", "percent", "kind", "value", "fired_at"]
    list_filter = ["kind"]
    search_fields = ["budget__project__slug", "budget__project__name"]
    list_select_related = ["budget__project"]
    date_hierarchy = "fired_at"

    @admin.display(description=_("project"), ordering="budget__project__slug")
    def project(self, obj: BudgetAlert) -> str:
        return obj.budget.project.slug

    @admin.display(description=_("period"), ordering="period")
    def month(self, obj: BudgetAlert) -> str:
        return f"{obj.period:%Y-%m}"


class GpuHourAllocationForm(NonNegativeNumbersForm):
    class Meta:
        model = GpuHourAllocation
        fields = ["project", "gpu_model", "monthly_hours", "thresholds", "hard_stop"]

    def clean_thresholds(self) -> list[dict[str, Any]]:
        """A list of {"percent": 1-1000, "kind": "actual" | "forecast"}, each pair once."""
        return clean_thresholds(self.cleaned_data["thresholds"])


@admin.register(GpuHourAllocation)
class GpuHourAllocationAdmin(PortalAdmin):
    form = GpuHourAllocationForm
    list_display = ["project", "gpu_model", "monthly_hours", "threshold_list", "hard_stop"]
    list_filter = ["hard_stop", "gpu_model"]
    search_fields = ["project__slug", "project__name"]
    list_select_related = ["project", "gpu_model"]
    autocomplete_fields = ["project"]

    @admin.display(description=_("thresholds"))
    def threshold_list(self, obj: GpuHourAllocation) -> str:
        kept, problem = readable_thresholds(obj.thresholds)
        shown = ", ".join(f"{item['percent']}% {item['kind']}" for item in kept)
        return f"{shown} ({problem})" if problem else shown


@admin.register(GpuHourAlert)
class GpuHourAlertAdmin(ReadOnlyAdmin):
    list_display = ["project", "gpu_model", "month", "percent", "kind", "value", "fired_at"]
    list_filter = ["kind"]
    search_fields = ["allocation__project__slug", "allocation__project__name"]
    list_select_related = ["allocation__project", "allocation__gpu_model"]
    date_hierarchy = "fired_at"

    @admin.display(description=_("project"), ordering="allocation__project__slug")
    def project(self, obj: GpuHourAlert) -> str:
        return obj.allocation.project.slug

    @admin.display(description=_("GPU model"), ordering="allocation__gpu_model__name")
    def gpu_model(self, obj: GpuHourAlert) -> str:
        return obj.allocation.gpu_model.name

    @admin.display(description=_("period"), ordering="period")
    def month(self, obj: GpuHourAlert) -> str:
        return f"{obj.period:%Y-%m}"
