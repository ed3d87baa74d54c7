"""Admin pages for what the lifecycle engine records about launches: orphan instances
(L4) and launch attempts (L2). Both are written by the worker only."""

from django.contrib import admin
from django.utils import timezone
from django.utils.translation import gettext_lazy as _

from portal.admin import ReadOnlyAdmin
from rental.models import LaunchAttempt, Orphan


@admin.register(Orphan)
class OrphanAdmin(ReadOnlyAdmin):
    list_display = [
        "external_id",
        "account",
        "region",
        "instance_type",
        "status",
        "age",
        "hourly_cost",
        "tag_list",
        "first_seen_at",
        "last_seen_at",
        "terminate_failures",
    ]
    list_filter = ["status", "account", "region"]
    search_fields = ["external_id", "instance_type"]
    list_select_related = ["account"]

    @admin.display(description=_("age"))
    def age(self, obj: Orphan) -> str:
        if obj.launched_at is None:
            return "?"
        hours = (timezone.now() - obj.launched_at).total_seconds() / 3600
        return f"{hours:.1f} h"

    @admin.display(description=_("tags"))
    def tag_list(self, obj: Orphan) -> str:
        return ", ".join(f"{key}={value}" for key, value in sorted(obj.tags.items()))


@admin.register(LaunchAttempt)
class LaunchAttemptAdmin(ReadOnlyAdmin):
    list_display = ["at", "instance", "instance_type", "region", "zone", "kind", "message"]
    list_filter = ["kind", "region"]
    search_fields = ["=instance__id", "instance__external_id"]
    list_select_related = ["instance"]
