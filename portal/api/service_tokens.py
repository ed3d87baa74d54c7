"""``/api/v1/projects/{slug}/service-tokens``: a project's service tokens
(portal/service_tokens.py), for its managers and admins; anybody else gets 404, as on the
page. The raw token is in the answer to its creation and nowhere else. A service token
itself never calls these (``service_tokens.NEVER``)."""

from typing import Any

from django.db.models import QuerySet
from drf_spectacular.utils import OpenApiParameter, extend_schema, extend_schema_view
from rest_framework import mixins, serializers
from rest_framework.decorators import action
from rest_framework.request import Request
from rest_framework.response import Response

from portal import access, service_tokens
from portal.api.filters import FlagFilter, PortalFilterSet
from portal.api.views import EmptySerializer, PortalViewSet
from portal.models import Project, ServiceToken

SLUG = OpenApiParameter("slug", str, OpenApiParameter.PATH, description="The project's slug.")


class ServiceTokenSerializer(serializers.ModelSerializer):
    project = serializers.SlugField(source="project.slug", read_only=True)
    scopes = serializers.ListField(child=serializers.ChoiceField(ServiceToken.Scope.choices))
    created_by = serializers.CharField(
        source="created_by.username", read_only=True, allow_null=True, default=None
    )
    revoked = serializers.SerializerMethodField()

    class Meta:
        model = ServiceToken
        fields = [
            "id",
            "project",
            "name",
            "scopes",
            "prefix",
            "created_by",
            "created_at",
            "expires_at",
            "last_used_at",
            "revoked_at",
            "revoked",
        ]
        read_only_fields = fields

    def get_revoked(self, token: ServiceToken) -> bool:
        return token.revoked_at is not None


class ServiceTokenCreateSerializer(serializers.Serializer):
    name = serializers.CharField(max_length=80)
    scopes = serializers.ListField(
        child=serializers.ChoiceField(ServiceToken.Scope.choices),
        allow_empty=False,
        max_length=len(ServiceToken.Scope.choices),
        help_text="read: any GET within the project; leases: ask for GPUs, extend, end and "
        "cancel its own leases, with their SSH keys.",
    )
    expires_at = serializers.DateTimeField(help_text="When it stops working (at most a year).")


class NewServiceTokenSerializer(ServiceTokenSerializer):
    token = serializers.CharField(help_text="The token itself. Shown here once, never again.")

    class Meta(ServiceTokenSerializer.Meta):
        fields = [*ServiceTokenSerializer.Meta.fields, "token"]


class ServiceTokenFilter(PortalFilterSet):
    revoked = FlagFilter(field_name="revoked_at", lookup_expr="isnull", exclude=True)

    class Meta:
        model = ServiceToken
        fields = ["name"]


@extend_schema_view(
    list=extend_schema(
        summary="A project's service tokens, never the tokens themselves (managers, admins).",
        parameters=[SLUG],
    ),
    retrieve=extend_schema(summary="One service token of the project.", parameters=[SLUG]),
    create=extend_schema(
        summary="Make a service token for the project; the answer holds it once.",
        parameters=[SLUG],
        request=ServiceTokenCreateSerializer,
        responses={201: NewServiceTokenSerializer},
    ),
    revoke=extend_schema(
        summary="Revoke a service token: it stops working at once.",
        parameters=[SLUG],
        request=EmptySerializer,
    ),
)
class ServiceTokenViewSet(mixins.ListModelMixin, mixins.RetrieveModelMixin, PortalViewSet):
    serializer_class = ServiceTokenSerializer
    filterset_class = ServiceTokenFilter
    ordering = ["-created_at", "-id"]
    ordering_fields = ["created_at", "expires_at", "last_used_at", "name"]

    def project(self) -> Project:
        """The project in the path, for its managers and admins; a 404 for anyone else."""
        if not hasattr(self, "_project"):
            project = access.get_project_or_404(self.request.user, self.kwargs["slug"])
            access.require_manager(self.request.user, project)
            self._project = project
        return self._project

    def get_queryset(self) -> QuerySet[ServiceToken]:
        if getattr(self, "swagger_fake_view", False):
            return ServiceToken.objects.none()
        return ServiceToken.objects.filter(project=self.project()).select_related(
            "project", "created_by"
        )

    def create(self, request: Request, slug: str) -> Response:
        project = self.project()
        data = self.validated(ServiceTokenCreateSerializer, request)
        row, raw = service_tokens.create_service_token(
            actor=request.user,
            project=project,
            name=data["name"],
            scopes=data["scopes"],
            expires_at=data["expires_at"],
            source="api",
        )
        row.token = raw  # type: ignore[attr-defined]  # for this one answer only
        return Response(
            NewServiceTokenSerializer(row).data, status=201, headers={"Cache-Control": "no-store"}
        )

    @action(detail=True, methods=["post"])
    def revoke(self, request: Request, slug: str, pk: Any = None) -> Response:
        token = self.get_object()
        return self.answer(
            service_tokens.revoke_service_token(actor=request.user, token=token, source="api")
        )


def register(router: Any) -> None:
    router.register(
        r"projects/(?P<slug>[-a-zA-Z0-9_]+)/service-tokens",
        ServiceTokenViewSet,
        "project-service-token",
    )


urlpatterns: list[Any] = []
