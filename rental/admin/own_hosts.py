"""Admin for the company's own GPU servers (hosts of ``ssh`` provider accounts).

The private key is write-only, as a cloud account's credentials are: the form takes a
new key in a field that never shows a value, the page says only whether one is set, a
blank field keeps the stored key, and the key is checked (an OpenSSH or PEM private key
without a passphrase) before it is stored encrypted. Saving and deleting go through
``rental.catalog.own_hosts`` (audited). "Check now" looks at the chosen hosts' accounts
through the driver at once, outside any transaction.
"""

from typing import Any

from django import forms
from django.contrib import admin, messages
from django.db.models import QuerySet
from django.http import HttpRequest, HttpResponse
from django.utils.decorators import method_decorator
from django.utils.html import format_html_join
from django.utils.translation import gettext, ngettext
from django.utils.translation import gettext_lazy as _
from django.views.decorators.debug import sensitive_post_parameters

from portal.admin import PortalAdmin, PortalInline
from portal.errors import DomainError
from portal.models import AuditEvent
from portal.numbers import NonNegativeNumbersForm
from portal.text import validate_plain_text
from rental.catalog import own_hosts
from rental.fleet.own_hosts import check_account
from rental.models import GpuModel, OwnHost


class WriteOnlyTextarea(forms.Textarea):
    """A text area that never shows a value: not the stored key, nor one typed and refused."""

    def format_value(self, value: Any) -> None:
        return None


class OwnHostForm(NonNegativeNumbersForm):
    private_key = forms.CharField(
        label=_("Private key"),
        required=False,
        strip=False,
        validators=[validate_plain_text],
        widget=WriteOnlyTextarea(
            attrs={"rows": 4, "autocomplete": "off", "spellcheck": "false", "cols": 70}
        ),
        help_text=_(
            "Write-only: stored encrypted and never shown again. OpenSSH or PEM, without a "
            "passphrase. Leave blank to keep the stored key."
        ),
    )

    class Meta:
        model = OwnHost
        fields = [
            "account",
            "name",
            "address",
            "port",
            "username",
            "host_key",
            "purchase_price",
            "currency",
            "amortisation_months",
            "in_service_since",
            "power_price_per_gpu_hour",
            "is_active",
        ]

    def clean_private_key(self) -> str:
        text = self.cleaned_data.get("private_key", "")
        if not text.strip():
            if self.instance.pk is None or not self.instance.has_private_key:
                raise forms.ValidationError(
                    _("Enter the key the portal logs in with."), code="required"
                )
            return ""
        problem = own_hosts.private_key_problem(text)
        if problem:
            raise forms.ValidationError(problem, code="invalid_key")
        return text


def state_words(host: OwnHost) -> str:
    """A host's state in a sentence."""
    if host.state == OwnHost.State.UNREACHABLE:
        return gettext("Not answering since %(since)s UTC: %(message)s") % {
            "since": f"{host.unreachable_since:%Y-%m-%d %H:%M}",
            "message": host.state_message or "-",
        }
    if host.state == OwnHost.State.OK and host.unreachable_since:
        return gettext("Answering until %(since)s UTC; the last look failed: %(message)s") % {
            "since": f"{host.unreachable_since:%Y-%m-%d %H:%M}",
            "message": host.state_message or "-",
        }
    if host.state == OwnHost.State.UNKNOWN and host.state_message:
        return gettext("Not checked yet; the last look failed: %(message)s") % {
            "message": host.state_message
        }
    return str(host.get_state_display())


def gpu_lines(host: OwnHost, names: dict[int, str]) -> list[str]:
    """Each GPU found, in words: "0: H100 80GB, 81,559 MiB" (or "not in the catalog")."""
    lines = []
    for gpu in host.gpus:
        model = names.get(gpu.get("gpu_model")) if gpu.get("gpu_model") else None
        lines.append(
            gettext("GPU %(index)s: %(name)s, %(memory)s MiB (%(catalog)s)")
            % {
                "index": gpu["index"],
                "name": gpu["name"],
                "memory": gpu["memory_mib"],
                "catalog": model or gettext("not in the catalog"),
            }
        )
    return lines


class OwnHostInline(PortalInline):
    """The hosts of an ``ssh`` account on its page, to look at; each is edited on its own
    page (its key and every change go through the audited service)."""

    model = OwnHost
    extra = 0
    fields = ["name", "address", "state", "checked_at", "is_active"]
    readonly_fields = fields
    show_change_link = True
    verbose_name = _("own GPU server")
    verbose_name_plural = _("own GPU servers")

    def has_add_permission(self, request: HttpRequest, obj: Any = None) -> bool:
        return False

    def has_change_permission(self, request: HttpRequest, obj: Any = None) -> bool:
        return False

    def has_delete_permission(self, request: HttpRequest, obj: Any = None) -> bool:
        return False


@admin.register(OwnHost)
class OwnHostAdmin(PortalAdmin):
    form = OwnHostForm
    list_display = [
        "name",
        "account",
        "address",
        "state_in_words",
        "gpu_summary",
        "checked_at",
        "key",
        "is_active",
    ]
    list_filter = ["account", "state", "is_active"]
    search_fields = ["name", "address"]
    list_select_related = ["account"]
    actions = ["check_now"]
    readonly_fields = ["key", "state_in_words", "checked_at", "gpus_found"]
    fieldsets = [
        (None, {"fields": ["account", "name", "address", "port", "username", "is_active"]}),
        (
            _("Key"),
            {
                "fields": ["key", "private_key", "host_key"],
                "description": _(
                    "The private key is stored encrypted and never shown again. The host key "
                    "is pinned at the first contact; clear it to pin the server's new key."
                ),
            },
        ),
        (
            _("Cost"),
            {
                "fields": [
                    "purchase_price",
                    "currency",
                    "amortisation_months",
                    "in_service_since",
                    "power_price_per_gpu_hour",
                ]
            },
        ),
        (_("Last look"), {"fields": ["state_in_words", "checked_at", "gpus_found"]}),
    ]

    def formfield_for_foreignkey(self, db_field: Any, request: HttpRequest, **kwargs: Any) -> Any:
        field = super().formfield_for_foreignkey(db_field, request, **kwargs)
        if db_field.name == "account" and field is not None:
            field.queryset = field.queryset.filter(driver="ssh")
        return field

    @admin.display(description=_("private key"))
    def key(self, obj: OwnHost) -> str:
        return gettext("●●●● set") if obj.has_private_key else gettext("not set")

    @admin.display(description=_("state"), ordering="state")
    def state_in_words(self, obj: OwnHost) -> str:
        return state_words(obj)

    @admin.display(description=_("GPUs"))
    def gpu_summary(self, obj: OwnHost) -> str:
        return ngettext("%(n)s GPU", "%(n)s GPUs", len(obj.gpus)) % {"n": len(obj.gpus)}

    @admin.display(description=_("GPUs found"))
    def gpus_found(self, obj: OwnHost) -> str:
        names = dict(GpuModel.objects.values_list("pk", "name"))
        lines = gpu_lines(obj, names)
        if not lines:
            return gettext("None found yet.")
        return format_html_join("", "<div>{}</div>", ((line,) for line in lines))

    @method_decorator(sensitive_post_parameters("private_key"))
    def changeform_view(
        self,
        request: HttpRequest,
        object_id: str | None = None,
        form_url: str = "",
        extra_context: dict[str, Any] | None = None,
    ) -> HttpResponse:
        return super().changeform_view(request, object_id, form_url, extra_context)

    def save_model(self, request: HttpRequest, obj: OwnHost, form: OwnHostForm, change: bool):
        own_hosts.save_host(
            actor=request.user,
            host=obj,
            private_key=form.cleaned_data.get("private_key", ""),
            source=AuditEvent.Source.ADMIN,
        )

    def delete_model(self, request: HttpRequest, obj: OwnHost) -> None:
        own_hosts.delete_host(actor=request.user, host=obj, source=AuditEvent.Source.ADMIN)

    def delete_queryset(self, request: HttpRequest, queryset: QuerySet[OwnHost]) -> None:
        for host in queryset:
            self.delete_model(request, host)

    @admin.action(description=_("Check now"), permissions=["change"])
    def check_now(self, request: HttpRequest, queryset: QuerySet[OwnHost]) -> None:
        """Look at the chosen hosts' accounts now (every active host of each)."""
        for account_id in sorted(set(queryset.values_list("account_id", flat=True))):
            try:
                result = check_account(account_id=account_id)
            except DomainError as error:
                messages.error(request, error.message)
                continue
            messages.info(
                request,
                gettext(
                    "Checked: %(answering)s answering, %(down)s not answering, "
                    "%(changed)s offerings changed."
                )
                % {
                    "answering": result.answering,
                    "down": result.not_answering,
                    "changed": result.offerings_changed,
                },
            )
