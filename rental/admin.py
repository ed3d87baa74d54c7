"""Admin for the compute side.

Provider credentials are write-only here: the form takes new values through password
inputs that never render a value, the page shows only whether credentials are set, and
new values go through ``services.set_credentials`` (encrypted, audited). Validation calls
the provider outside any database transaction.

Rows that the lifecycle engine owns (instances, usage, utilization) are read-only, and a
lease's lifecycle fields cannot be edited: changing them by hand would bypass the rules
of DESIGN.md §4. Quotas are saved through ``services.set_quota`` so rule Q1 holds.
"""

import re
from functools import partial
from typing import Any

from django import forms
from django.contrib import admin, messages
from django.contrib.admin.utils import unquote
from django.core.exceptions import ImproperlyConfigured, PermissionDenied, ValidationError
from django.db import transaction
from django.db.models import QuerySet, Sum
from django.db.models.functions import Coalesce
from django.http import Http404, HttpRequest, HttpResponse, HttpResponseRedirect
from django.urls import URLPattern, path, reverse
from django.utils.decorators import method_decorator
from django.utils.functional import Promise
from django.utils.html import format_html
from django.utils.translation import gettext
from django.utils.translation import gettext_lazy as _
from django.views.decorators.debug import sensitive_post_parameters
from django.views.decorators.http import require_POST

from portal.admin import ReadOnlyAdmin
from portal.errors import InvalidInput
from portal.models import AuditEvent
from rental import services
from rental.models import (
    AvailabilityWatch,
    DataVolume,
    GpuModel,
    Image,
    Instance,
    Offering,
    Pool,
    ProviderAccount,
    Quota,
    QuotaRequest,
    Reservation,
    SshKey,
    UsageRecord,
    UtilizationSample,
)

CREDENTIAL_FIELDS = ("access_key_id", "secret_access_key", "session_token")
# What a change must touch for the stored validation result to be stale.
CONNECTION_FIELDS = frozenset({"driver", "endpoint_url", "regions"})
StrOrPromise = str | Promise
REGION_NAME = re.compile(r"^[a-z0-9]+(?:-[a-z0-9]+)*$")


class RegionListField(forms.CharField):
    """Region names typed as comma-separated text, cleaned into the JSON list the model
    stores (lower case, without blanks or repeats)."""

    def prepare_value(self, value: Any) -> Any:
        if isinstance(value, list | tuple):
            return ", ".join(str(item) for item in value)
        return value

    def to_python(self, value: Any) -> list[str]:
        text = super().to_python(value)
        regions: list[str] = []
        for part in text.split(","):
            name = part.strip().lower()
            if name and name not in regions:
                regions.append(name)
        return regions

    def validate(self, value: list[str]) -> None:
        super().validate(value)
        bad = [name for name in value if len(name) > 32 or not REGION_NAME.match(name)]
        if bad:
            raise ValidationError(
                _("Not a region name: %(names)s. Use names like us-east-1."),
                code="invalid_region",
                params={"names": ", ".join(bad)},
            )


def _write_only(label: StrOrPromise, help_text: StrOrPromise) -> forms.CharField:
    return forms.CharField(
        label=label,
        required=False,
        help_text=help_text,
        widget=forms.PasswordInput(
            render_value=False, attrs={"autocomplete": "new-password", "spellcheck": "false"}
        ),
    )


class ProviderAccountForm(forms.ModelForm):
    regions = RegionListField(
        label=_("Regions"), help_text=_("Comma-separated, e.g. “us-east-1, us-west-2”.")
    )
    endpoint_url = forms.URLField(
        label=_("Endpoint URL"),
        required=False,
        max_length=200,
        assume_scheme="https",
        help_text=ProviderAccount._meta.get_field("endpoint_url").help_text,
    )
    access_key_id = _write_only(
        _("Access key ID"), _("Write-only. Leave blank to keep the stored credentials.")
    )
    secret_access_key = _write_only(
        _("Secret access key"), _("Write-only. Required with a new access key ID.")
    )
    session_token = _write_only(
        _("Session token"), _("Optional, for temporary credentials. Write-only.")
    )

    class Meta:
        model = ProviderAccount
        fields = ["name", "driver", "regions", "endpoint_url", "is_active"]

    def clean(self) -> dict[str, Any]:
        cleaned = super().clean()
        key = cleaned.get("access_key_id", "")
        secret = cleaned.get("secret_access_key", "")
        token = cleaned.get("session_token", "")
        if key or secret or token:
            if not key:
                self.add_error(
                    "access_key_id", _("Enter the access key ID that goes with the secret.")
                )
            if not secret:
                self.add_error(
                    "secret_access_key", _("Enter the secret that goes with the access key ID.")
                )
        return cleaned

    def new_credentials(self) -> dict[str, str] | None:
        """The credentials typed into this form, or None to keep the stored ones."""
        if not self.cleaned_data.get("access_key_id"):
            return None
        return {name: self.cleaned_data.get(name, "") for name in CREDENTIAL_FIELDS}


@admin.register(GpuModel)
class GpuModelAdmin(admin.ModelAdmin):
    list_display = [
        "name",
        "vendor",
        "memory_gb",
        "memory_bandwidth_gbps",
        "bf16_tflops",
        "fp16_tflops",
        "interconnect",
    ]
    list_filter = ["vendor", "interconnect"]
    search_fields = ["name", "notes"]


@admin.register(ProviderAccount)
class ProviderAccountAdmin(admin.ModelAdmin):
    form = ProviderAccountForm
    list_display = [
        "name",
        "driver",
        "region_list",
        "endpoint_url",
        "status",
        "checked_at",
        "credentials",
        "is_active",
    ]
    list_filter = ["driver", "status", "is_active"]
    search_fields = ["name", "endpoint_url"]
    actions = ["validate_credentials"]
    # The top Save button comes first in the form, so Enter saves (not "Validate now").
    save_on_top = True
    readonly_fields = ["credentials", "status", "status_message", "checked_at", "validate_now"]
    fieldsets = [
        (None, {"fields": ["name", "driver", "regions", "endpoint_url", "is_active"]}),
        (
            _("Credentials"),
            {
                "fields": ["credentials", *CREDENTIAL_FIELDS],
                "description": _(
                    "Stored encrypted and never shown again. New credentials are checked "
                    "with the provider after saving."
                ),
            },
        ),
        (_("Validation"), {"fields": ["status", "status_message", "checked_at", "validate_now"]}),
    ]

    @admin.display(description=_("regions"))
    def region_list(self, obj: ProviderAccount) -> str:
        return ", ".join(obj.regions)

    @admin.display(description=_("credentials"))
    def credentials(self, obj: ProviderAccount) -> str:
        return gettext("●●●● set") if obj.has_credentials else gettext("not set")

    @admin.display(description=_("check"))
    def validate_now(self, obj: ProviderAccount) -> str:
        if obj.pk is None:
            return gettext("Save the account first.")
        return format_html(
            '<button type="submit" class="button" formaction="{}" formnovalidate>{}</button>'
            '<div class="help">{}</div>',
            reverse(f"{self.admin_site.name}:rental_provideraccount_validate", args=[obj.pk]),
            gettext("Validate now"),
            gettext("Checks the stored credentials; unsaved changes on this page are dropped."),
        )

    @method_decorator(sensitive_post_parameters(*CREDENTIAL_FIELDS))
    def changeform_view(
        self,
        request: HttpRequest,
        object_id: str | None = None,
        form_url: str = "",
        extra_context: dict[str, Any] | None = None,
    ) -> HttpResponse:
        return super().changeform_view(request, object_id, form_url, extra_context)

    def save_model(
        self, request: HttpRequest, obj: ProviderAccount, form: ProviderAccountForm, change: bool
    ) -> None:
        credentials = form.new_credentials()
        connection_changed = bool(CONNECTION_FIELDS.intersection(form.changed_data))
        if change and connection_changed:
            obj.status, obj.status_message = ProviderAccount.Status.UNVERIFIED, ""
        super().save_model(request, obj, form, change)
        if credentials is not None:
            services.set_credentials(
                actor=request.user, account=obj, source=AuditEvent.Source.ADMIN, **credentials
            )
        if (credentials is not None or connection_changed) and obj.has_credentials:
            # Validated on save (DESIGN §1), but never inside the admin's transaction.
            transaction.on_commit(partial(self._validate_and_report, request, obj))

    def get_urls(self) -> list[URLPattern]:
        validate = path(
            "<path:object_id>/validate/",
            self.admin_site.admin_view(self.validate_view),
            name=f"{self.opts.app_label}_{self.opts.model_name}_validate",
        )
        return [validate, *super().get_urls()]

    @method_decorator(sensitive_post_parameters(*CREDENTIAL_FIELDS))
    @method_decorator(require_POST)
    def validate_view(self, request: HttpRequest, object_id: str) -> HttpResponse:
        """The change page's "Validate now" button: check the stored credentials."""
        account = self.get_object(request, unquote(object_id))
        if account is None:
            raise Http404
        if not self.has_change_permission(request, account):
            raise PermissionDenied
        self._validate_and_report(request, account)
        return HttpResponseRedirect(
            reverse(f"{self.admin_site.name}:rental_provideraccount_change", args=[account.pk])
        )

    @admin.action(description=_("Validate credentials"), permissions=["change"])
    def validate_credentials(
        self, request: HttpRequest, queryset: QuerySet[ProviderAccount]
    ) -> None:
        for account in queryset:
            self._validate_and_report(request, account)

    def _validate_and_report(self, request: HttpRequest, account: ProviderAccount) -> None:
        """Validate with the provider (outside any transaction) and say how it went."""
        if not account.has_credentials:
            messages.warning(
                request,
                gettext("“%(name)s” has no credentials to validate.") % {"name": account.name},
            )
            return
        try:
            checked = services.validate_account(
                actor=request.user, account=account, source=AuditEvent.Source.ADMIN
            )
        except ImproperlyConfigured as exc:
            messages.error(request, f"{account.name}: {exc}")
            return
        if checked.status == ProviderAccount.Status.OK:
            messages.success(
                request,
                gettext("The credentials of “%(name)s” work.") % {"name": checked.name},
            )
        else:
            messages.error(
                request,
                gettext("The credentials of “%(name)s” failed validation: %(message)s")
                % {"name": checked.name, "message": checked.status_message},
            )


@admin.register(Offering)
class OfferingAdmin(admin.ModelAdmin):
    list_display = [
        "instance_type",
        "account",
        "region",
        "gpu_model",
        "gpus_per_instance",
        "vcpus",
        "memory_gib",
        "on_demand_price_per_hour",
        "spot_price_per_hour",
        "currency",
        "price_updated_at",
        "is_available",
    ]
    list_editable = ["is_available"]
    list_filter = ["account", "gpu_model", "region", "is_available", "currency"]
    search_fields = ["instance_type", "region", "gpu_model__name", "account__name"]
    list_select_related = ["account", "gpu_model"]
    autocomplete_fields = ["account", "gpu_model"]
    list_per_page = 50


@admin.register(Pool)
class PoolAdmin(admin.ModelAdmin):
    list_display = [
        "gpu_model",
        "capacity",
        "committed_gpus",
        "guaranteed_sum",
        "committed_monthly_cost",
        "apportionment",
        "residual",
        "state",
    ]
    list_filter = ["state", "apportionment"]
    search_fields = ["gpu_model__name"]
    list_select_related = ["gpu_model"]
    autocomplete_fields = ["gpu_model"]
    readonly_fields = ["guaranteed_sum"]

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
        super().save_model(request, obj, form, change)
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


class QuotaAdminForm(forms.ModelForm):
    """Checks rule Q1 as field errors before ``services.set_quota`` saves."""

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
            services.check_quota(
                pool=pool, project=project, guaranteed=guaranteed, ceiling=ceiling, weight=weight
            )
        except InvalidInput as exc:
            self.add_error(exc.field if exc.field in self.fields else None, exc.message)
        return cleaned


@admin.register(Quota)
class QuotaAdmin(admin.ModelAdmin):
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
        quota = services.set_quota(
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
class QuotaRequestAdmin(admin.ModelAdmin):
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


class InstanceInline(admin.TabularInline):
    model = Instance
    extra = 0
    can_delete = False
    show_change_link = True
    fields = [
        "external_id",
        "state",
        "market",
        "gpu_count",
        "region",
        "zone",
        "rate_per_hour",
        "running_at",
        "terminated_at",
        "termination_reason",
        "health",
        "public_address",
    ]
    readonly_fields = fields

    def has_add_permission(self, request: HttpRequest, obj: Any = None) -> bool:
        return False

    def has_change_permission(self, request: HttpRequest, obj: Any = None) -> bool:
        return False


@admin.register(Reservation)
class ReservationAdmin(admin.ModelAdmin):
    inlines = [InstanceInline]
    list_display = [
        "id",
        "project",
        "requester",
        "gpu_model",
        "gpu_count",
        "market",
        "priority",
        "tier",
        "status",
        "start",
        "end",
    ]
    list_display_links = ["id"]
    list_filter = ["status", "tier", "market", "priority", "gpu_model"]
    search_fields = ["=id", "project__slug", "project__name", "requester__username", "purpose"]
    list_select_related = ["project", "requester", "gpu_model"]
    date_hierarchy = "start"
    # Only what does not steer the lifecycle may be edited by hand.
    fields = [
        "project",
        "requester",
        "gpu_model",
        "gpu_count",
        "offering",
        "instance_count",
        "market",
        "priority",
        "image",
        "purpose",
        "requeue_on_preemption",
        "start",
        "end",
        "tier",
        "status",
        "status_code",
        "status_message",
        "submitted_at",
        "approved_by",
        "approved_at",
        "decision_comment",
        "ended_at",
        "end_reason",
        "updated_at",
    ]
    readonly_fields = [name for name in fields if name not in ("purpose", "requeue_on_preemption")]

    def has_add_permission(self, request: HttpRequest) -> bool:
        # Leases are requested through the portal, where admission (Q2, R1-R2) applies.
        return False


@admin.register(Instance)
class InstanceAdmin(ReadOnlyAdmin):
    list_display = [
        "id",
        "external_id",
        "lease",
        "project",
        "account",
        "instance_type",
        "region",
        "state",
        "market",
        "gpu_count",
        "rate_per_hour",
        "running_at",
        "terminated_at",
        "health",
        "last_heartbeat_at",
    ]
    list_display_links = ["id", "external_id"]
    list_filter = ["state", "market", "health", "termination_reason", "account", "region"]
    search_fields = ["external_id", "=reservation__id", "reservation__project__slug"]
    list_select_related = ["reservation__project", "account", "offering"]
    date_hierarchy = "launched_at"
    readonly_fields = ["idempotency_key"]

    @admin.display(description=_("lease"), ordering="reservation_id")
    def lease(self, obj: Instance) -> str:
        return f"#{obj.reservation_id}"

    @admin.display(description=_("project"), ordering="reservation__project__slug")
    def project(self, obj: Instance) -> str:
        return obj.reservation.project.slug

    @admin.display(description=_("instance type"), ordering="offering__instance_type")
    def instance_type(self, obj: Instance) -> str:
        return obj.offering.instance_type


@admin.register(UsageRecord)
class UsageRecordAdmin(ReadOnlyAdmin):
    list_display = [
        "id",
        "project",
        "instance",
        "gpu_model",
        "tier",
        "market",
        "gpu_count",
        "start",
        "end",
        "rate",
        "end_reason",
    ]
    list_filter = ["tier", "market", "gpu_model", "end_reason"]
    search_fields = ["project__slug", "instance__external_id"]
    list_select_related = ["project", "instance", "gpu_model"]
    date_hierarchy = "start"
    show_full_result_count = False


@admin.register(UtilizationSample)
class UtilizationSampleAdmin(ReadOnlyAdmin):
    list_display = ["instance", "at", "gpu_utilization", "memory_used_mb"]
    search_fields = ["instance__external_id"]
    list_select_related = ["instance"]
    date_hierarchy = "at"
    show_full_result_count = False


@admin.register(Image)
class ImageAdmin(admin.ModelAdmin):
    list_display = [
        "name",
        "account",
        "region",
        "image_id",
        "os",
        "cuda_version",
        "frameworks",
        "project",
        "is_active",
    ]
    list_filter = ["is_active", "account", "region", "os"]
    search_fields = ["name", "image_id", "frameworks", "os"]
    list_select_related = ["account", "project"]
    autocomplete_fields = ["account", "project"]
    raw_id_fields = ["source_reservation"]
    readonly_fields = ["created_at"]


@admin.register(SshKey)
class SshKeyAdmin(admin.ModelAdmin):
    list_display = ["name", "user", "fingerprint", "created_at"]
    search_fields = ["name", "user__username", "user__email"]
    list_select_related = ["user"]
    autocomplete_fields = ["user"]
    readonly_fields = ["fingerprint", "created_at"]


@admin.register(DataVolume)
class DataVolumeAdmin(admin.ModelAdmin):
    list_display = [
        "name",
        "project",
        "account",
        "zone",
        "size_gb",
        "volume_id",
        "state",
        "attached_instance",
        "created_at",
    ]
    list_filter = ["state", "account"]
    search_fields = ["name", "volume_id", "project__slug", "project__name"]
    list_select_related = ["project", "account", "attached_instance"]
    autocomplete_fields = ["project", "account"]
    raw_id_fields = ["attached_instance"]
    readonly_fields = ["created_at"]


@admin.register(AvailabilityWatch)
class AvailabilityWatchAdmin(admin.ModelAdmin):
    list_display = ["user", "gpu_model", "count", "created_at", "notified_at"]
    list_filter = ["gpu_model", ("notified_at", admin.EmptyFieldListFilter)]
    search_fields = ["user__username", "user__email"]
    list_select_related = ["user", "gpu_model"]
    autocomplete_fields = ["user", "gpu_model"]
    readonly_fields = ["created_at"]
