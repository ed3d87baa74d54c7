"""Admin for capacity: pools, quotas, quota requests and availability watches.

Quotas are saved through ``quotas.set_quota`` and a pool's settings through
``pools.configure_pool`` (both also on the portal's own pages), so rule Q1 holds and
each change is audited. A pool's state follows from its settings and its degraded mark,
which admins set on the pool page; here they are read-only.
"""

from typing import Any

from django import forms
from django.contrib import admin, messages
from django.db.models import QuerySet, Sum
from django.db.models.functions import Coalesce
from django.http import HttpRequest
from django.utils.html import format_html
from django.utils.translation import gettext
from django.utils.translation import gettext_lazy as _

from portal.admin import PortalAdmin
from portal.errors import InvalidInput
from portal.models import AuditEvent
from portal.numbers import NonNegativeNumbersForm
from rental.loans import pools, quotas
from rental.models import AvailabilityWatch, Pool, Quota, QuotaRequest


class PoolAdminForm(NonNegativeNumbersForm):
    """Checks a changed pool's settings against Q1 as field errors before
    ``pools.configure_pool`` saves them."""

    class Meta:
        model = Pool
        fields = ["gpu_model", *pools.SETTINGS]

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        # Left out of a form, the half-life keeps its value (``pools.configure_pool``).
        self.fields["fair_share_half_life_hours"].required = False
        # Likewise the placement order (rental.catalog.placement_rules).
        self.fields["placement_order"].required = False

    def clean(self) -> dict[str, Any]:
        cleaned = super().clean()
        if self.instance.pk is None:
            return cleaned
        asked = {
            name: cleaned[name] for name in pools.SETTINGS if cleaned.get(name) not in (None, "")
        }
        try:
            pools.check_settings(
                self.instance, guaranteed=pools.guaranteed_total(self.instance), **asked
            )
        except InvalidInput as exc:
            self.add_error(exc.field if exc.field in self.fields else None, exc.message)
        return cleaned


@admin.register(Pool)
class PoolAdmin(PortalAdmin):
    form = PoolAdminForm
    list_display = [
        "gpu_model",
        "capacity",
        "committed_gpus",
        "guaranteed_sum",
        "committed_monthly_cost",
        "apportionment",
        "residual",
        "fair_share",
        "state",
    ]
    list_filter = ["state", "apportionment", "fair_share"]
    search_fields = ["gpu_model__name"]
    list_select_related = ["gpu_model"]
    autocomplete_fields = ["gpu_model"]
    readonly_fields = ["guaranteed_sum", "state", "degraded_reason"]

    def get_readonly_fields(self, request: HttpRequest, obj: Pool | None = None) -> list[str]:
        # A pool is its GPU model's; another model is another pool.
        fields = list(super().get_readonly_fields(request, obj))
        return [*fields, "gpu_model"] if obj is not None else fields

    def get_queryset(self, request: HttpRequest) -> QuerySet[Pool]:
        return (
            super()
            .get_queryset(request)
            .annotate(guaranteed_total=Coalesce(Sum("gpu_model__quotas__guaranteed"), 0))
        )

    @admin.display(description=_("Σ G (guaranteed) / bound"), ordering="guaranteed_total")
    def guaranteed_sum(self, obj: Pool) -> str:
        if obj.pk is None:
            return "—"
        total = getattr(obj, "guaranteed_total", None)
        if total is None:
            total = _guaranteed_total(obj)
        if total > obj.guarantee_bound:
            return format_html(
                '<strong class="errornote">{} / {}</strong>', total, obj.guarantee_bound
            )
        return f"{total} / {obj.guarantee_bound}"

    def save_model(
        self, request: HttpRequest, obj: Pool, form: forms.ModelForm, change: bool
    ) -> None:
        if change:
            pools.configure_pool(
                actor=request.user,
                gpu_model=obj.gpu_model_id,
                source=AuditEvent.Source.ADMIN,
                **{name: getattr(obj, name) for name in pools.SETTINGS},
            )
        else:
            super().save_model(request, obj, form, change)
            pools.refresh_state(obj)  # Q1: degraded when C < Σ G, admins alerted
        total = _guaranteed_total(obj)
        if total > obj.guarantee_bound:
            messages.warning(
                request,
                gettext(
                    "Guarantees total %(total)d GPUs, more than this pool's %(bound)d (rule "
                    "Q1): lower some quotas' G or raise the capacity."
                )
                % {"total": total, "bound": obj.guarantee_bound},
            )


def _guaranteed_total(pool: Pool) -> int:
    return Quota.objects.filter(gpu_model_id=pool.gpu_model_id).aggregate(
        total=Coalesce(Sum("guaranteed"), 0)
    )["total"]


class QuotaAdminForm(NonNegativeNumbersForm):
    """Checks rule Q1 as field errors before ``quotas.set_quota`` saves."""

    class Meta:
        model = Quota
        fields = [
            "project",
            "gpu_model",
            "guaranteed",
            "ceiling",
            "weight",
            "max_hours_per_lease",
            "max_gpus_per_lease",
        ]

    def clean(self) -> dict[str, Any]:
        cleaned = super().clean()
        project = cleaned.get("project") if "project" in self.fields else self.instance.project
        gpu_model = (
            cleaned.get("gpu_model") if "gpu_model" in self.fields else self.instance.gpu_model
        )
        numbers = [cleaned.get(name) for name in ("guaranteed", "ceiling", "weight")]
        if project is None or gpu_model is None or None in numbers:
            return cleaned
        pool = Pool.objects.filter(gpu_model=gpu_model).first()
        if pool is None:
            self.add_error(
                "gpu_model" if "gpu_model" in self.fields else None,
                _("No pool is configured for %(model)s.") % {"model": gpu_model},
            )
            return cleaned
        guaranteed, ceiling, weight = numbers
        try:
            quotas.check_quota(
                pool=pool, project=project, guaranteed=guaranteed, ceiling=ceiling, weight=weight
            )
        except InvalidInput as exc:
            self.add_error(exc.field if exc.field in self.fields else None, exc.message)
        return cleaned


@admin.register(Quota)
class QuotaAdmin(PortalAdmin):
    form = QuotaAdminForm
    list_display = [
        "project",
        "gpu_model",
        "guaranteed",
        "ceiling",
        "weight",
        "max_hours_per_lease",
        "max_gpus_per_lease",
    ]
    list_filter = ["gpu_model"]
    search_fields = ["project__slug", "project__name", "gpu_model__name"]
    list_select_related = ["project", "gpu_model"]
    autocomplete_fields = ["project", "gpu_model"]

    def get_readonly_fields(self, request: HttpRequest, obj: Quota | None = None) -> list[str]:
        # A quota belongs to one project and model; a new pair is a new quota.
        return ["project", "gpu_model"] if obj is not None else []

    def save_model(
        self, request: HttpRequest, obj: Quota, form: forms.ModelForm, change: bool
    ) -> None:
        quota = quotas.set_quota(
            actor=request.user,
            project=obj.project,
            gpu_model=obj.gpu_model,
            guaranteed=obj.guaranteed,
            ceiling=obj.ceiling,
            weight=obj.weight,
            max_hours_per_lease=obj.max_hours_per_lease,
            max_gpus_per_lease=obj.max_gpus_per_lease,
            source=AuditEvent.Source.ADMIN,
        )
        obj.pk = quota.pk


@admin.register(QuotaRequest)
class QuotaRequestAdmin(PortalAdmin):
    form = NonNegativeNumbersForm
    list_display = [
        "project",
        "gpu_model",
        "guaranteed",
        "ceiling",
        "status",
        "requested_by",
        "created_at",
        "decided_by",
        "decided_at",
    ]
    list_filter = ["status", "gpu_model"]
    search_fields = ["project__slug", "project__name", "requested_by__username", "reason"]
    list_select_related = ["project", "gpu_model", "requested_by", "decided_by"]
    autocomplete_fields = ["project", "gpu_model", "requested_by"]
    # Decisions are made in the portal, where the approval rules and audit live.
    readonly_fields = ["status", "decided_by", "decided_at", "decision_comment", "created_at"]
    date_hierarchy = "created_at"


@admin.register(AvailabilityWatch)
class AvailabilityWatchAdmin(PortalAdmin):
    form = NonNegativeNumbersForm
    list_display = ["user", "gpu_model", "count", "created_at", "notified_at"]
    list_filter = ["gpu_model", ("notified_at", admin.EmptyFieldListFilter)]
    search_fields = ["user__username", "user__email"]
    list_select_related = ["user", "gpu_model"]
    autocomplete_fields = ["user", "gpu_model"]
    readonly_fields = ["created_at"]
