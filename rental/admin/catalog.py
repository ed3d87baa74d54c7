"""Admin for the catalog: GPU models, provider accounts, offerings and images.

Provider credentials are write-only here: the form takes new values through password
inputs that never render a value, the page shows only whether credentials are set, and
new values go through ``accounts.set_credentials`` (encrypted, audited). Validation calls
the provider outside any database transaction.
"""

import re
from functools import partial
from typing import Any

from django import forms
from django.contrib import admin, messages
from django.contrib.admin.utils import unquote
from django.core.exceptions import ImproperlyConfigured, PermissionDenied, ValidationError
from django.db import transaction
from django.db.models import BLANK_CHOICE_DASH, QuerySet
from django.http import Http404, HttpRequest, HttpResponse, HttpResponseRedirect
from django.urls import URLPattern, path, reverse
from django.utils.decorators import method_decorator
from django.utils.functional import Promise
from django.utils.html import format_html
from django.utils.translation import gettext
from django.utils.translation import gettext_lazy as _
from django.views.decorators.debug import sensitive_post_parameters
from django.views.decorators.http import require_POST

from portal.admin import PortalAdmin
from portal.models import AuditEvent
from portal.numbers import NonNegativeNumbersForm
from portal.text import text_problem, validate_plain_text
from rental.admin.driver_options import checked_options, options_field, options_help
from rental.admin.own_hosts import OwnHostInline
from rental.catalog import accounts
from rental.models import GpuModel, Image, Offering, ProviderAccount
from rental.providers.registry import DRIVER_CHOICES, DRIVERS, available_choices

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
        validators=[validate_plain_text],
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
        validators=[validate_plain_text],  # a host name may hold a bidi control otherwise
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
    options = options_field()

    class Meta:
        model = ProviderAccount
        fields = ["name", "driver", "regions", "endpoint_url", "options", "is_active"]

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        # Only the drivers this installation can run are offered; an account keeps its own
        # driver even when that one is missing here (its page says what to install).
        offered = available_choices()
        current = self.instance.driver if self.instance.pk else ""
        if current and current not in dict(offered):
            offered.append((current, dict(DRIVER_CHOICES).get(current, current)))
        self.fields["driver"].choices = [*BLANK_CHOICE_DASH, *offered]
        self.fields["options"].help_text = options_help()

    def clean(self) -> dict[str, Any]:
        cleaned = super().clean()
        checked_options(self, cleaned)
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
class GpuModelAdmin(PortalAdmin):
    form = NonNegativeNumbersForm
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
class ProviderAccountAdmin(PortalAdmin):
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
        "synced_at",
        "sync_problem",
    ]
    list_filter = ["driver", "status", "is_active"]
    search_fields = ["name", "endpoint_url"]
    actions = ["validate_credentials"]
    # The top Save button comes first in the form, so Enter saves (not "Validate now").
    save_on_top = True
    readonly_fields = [
        "driver_installed",
        "credentials",
        "status",
        "status_message",
        "checked_at",
        "validate_now",
        "synced_at",
        "sync_error",
        "sync_failed_at",
        "cloud_account",
    ]
    fieldsets = [
        (
            None,
            {
                "fields": [
                    "name",
                    "driver",
                    "driver_installed",
                    "regions",
                    "endpoint_url",
                    "options",
                    "is_active",
                ]
            },
        ),
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
        (
            _("Sync with the cloud"),
            {"fields": ["synced_at", "sync_failed_at", "sync_error", "cloud_account"]},
        ),
    ]

    def get_inlines(self, request: HttpRequest, obj: ProviderAccount | None) -> list:
        """An ssh account's own GPU servers, listed (each is edited on its own page)."""
        return [OwnHostInline] if obj is not None and obj.driver == "ssh" else []

    @admin.display(description=_("cloud account"))
    def cloud_account(self, obj: ProviderAccount) -> str:
        """The cloud account the sync found, and the other accounts that reach it too
        (each lists the other's instances: none of them is an orphan)."""
        if not obj.cloud_account_id:
            return gettext("Not known yet (found by the first sync that lists an instance).")
        others = accounts.shared_cloud_account(obj)
        if not others:
            return obj.cloud_account_id
        return gettext("%(id)s, also reached by %(others)s") % {
            "id": obj.cloud_account_id,
            "others": ", ".join(others),
        }

    @admin.display(description=_("driver installed"))
    def driver_installed(self, obj: ProviderAccount) -> str:
        """Whether this installation can run the account's driver, or what it needs."""
        entry = DRIVERS.get(obj.driver)
        if entry is None:
            return gettext("Choose a driver.") if obj.pk is None else obj.driver
        return entry.missing() or gettext("Installed.")

    def change_view(
        self,
        request: HttpRequest,
        object_id: str,
        form_url: str = "",
        extra_context: dict[str, Any] | None = None,
    ) -> HttpResponse:
        account = self.get_object(request, unquote(object_id))
        entry = DRIVERS.get(account.driver) if account is not None else None
        missing = entry.missing() if entry is not None else ""
        if missing and request.method == "GET":
            messages.warning(request, missing)
        return super().change_view(request, object_id, form_url, extra_context)

    @admin.display(description=_("sync problem"))
    def sync_problem(self, obj: ProviderAccount) -> str:
        """The last sync error while it is newer than the last good sync."""
        if obj.sync_error and (obj.synced_at is None or obj.sync_failed_at > obj.synced_at):
            return obj.sync_error
        return ""

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
            accounts.set_credentials(
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
            checked = accounts.validate_account(
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


class OfferingAdminForm(NonNegativeNumbersForm):
    """Prices and sizes are never negative; the zones are typed as the regions are."""

    zones = RegionListField(
        label=_("Availability zones"),
        required=False,
        help_text=_(
            "Comma-separated, tried in this order when one has no capacity, e.g. "
            "“us-east-1a, us-east-1b”. Empty: the cloud chooses."
        ),
    )

    class Meta:
        model = Offering
        fields = "__all__"


@admin.register(Offering)
class OfferingAdmin(PortalAdmin):
    form = OfferingAdminForm
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
        "max_cuda_version",
        "is_available",
    ]
    list_editable = ["is_available"]
    list_filter = ["account", "gpu_model", "region", "is_available", "currency"]
    search_fields = ["instance_type", "region", "gpu_model__name", "account__name"]
    list_select_related = ["account", "gpu_model"]
    autocomplete_fields = ["account", "gpu_model"]
    list_per_page = 50


class ImageAdminForm(forms.ModelForm):
    def clean_framework_versions(self) -> dict[str, str]:
        """Framework → version, both plain texts (PostgreSQL cannot store a NUL in JSON)."""
        value = self.cleaned_data["framework_versions"]
        pairs = isinstance(value, dict) and all(
            isinstance(name, str) and isinstance(version, str) for name, version in value.items()
        )
        if not pairs:
            raise ValidationError(
                _('Enter framework → version pairs, e.g. {"PyTorch": "2.5.1"}.'), code="pairs"
            )
        for text in [*value, *value.values()]:
            problem = text_problem(text, max_length=60)
            if problem:
                raise ValidationError(problem, code="text")
        return value


@admin.register(Image)
class ImageAdmin(PortalAdmin):
    form = ImageAdminForm
    list_display = [
        "name",
        "account",
        "region",
        "image_id",
        "os",
        "cuda_version",
        "frameworks",
        "project",
        "state",
        "is_active",
    ]
    list_filter = ["state", "is_active", "account", "region", "os"]
    search_fields = ["name", "image_id", "frameworks", "os"]
    list_select_related = ["account", "project"]
    autocomplete_fields = ["account", "project"]
    raw_id_fields = ["source_reservation", "source_instance", "created_by"]
    readonly_fields = ["created_at", "available_at"]
