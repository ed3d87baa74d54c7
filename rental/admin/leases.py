"""Admin for leases and what they run on: reservations, instances, usage, utilization,
SSH keys and data volumes.

Rows that the lifecycle engine owns (instances, usage, utilization) are read-only, and a
lease's lifecycle fields cannot be edited: changing them by hand would bypass the rules
of DESIGN.md §4.
"""

from typing import Any

from django.contrib import admin
from django.http import HttpRequest
from django.utils.translation import gettext_lazy as _

from portal.admin import PortalAdmin, PortalInline, ReadOnlyAdmin
from portal.numbers import NonNegativeNumbersForm
from rental.models import DataVolume, Instance, Reservation, SshKey, UsageRecord


class InstanceInline(PortalInline):
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
class ReservationAdmin(PortalAdmin):
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


@admin.register(SshKey)
class SshKeyAdmin(PortalAdmin):
    list_display = ["name", "user", "fingerprint", "created_at"]
    search_fields = ["name", "user__username", "user__email"]
    list_select_related = ["user"]
    autocomplete_fields = ["user"]
    readonly_fields = ["fingerprint", "created_at"]


@admin.register(DataVolume)
class DataVolumeAdmin(PortalAdmin):
    form = NonNegativeNumbersForm
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
