"""``/api/v1/audit-events``: the audit log, for admins only (others get 404, as the audit
page answers them), newest first, filterable like the page and more."""

from typing import Any

import django_filters
from django.db.models import QuerySet
from drf_spectacular.utils import extend_schema, extend_schema_view
from rest_framework import mixins, serializers

from portal import access
from portal.api.filters import DateTimeFilter, PortalFilterSet
from portal.api.views import PortalViewSet
from portal.models import AuditEvent
from portal.service_tokens import actor_name


class AuditEventSerializer(serializers.ModelSerializer):
    actor = serializers.CharField(
        source="actor.username", read_only=True, allow_null=True, default=None
    )
    actor_name = serializers.SerializerMethodField(
        help_text='Who did it in words: the username, or "service token <name> (<project>)"; '
        "null for the portal itself."
    )
    project = serializers.SlugField(
        source="project.slug", read_only=True, allow_null=True, default=None
    )

    class Meta:
        model = AuditEvent
        fields = [
            "id",
            "at",
            "actor",
            "actor_name",
            "verb",
            "object_type",
            "object_id",
            "project",
            "source",
            "before",
            "after",
        ]

    def get_actor_name(self, event: AuditEvent) -> str | None:
        return actor_name(event.actor) if event.actor else None


class AuditEventFilter(PortalFilterSet):
    actor = django_filters.CharFilter(field_name="actor__username", max_length=150)
    project = django_filters.CharFilter(field_name="project__slug", max_length=50)
    verb = django_filters.CharFilter(max_length=60)
    object_type = django_filters.CharFilter(max_length=60)
    object_id = django_filters.CharFilter(max_length=64)
    at_after = DateTimeFilter(field_name="at", lookup_expr="gte")
    at_before = DateTimeFilter(field_name="at", lookup_expr="lt")

    class Meta:
        model = AuditEvent
        fields = ["verb", "object_type", "object_id", "source", "actor", "project"]


@extend_schema_view(
    list=extend_schema(
        summary="The audit log, newest first (admins).",
        description="`at_after` is inclusive and `at_before` exclusive (a half-open range).",
    ),
    retrieve=extend_schema(summary="One audit event (admins)."),
)
class AuditEventViewSet(mixins.ListModelMixin, mixins.RetrieveModelMixin, PortalViewSet):
    serializer_class = AuditEventSerializer
    filterset_class = AuditEventFilter
    ordering = ["-at", "-id"]
    ordering_fields = ["at", "id"]

    def get_queryset(self) -> QuerySet[AuditEvent]:
        if getattr(self, "swagger_fake_view", False):
            return AuditEvent.objects.none()
        access.require_admin(self.request.user)
        return AuditEvent.objects.select_related("actor__service_token__project", "project")


def register(router: Any) -> None:
    router.register("audit-events", AuditEventViewSet, basename="audit-event")


urlpatterns: list[Any] = []
