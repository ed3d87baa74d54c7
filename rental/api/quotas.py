"""``/api/v1/quotas`` and ``/api/v1/quota-requests``: how much each project may run of
each GPU model, and members' requests to change it.

Through the services the project page and the admin use: admins set G, L and the weight
(``quotas.set_quota``, rule Q1: a refusal names the field and carries its figures);
managers set their quotas' auto-approve limits within the admin's caps
(``quota_requests.set_auto_approve_limits``); members ask for a new G or L with a reason
and managers (L) or admins (G) approve or reject it (``quota_requests``). A project the
caller cannot see is 404.
"""

from decimal import Decimal
from typing import Any

from django.db.models import QuerySet
from django.utils.translation import gettext_lazy as _
from django_filters import rest_framework as filters
from drf_spectacular.utils import extend_schema, extend_schema_view
from rest_framework import mixins, serializers
from rest_framework.decorators import action
from rest_framework.request import Request
from rest_framework.response import Response
from rest_framework.routers import BaseRouter

from portal import access
from portal.api.filters import PortalFilterSet
from portal.api.views import PortalViewSet
from portal.errors import NotFound, NotPermitted
from rental.loans import quota_requests, quotas
from rental.models import GpuModel, Quota, QuotaRequest

MAX_GPUS = 100_000  # what the quota-request service accepts
MAX_HOURS = 100_000
MAX_ID = 2**31 - 1
SLUG_LENGTH = 50


class QuotaSerializer(serializers.ModelSerializer):
    project = serializers.SlugRelatedField(slug_field="slug", read_only=True)
    gpu_model_name = serializers.CharField(source="gpu_model.name", read_only=True)

    class Meta:
        model = Quota
        fields = [
            "id",
            "project",
            "gpu_model",
            "gpu_model_name",
            "guaranteed",
            "ceiling",
            "weight",
            "max_hours_per_lease",
            "max_gpus_per_lease",
            "auto_approve_gpus_cap",
            "auto_approve_hours_cap",
        ]
        read_only_fields = fields


class QuotaChangeSerializer(serializers.Serializer):
    """An admin's change: only the fields sent change (PATCH)."""

    guaranteed = serializers.IntegerField(min_value=0, max_value=MAX_GPUS, required=False)
    ceiling = serializers.IntegerField(min_value=0, max_value=MAX_GPUS, required=False)
    weight = serializers.DecimalField(
        max_digits=8, decimal_places=3, min_value=Decimal("0.001"), required=False
    )
    max_hours_per_lease = serializers.IntegerField(
        min_value=0, max_value=MAX_HOURS, allow_null=True, required=False
    )
    max_gpus_per_lease = serializers.IntegerField(
        min_value=0, max_value=MAX_GPUS, allow_null=True, required=False
    )


class QuotaCreateSerializer(QuotaChangeSerializer):
    """An admin's new quota (or a whole new setting of an existing one)."""

    project = serializers.CharField(max_length=SLUG_LENGTH, help_text="The project's slug")
    gpu_model = serializers.IntegerField(min_value=1, max_value=MAX_ID)
    guaranteed = serializers.IntegerField(min_value=0, max_value=MAX_GPUS)
    ceiling = serializers.IntegerField(min_value=0, max_value=MAX_GPUS)


class AutoApproveSerializer(serializers.Serializer):
    max_gpus_per_lease = serializers.IntegerField(min_value=0, max_value=MAX_GPUS, allow_null=True)
    max_hours_per_lease = serializers.IntegerField(
        min_value=0, max_value=MAX_HOURS, allow_null=True
    )


class AutoApproveCapsSerializer(serializers.Serializer):
    auto_approve_gpus_cap = serializers.IntegerField(
        min_value=0, max_value=MAX_GPUS, allow_null=True, help_text="Null: up to the ceiling L."
    )
    auto_approve_hours_cap = serializers.IntegerField(
        min_value=0, max_value=MAX_HOURS, allow_null=True, help_text="Null: the maximum lease."
    )


class QuotaFilter(PortalFilterSet):
    project = filters.CharFilter(field_name="project__slug", max_length=SLUG_LENGTH)

    class Meta:
        model = Quota
        fields = ["project", "gpu_model"]


def _gpu_model(pk: int) -> GpuModel:
    found = GpuModel.objects.filter(pk=pk).first()
    if found is None:
        raise NotFound(_("No such GPU model."), field="gpu_model")
    return found


@extend_schema_view(
    list=extend_schema(summary="Quotas of the projects you can see", tags=["quotas"]),
    retrieve=extend_schema(summary="A quota", tags=["quotas"]),
)
class QuotaViewSet(mixins.ListModelMixin, mixins.RetrieveModelMixin, PortalViewSet):
    serializer_class = QuotaSerializer
    filterset_class = QuotaFilter
    ordering_fields = ["project__slug", "gpu_model__name", "guaranteed", "ceiling"]
    ordering = ["project__slug", "gpu_model__name"]
    http_method_names = ["get", "post", "patch", "head", "options"]

    def get_queryset(self) -> QuerySet[Quota]:
        return access.scope(Quota.objects.select_related("project", "gpu_model"), self.request.user)

    @extend_schema(
        summary="Set a project's quota for a GPU model (admins; rule Q1)",
        tags=["quotas"],
        request=QuotaCreateSerializer,
        responses={200: QuotaSerializer, 201: QuotaSerializer},
    )
    def create(self, request: Request) -> Response:
        if not access.is_admin(request.user):
            raise NotPermitted(_("Only admins configure quotas."))
        data = self.validated(QuotaCreateSerializer, request)
        project = access.get_project_or_404(request.user, data["project"])
        gpu_model = _gpu_model(data["gpu_model"])
        existed = Quota.objects.filter(project=project, gpu_model=gpu_model).exists()
        quota = quotas.set_quota(
            actor=request.user,
            project=project,
            gpu_model=gpu_model,
            guaranteed=data["guaranteed"],
            ceiling=data["ceiling"],
            weight=data.get("weight", Quota._meta.get_field("weight").default),
            max_hours_per_lease=data.get("max_hours_per_lease"),
            max_gpus_per_lease=data.get("max_gpus_per_lease"),
            source="api",
        )
        return self.answer(self.get_queryset().get(pk=quota.pk), status=200 if existed else 201)

    @extend_schema(
        summary="Change a quota's G, L, weight or auto-approve limits (admins; rule Q1)",
        tags=["quotas"],
        request=QuotaChangeSerializer,
        responses=QuotaSerializer,
    )
    def partial_update(self, request: Request, pk: str | None = None) -> Response:
        quota = self.get_object()
        if not access.is_admin(request.user):
            raise NotPermitted(_("Only admins configure quotas."))
        data = self.validated(QuotaChangeSerializer, request)
        fields = ("guaranteed", "ceiling", "weight", "max_hours_per_lease", "max_gpus_per_lease")
        values: dict[str, Any] = {name: data.get(name, getattr(quota, name)) for name in fields}
        quotas.set_quota(
            actor=request.user,
            project=quota.project,
            gpu_model=quota.gpu_model,
            source="api",
            **values,
        )
        return self.answer(self.get_object())

    @extend_schema(
        summary="Set the quota's auto-approve limits (managers, within the admin's caps)",
        tags=["quotas"],
        request=AutoApproveSerializer,
        responses=QuotaSerializer,
    )
    @action(detail=True, methods=["post"], url_path="auto-approve-limits")
    def auto_approve_limits(self, request: Request, pk: str | None = None) -> Response:
        quota = self.get_object()
        if not access.can_manage(request.user, quota.project_id):
            raise NotPermitted(_("Only a manager of the project sets its auto-approve limits."))
        data = self.validated(AutoApproveSerializer, request)
        quota_requests.set_auto_approve_limits(
            actor=request.user,
            quota=quota,
            max_gpus=data["max_gpus_per_lease"],
            max_hours=data["max_hours_per_lease"],
            source="api",
        )
        return self.answer(self.get_object())

    @extend_schema(
        summary="Cap how high managers may set the auto-approve limits (admins)",
        description="Limits above a lowered cap come down to it in the same audited change.",
        tags=["quotas"],
        request=AutoApproveCapsSerializer,
        responses=QuotaSerializer,
    )
    @action(detail=True, methods=["post"], url_path="auto-approve-caps")
    def auto_approve_caps(self, request: Request, pk: str | None = None) -> Response:
        quota = self.get_object()
        if not access.is_admin(request.user):
            raise NotPermitted(_("Only admins set the caps on auto-approve limits."))
        data = self.validated(AutoApproveCapsSerializer, request)
        quota_requests.set_auto_approve_caps(
            actor=request.user,
            quota=quota,
            gpus_cap=data["auto_approve_gpus_cap"],
            hours_cap=data["auto_approve_hours_cap"],
            source="api",
        )
        return self.answer(self.get_object())


# --- Quota requests --------------------------------------------------------------------


class QuotaRequestSerializer(serializers.ModelSerializer):
    project = serializers.SlugRelatedField(slug_field="slug", read_only=True)
    gpu_model_name = serializers.CharField(source="gpu_model.name", read_only=True)
    requested_by = serializers.CharField(source="requested_by.username", read_only=True)
    decided_by = serializers.CharField(
        source="decided_by.username", read_only=True, allow_null=True, default=None
    )
    needs_admin = serializers.SerializerMethodField(
        help_text="A change of G is an admin's decision; of L alone a manager's"
    )
    may_decide = serializers.SerializerMethodField(help_text="Whether you may decide it")

    class Meta:
        model = QuotaRequest
        fields = [
            "id",
            "project",
            "gpu_model",
            "gpu_model_name",
            "guaranteed",
            "ceiling",
            "reason",
            "status",
            "requested_by",
            "created_at",
            "needs_admin",
            "may_decide",
            "decided_by",
            "decided_at",
            "decision_comment",
        ]
        read_only_fields = fields

    def get_needs_admin(self, asked: QuotaRequest) -> bool:
        return quota_requests.needs_admin(asked)

    def get_may_decide(self, asked: QuotaRequest) -> bool:
        return quota_requests.may_decide(self.context["request"].user, asked)


class QuotaRequestCreateSerializer(serializers.Serializer):
    project = serializers.CharField(max_length=SLUG_LENGTH, help_text="The project's slug")
    gpu_model = serializers.IntegerField(min_value=1, max_value=MAX_ID)
    guaranteed = serializers.IntegerField(
        min_value=0, max_value=MAX_GPUS, allow_null=True, required=False
    )
    ceiling = serializers.IntegerField(
        min_value=0, max_value=MAX_GPUS, allow_null=True, required=False
    )
    reason = serializers.CharField(max_length=2000)


class DecisionSerializer(serializers.Serializer):
    comment = serializers.CharField(
        max_length=2000,
        required=False,
        allow_blank=True,
        default="",
        help_text="Required to reject",
    )


class QuotaRequestFilter(PortalFilterSet):
    project = filters.CharFilter(field_name="project__slug", max_length=SLUG_LENGTH)

    class Meta:
        model = QuotaRequest
        fields = ["project", "status", "gpu_model"]


@extend_schema_view(
    list=extend_schema(summary="Quota-change requests of your projects", tags=["quotas"]),
    retrieve=extend_schema(summary="A quota-change request", tags=["quotas"]),
)
class QuotaRequestViewSet(mixins.ListModelMixin, mixins.RetrieveModelMixin, PortalViewSet):
    serializer_class = QuotaRequestSerializer
    filterset_class = QuotaRequestFilter
    ordering_fields = ["created_at", "decided_at"]
    ordering = ["-created_at", "-pk"]

    def get_queryset(self) -> QuerySet[QuotaRequest]:
        return access.scope(
            QuotaRequest.objects.select_related(
                "project", "gpu_model", "requested_by", "decided_by"
            ),
            self.request.user,
        )

    @extend_schema(
        summary="Ask for a new guarantee G or ceiling L, with a reason (members)",
        tags=["quotas"],
        request=QuotaRequestCreateSerializer,
        responses={201: QuotaRequestSerializer},
    )
    def create(self, request: Request) -> Response:
        data = self.validated(QuotaRequestCreateSerializer, request)
        project = access.get_project_or_404(request.user, data["project"])
        access.require_member(request.user, project)
        quota = (
            Quota.objects.filter(project=project, gpu_model_id=data["gpu_model"])
            .select_related("gpu_model")
            .first()
        )
        if quota is None:
            raise NotFound(_("Choose one of the project's GPU models."), field="gpu_model")
        asked = quota_requests.request_quota_change(
            actor=request.user,
            project=project,
            gpu_model=quota.gpu_model,
            guaranteed=data.get("guaranteed"),
            ceiling=data.get("ceiling"),
            reason=data["reason"],
            source="api",
        )
        return self.answer(self.get_queryset().get(pk=asked.pk), status=201)

    def _decide(self, request: Request, *, approve: bool) -> Response:
        asked = self.get_object()
        data = self.validated(DecisionSerializer, request)
        quota_requests.decide_quota_request(
            actor=request.user,
            request=asked,
            approve=approve,
            comment=data["comment"],
            source="api",
        )
        return self.answer(self.get_object())

    @extend_schema(
        summary="Approve: the quota changes (managers for L, admins for G; rule Q1)",
        tags=["quotas"],
        request=DecisionSerializer,
        responses=QuotaRequestSerializer,
    )
    @action(detail=True, methods=["post"])
    def approve(self, request: Request, pk: str | None = None) -> Response:
        return self._decide(request, approve=True)

    @extend_schema(
        summary="Reject, with a comment; the asker is told",
        tags=["quotas"],
        request=DecisionSerializer,
        responses=QuotaRequestSerializer,
    )
    @action(detail=True, methods=["post"])
    def reject(self, request: Request, pk: str | None = None) -> Response:
        return self._decide(request, approve=False)


def register(router: BaseRouter) -> None:
    router.register("quotas", QuotaViewSet, basename="quota")
    router.register("quota-requests", QuotaRequestViewSet, basename="quota-request")


urlpatterns: list = []
