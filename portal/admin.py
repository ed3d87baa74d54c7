"""Admin for the people side: users with their memberships, projects, the audit log,
service tokens, notifications and login locks. Changelists select their related rows up
front, so each page runs a fixed number of queries however many rows it shows."""

import json
from typing import Any

from django.contrib import admin, messages
from django.contrib.auth import get_user_model
from django.contrib.auth.admin import GroupAdmin, UserAdmin
from django.contrib.auth.models import Group
from django.db import models
from django.db.models import Count, Field, QuerySet
from django.http import HttpRequest
from django.utils import timezone
from django.utils.html import format_html
from django.utils.translation import gettext_lazy as _
from django.utils.translation import ngettext

from portal import access, login_throttle
from portal.errors import DomainError
from portal.models import (
    AuditEvent,
    LoginLock,
    Membership,
    Notification,
    Project,
    ServiceToken,
)
from portal.nesting import ShallowJSONField
from portal.text import follows_text_rule

User = get_user_model()


class PlainTextFields:
    """What an admin types follows the portal's rules for text (``portal.text``: no
    bidirectional or other invisible control characters) and for JSON
    (``portal.nesting``: not nested past its limit), as on every other form."""

    def formfield_for_dbfield(self, db_field: Field, request: HttpRequest, **kwargs: Any) -> Any:
        if isinstance(db_field, models.JSONField):
            kwargs.setdefault("form_class", ShallowJSONField)
        field = super().formfield_for_dbfield(db_field, request, **kwargs)  # type: ignore[misc]
        return follows_text_rule(field) if field is not None else None


class PortalAdmin(PlainTextFields, admin.ModelAdmin):
    """Every admin page of the portal's models."""


class PortalInline(PlainTextFields, admin.TabularInline):
    """Every inline of the portal's admin pages."""


class ReadOnlyAdmin(PortalAdmin):
    """Rows written by the portal itself: anyone may look, nobody adds, edits or deletes."""

    def has_add_permission(self, request: HttpRequest, obj: Any = None) -> bool:
        return False

    def has_change_permission(self, request: HttpRequest, obj: Any = None) -> bool:
        return False

    def has_delete_permission(self, request: HttpRequest, obj: Any = None) -> bool:
        return False


class UserMembershipInline(PortalInline):
    model = Membership
    fk_name = "user"
    extra = 0
    fields = ["project", "role", "created_at"]
    readonly_fields = ["created_at"]
    autocomplete_fields = ["project"]
    verbose_name = _("project membership")
    verbose_name_plural = _("project memberships")


class ProjectMembershipInline(PortalInline):
    model = Membership
    fk_name = "project"
    extra = 0
    fields = ["user", "role", "created_at"]
    readonly_fields = ["created_at"]
    autocomplete_fields = ["user"]
    verbose_name = _("member")
    verbose_name_plural = _("members")


admin.site.unregister(User)
admin.site.unregister(Group)


@admin.register(Group)
class PortalGroupAdmin(PlainTextFields, GroupAdmin):
    """Django's, with the portal's rule for the group's name."""


@admin.register(User)
class PortalUserAdmin(PlainTextFields, UserAdmin):
    inlines = [UserMembershipInline]
    list_display = ["username", "email", "first_name", "last_name", "is_staff", "is_active"]
    list_filter = ["is_staff", "is_superuser", "is_active", "groups"]
    readonly_fields = ["last_login", "date_joined"]

    def get_queryset(self, request: HttpRequest) -> QuerySet[Any]:
        # People only: a service token's account is listed with its token, and no picker
        # of members (the project's autocomplete reads here) offers it.
        return super().get_queryset(request).filter(service_token__isnull=True)


@admin.register(Project)
class ProjectAdmin(PortalAdmin):
    inlines = [ProjectMembershipInline]
    list_display = ["slug", "name", "cost_center", "member_count", "is_active", "created_at"]
    list_filter = ["is_active"]
    search_fields = ["slug", "name", "cost_center"]
    prepopulated_fields = {"slug": ["name"]}
    readonly_fields = ["created_at"]
    fields = ["name", "slug", "cost_center", "is_active", "created_at"]

    def get_queryset(self, request: HttpRequest) -> QuerySet[Project]:
        return super().get_queryset(request).annotate(member_total=Count("memberships"))

    @admin.display(description=_("members"), ordering="member_total")
    def member_count(self, obj: Project) -> int:
        return obj.member_total


@admin.register(AuditEvent)
class AuditEventAdmin(ReadOnlyAdmin):
    list_display = ["at", "verb", "object_type", "object_id", "actor", "project", "source"]
    list_filter = ["source", "verb", "object_type"]
    search_fields = ["=object_id"]
    search_help_text = _("The id of the changed object, exactly.")
    list_select_related = ["actor", "project"]
    date_hierarchy = "at"
    show_full_result_count = False
    fields = [
        "at",
        "verb",
        "object_type",
        "object_id",
        "actor",
        "project",
        "source",
        "before_pretty",
        "after_pretty",
    ]
    readonly_fields = fields

    @admin.display(description=_("before"))
    def before_pretty(self, obj: AuditEvent) -> str:
        return _pretty_json(obj.before)

    @admin.display(description=_("after"))
    def after_pretty(self, obj: AuditEvent) -> str:
        return _pretty_json(obj.after)


@admin.register(ServiceToken)
class ServiceTokenAdmin(ReadOnlyAdmin):
    """Projects' service tokens, to look at: their managers make and revoke them on the
    project's service tokens page (``portal.service_tokens``), which audits both."""

    list_display = ["name", "project", "scopes", "prefix", "created_by", "expires_at", "revoked_at"]
    list_filter = [("revoked_at", admin.EmptyFieldListFilter), "project"]
    search_fields = ["name", "prefix", "project__slug"]
    list_select_related = ["project", "created_by"]
    exclude = ["digest"]


@admin.register(Notification)
class NotificationAdmin(PortalAdmin):
    list_display = ["subject", "user", "created_at", "read_at"]
    list_filter = [("read_at", admin.EmptyFieldListFilter), "created_at"]
    search_fields = ["subject", "user__username", "user__email"]
    list_select_related = ["user"]
    autocomplete_fields = ["user"]
    readonly_fields = ["created_at"]
    date_hierarchy = "created_at"


class InForceFilter(admin.SimpleListFilter):
    title = _("in force")
    parameter_name = "in_force"

    def lookups(self, request: HttpRequest, model_admin: Any) -> list[tuple[str, Any]]:
        return [("yes", _("Yes")), ("no", _("No"))]

    def queryset(self, request: HttpRequest, queryset: QuerySet[LoginLock]) -> QuerySet:
        in_force = {"lifted_at__isnull": True, "until__gt": timezone.now()}
        if self.value() == "yes":
            return queryset.filter(**in_force)
        if self.value() == "no":
            return queryset.exclude(**in_force)
        return queryset


@admin.register(LoginLock)
class LoginLockAdmin(ReadOnlyAdmin):
    """Accounts locked after many failed logins from anywhere (``portal.login_throttle``):
    every admin sees them and may lift one; the portal writes them, nobody edits them."""

    list_display = ["username", "in_force", "failures", "locked_at", "until", "lifted_by"]
    list_filter = [InForceFilter, "locked_at"]
    search_fields = ["username"]
    list_select_related = ["lifted_by"]
    actions = ["lift"]
    fields = ["username", "failures", "locked_at", "until", "lifted_at", "lifted_by"]
    readonly_fields = fields

    def has_module_permission(self, request: HttpRequest) -> bool:
        return access.is_admin(request.user)

    def has_view_permission(self, request: HttpRequest, obj: Any = None) -> bool:
        return access.is_admin(request.user)

    def has_lift_permission(self, request: HttpRequest) -> bool:
        return access.is_admin(request.user)

    @admin.display(description=_("in force"), boolean=True)
    def in_force(self, obj: LoginLock) -> bool:
        return obj.in_force()

    @admin.action(description=_("Lift the selected locks"), permissions=["lift"])
    def lift(self, request: HttpRequest, queryset: QuerySet[LoginLock]) -> None:
        lifted, refused = 0, []
        for lock in queryset:
            try:
                login_throttle.lift_lock(actor=request.user, lock=lock, source="admin")
            except DomainError as error:
                refused.append(error.message)
            else:
                lifted += 1
        if lifted:
            messages.success(
                request,
                ngettext("%(n)s lock lifted.", "%(n)s locks lifted.", lifted) % {"n": lifted},
            )
        for message in refused:
            messages.warning(request, message)


def _pretty_json(data: Any) -> str:
    return format_html("<pre>{}</pre>", json.dumps(data, indent=2, sort_keys=True))
