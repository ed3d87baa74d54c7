"""``/api/v1/projects`` and ``/api/v1/projects/{slug}/members``: the projects a caller can
see, and who belongs to them. Members change through ``portal.memberships`` (the audited
service configuration-as-code uses), managers of the project and admins only."""

from typing import Any

from django.db.models import Count, QuerySet
from django.utils.translation import gettext_lazy as _
from drf_spectacular.utils import OpenApiParameter, extend_schema, extend_schema_view
from rest_framework import mixins, serializers
from rest_framework.request import Request
from rest_framework.response import Response

from portal import access, memberships
from portal.api.filters import PortalFilterSet
from portal.api.views import PortalViewSet
from portal.errors import NotFound
from portal.models import Membership, Project
from portal.service_tokens import people

SLUG = OpenApiParameter("slug", str, OpenApiParameter.PATH, description="The project's slug.")


class ProjectSerializer(serializers.ModelSerializer):
    role = serializers.SerializerMethodField(
        help_text="Your role in the project; null where you see it as admin or finance."
    )
    members = serializers.IntegerField(source="member_count", read_only=True)

    class Meta:
        model = Project
        fields = ["slug", "name", "cost_center", "is_active", "created_at", "role", "members"]

    def get_role(self, project: Project) -> str | None:
        return access.role_in(self.context["request"].user, project)


class ProjectFilter(PortalFilterSet):
    class Meta:
        model = Project
        fields = ["is_active"]


@extend_schema_view(
    list=extend_schema(summary="The projects you can see."),
    retrieve=extend_schema(summary="One project.", parameters=[SLUG]),
)
class ProjectViewSet(mixins.ListModelMixin, mixins.RetrieveModelMixin, PortalViewSet):
    serializer_class = ProjectSerializer
    filterset_class = ProjectFilter
    lookup_field = "slug"
    lookup_value_regex = "[-a-zA-Z0-9_]+"
    ordering = ["slug"]
    ordering_fields = ["slug", "name", "created_at"]

    def get_queryset(self) -> QuerySet[Project]:
        return access.visible_projects(self.request.user).annotate(
            member_count=Count("memberships")
        )


class MemberSerializer(serializers.ModelSerializer):
    user = serializers.IntegerField(source="user_id", read_only=True)
    username = serializers.CharField(source="user.username", read_only=True)
    full_name = serializers.CharField(source="user.get_full_name", read_only=True)
    project = serializers.SlugField(source="project.slug", read_only=True)

    class Meta:
        model = Membership
        fields = ["id", "project", "user", "username", "full_name", "role", "created_at"]


class MemberAddSerializer(serializers.Serializer):
    username = serializers.CharField(max_length=150)
    role = serializers.ChoiceField(choices=Membership.Role.choices)


class MemberRoleSerializer(serializers.Serializer):
    role = serializers.ChoiceField(
        choices=Membership.Role.choices, required=False, help_text="Absent: no change."
    )


class MemberFilter(PortalFilterSet):
    class Meta:
        model = Membership
        fields = ["role"]


@extend_schema_view(
    list=extend_schema(summary="Who belongs to a project.", parameters=[SLUG]),
    retrieve=extend_schema(summary="One member.", parameters=[SLUG]),
    create=extend_schema(
        summary="Add a member by username, or change their role (managers, admins).",
        parameters=[SLUG],
        request=MemberAddSerializer,
        responses={200: MemberSerializer, 201: MemberSerializer},
    ),
    partial_update=extend_schema(
        summary="Change a member's role (managers, admins).",
        parameters=[SLUG],
        request=MemberRoleSerializer,
    ),
    destroy=extend_schema(summary="Remove a member (managers, admins).", parameters=[SLUG]),
)
class MemberViewSet(mixins.ListModelMixin, mixins.RetrieveModelMixin, PortalViewSet):
    serializer_class = MemberSerializer
    filterset_class = MemberFilter
    ordering = ["user__username"]
    ordering_fields = ["user__username", "role", "created_at"]
    http_method_names = ["get", "post", "patch", "delete", "head", "options"]

    def project(self) -> Project:
        if not hasattr(self, "_project"):
            self._project = access.get_project_or_404(self.request.user, self.kwargs["slug"])
        return self._project

    def get_queryset(self) -> QuerySet[Membership]:
        if getattr(self, "swagger_fake_view", False):
            return Membership.objects.none()
        return Membership.objects.filter(project=self.project()).select_related("user", "project")

    def _managed(self) -> Project:
        project = self.project()
        access.require_manager(self.request.user, project)
        return project

    def create(self, request: Request, slug: str) -> Response:
        project = self._managed()
        data = self.validated(MemberAddSerializer, request)
        user = people().filter(username=data["username"], is_active=True).first()
        if user is None:  # named in the body, as an id may be: 404 (portal.api.errors)
            raise NotFound(_("No active user has this username."), field="username")
        existed = Membership.objects.filter(project=project, user=user).exists()
        membership = memberships.set_membership(
            actor=request.user, project=project, user=user, role=data["role"], source="api"
        )
        return self.answer(membership, status=200 if existed else 201)

    def partial_update(self, request: Request, slug: str, pk: Any) -> Response:
        project = self._managed()
        membership = self.get_object()
        data = self.validated(MemberRoleSerializer, request)
        if "role" not in data:
            return self.answer(membership)
        membership = memberships.set_membership(
            actor=request.user,
            project=project,
            user=membership.user,
            role=data["role"],
            source="api",
        )
        return self.answer(membership)

    def destroy(self, request: Request, slug: str, pk: Any) -> Response:
        project = self._managed()
        membership = self.get_object()
        memberships.remove_membership(
            actor=request.user, project=project, user=membership.user, source="api"
        )
        return Response(status=204)


def register(router: Any) -> None:
    router.register("projects", ProjectViewSet, basename="project")
    router.register(r"projects/(?P<slug>[-a-zA-Z0-9_]+)/members", MemberViewSet, "project-member")


urlpatterns: list[Any] = []
