"""Admin pages for single sign-on: the identity provider (its client secret write-only:
typed into a password input that never shows a value, stored encrypted, shown only as
set or not), which groups give which roles (added or removed, each audited), and, to
read, who signed in how and what their groups gave them."""

from typing import Any

from django import forms
from django.contrib import admin, messages
from django.db import transaction
from django.db.models import QuerySet
from django.http import HttpRequest
from django.utils.decorators import method_decorator
from django.utils.translation import gettext
from django.utils.translation import gettext_lazy as _
from django.views.decorators.debug import sensitive_post_parameters

from portal import audit
from portal.admin import PortalAdmin, ReadOnlyAdmin
from portal.errors import DomainError
from portal.models import AuditEvent
from portal.sso import mappings
from portal.sso.models import GrantedMembership, GrantedRole, GroupRole, Identity, IdentityProvider
from portal.text import validate_plain_text


class IdentityProviderForm(forms.ModelForm):
    issuer = forms.URLField(
        label=_("Issuer URL"),
        max_length=300,
        assume_scheme="https",
        help_text=IdentityProvider._meta.get_field("issuer").help_text,
        validators=[validate_plain_text],
    )
    client_secret = forms.CharField(
        label=_("Client secret"),
        required=False,
        help_text=_("Write-only: stored encrypted, never shown. Leave blank to keep it."),
        validators=[validate_plain_text],
        widget=forms.PasswordInput(
            render_value=False, attrs={"autocomplete": "new-password", "spellcheck": "false"}
        ),
    )

    class Meta:
        model = IdentityProvider
        fields = ["enabled", "name", "issuer", "client_id", "scopes", "groups_claim"]

    def clean_scopes(self) -> str:
        scopes = " ".join(self.cleaned_data["scopes"].split())
        if "openid" not in scopes.split():
            raise forms.ValidationError(_("The scopes must include “openid”."))
        return scopes

    def clean(self) -> dict[str, Any]:
        cleaned = super().clean()
        if not cleaned.get("client_secret") and not self.instance.has_client_secret:
            self.add_error("client_secret", _("Enter the client secret the provider gave."))
        return cleaned


@admin.register(IdentityProvider)
class IdentityProviderAdmin(PortalAdmin):
    form = IdentityProviderForm
    list_display = ["name", "issuer", "client_id", "enabled", "secret"]
    readonly_fields = ["secret", "redirect_url", "updated_at"]
    fieldsets = [
        (None, {"fields": ["enabled", "name", "issuer", "redirect_url"]}),
        (_("Client"), {"fields": ["client_id", "client_secret", "secret", "scopes"]}),
        (_("Groups"), {"fields": ["groups_claim", "updated_at"]}),
    ]

    def has_add_permission(self, request: HttpRequest) -> bool:
        return super().has_add_permission(request) and not IdentityProvider.objects.exists()

    @admin.display(description=_("client secret"))
    def secret(self, obj: IdentityProvider) -> str:
        return gettext("●●●● set") if obj.has_client_secret else gettext("not set")

    @admin.display(description=_("redirect URL to register at the provider"))
    def redirect_url(self, obj: IdentityProvider) -> str:
        return self._request.build_absolute_uri("/sso/callback/")

    def get_form(self, request: HttpRequest, obj: Any = None, **kwargs: Any) -> Any:
        self._request = request
        return super().get_form(request, obj, **kwargs)

    @method_decorator(sensitive_post_parameters("client_secret"))
    def changeform_view(self, request: HttpRequest, *args: Any, **kwargs: Any) -> Any:
        return super().changeform_view(request, *args, **kwargs)

    @transaction.atomic
    def save_model(self, request: HttpRequest, obj: IdentityProvider, form: Any, change: bool):
        secret = form.cleaned_data.get("client_secret")
        if secret:
            obj.set_client_secret(secret)
        super().save_model(request, obj, form, change)
        audit.record(
            actor=request.user,
            verb="identity_provider.saved",
            obj=obj,
            source=AuditEvent.Source.ADMIN,
            after={
                "issuer": obj.issuer,
                "client_id": obj.client_id,
                **({"client_secret": gettext("changed")} if secret else {}),
            },
        )


@admin.register(GroupRole)
class GroupRoleAdmin(PortalAdmin):
    """Rows are added or removed, never edited, each through ``portal.sso.mappings``."""

    list_display = ["group", "role", "project", "created_at"]
    list_filter = ["role"]
    search_fields = ["group", "project__slug", "project__name"]
    list_select_related = ["project"]
    autocomplete_fields = ["project"]
    fields = ["group", "role", "project"]

    def has_change_permission(self, request: HttpRequest, obj: Any = None) -> bool:
        return obj is None and super().has_change_permission(request, obj)

    def save_model(self, request: HttpRequest, obj: GroupRole, form: Any, change: bool) -> None:
        try:
            saved = mappings.add_group_role(
                actor=request.user,
                group=obj.group,
                role=obj.role,
                project=obj.project,
                source=AuditEvent.Source.ADMIN,
            )
        except DomainError as error:
            # Checked by the form already (the model's clean); this is a race or a rule.
            self.message_user(request, error.message, messages.ERROR)
            return
        obj.pk = saved.pk

    def delete_model(self, request: HttpRequest, obj: GroupRole) -> None:
        mappings.remove_group_role(actor=request.user, row=obj, source=AuditEvent.Source.ADMIN)

    def delete_queryset(self, request: HttpRequest, queryset: QuerySet[GroupRole]) -> None:
        for row in queryset:
            self.delete_model(request, row)


@admin.register(Identity)
class IdentityAdmin(ReadOnlyAdmin):
    list_display = ["user", "subject", "issuer", "groups", "last_login_at"]
    search_fields = ["user__username", "subject"]
    list_select_related = ["user"]


@admin.register(GrantedMembership)
class GrantedMembershipAdmin(ReadOnlyAdmin):
    """The memberships a login gave from groups; any other was given by hand."""

    list_display = ["membership", "groups", "granted_at"]
    search_fields = ["membership__user__username", "membership__project__slug"]
    list_select_related = ["membership__user", "membership__project"]


@admin.register(GrantedRole)
class GrantedRoleAdmin(ReadOnlyAdmin):
    list_display = ["user", "role", "groups", "granted_at"]
    list_filter = ["role"]
    list_select_related = ["user"]
