"""``/api/v1/gpu-hour-allocations``: projects' GPU-hours a month per GPU model, their
thresholds and hard stop (GA1–GA3). Members and finance read them with this month's use;
a project's managers (and admins) set and remove them through the service the
allocations page uses (``billing.allocations``)."""

from typing import Any

import django_filters
from django.db.models import QuerySet
from django.utils import timezone
from drf_spectacular.utils import extend_schema, extend_schema_field, extend_schema_view
from rest_framework import mixins, serializers
from rest_framework.request import Request
from rest_framework.response import Response

from billing import allocations
from billing.api.budgets import ThresholdSerializer
from billing.models import GpuHourAllocation
from billing.thresholds import MOST, readable_thresholds
from portal import access
from portal.api.filters import PortalFilterSet
from portal.api.views import PortalViewSet


class AllocationSerializer(serializers.ModelSerializer):
    project = serializers.SlugField(source="project.slug", read_only=True)
    gpu_model = serializers.CharField(source="gpu_model.name", read_only=True)
    thresholds = serializers.SerializerMethodField()
    used_gpu_hours = serializers.SerializerMethodField(
        help_text="Billed GPU-hours of this GPU model this month, to the hundredth, rounded down."
    )

    class Meta:
        model = GpuHourAllocation
        fields = ["id", "project", "gpu_model", "monthly_hours", "hard_stop", "thresholds"]
        fields += ["used_gpu_hours"]

    @extend_schema_field(ThresholdSerializer(many=True))
    def get_thresholds(self, allocation: GpuHourAllocation) -> list[dict[str, Any]]:
        """The thresholds that read as thresholds (as the budgets' endpoint)."""
        return readable_thresholds(allocation.thresholds)[0]

    @extend_schema_field(serializers.DecimalField(max_digits=14, decimal_places=2))
    def get_used_gpu_hours(self, allocation: GpuHourAllocation) -> str:
        used = self.context.get("used", {})
        key = (allocation.project_id, allocation.gpu_model_id)
        return str(allocations.hours(used.get(key, 0)))


class AllocationWriteSerializer(serializers.Serializer):
    monthly_hours = serializers.DecimalField(
        max_digits=12, decimal_places=2, min_value=0, help_text="GPU-hours a month."
    )
    hard_stop = serializers.BooleanField(default=False)
    thresholds = ThresholdSerializer(many=True, max_length=MOST, default=list)


class AllocationCreateSerializer(AllocationWriteSerializer):
    project = serializers.SlugField(max_length=50, help_text="The project's slug.")
    gpu_model = serializers.CharField(max_length=100, help_text="The GPU model's name.")


class AllocationFilter(PortalFilterSet):
    project = django_filters.CharFilter(field_name="project__slug", max_length=50)

    class Meta:
        model = GpuHourAllocation
        fields = ["project", "hard_stop"]


@extend_schema_view(
    list=extend_schema(summary="GPU-hour allocations of the projects you can see."),
    retrieve=extend_schema(summary="One GPU-hour allocation, with this month's use."),
    create=extend_schema(
        summary="Set a project's allocation of a GPU model (its managers, admins): made or "
        "replaced.",
        request=AllocationCreateSerializer,
        responses={200: AllocationSerializer, 201: AllocationSerializer},
    ),
    update=extend_schema(
        summary="Replace an allocation (the project's managers, admins).",
        request=AllocationWriteSerializer,
    ),
    destroy=extend_schema(summary="Remove an allocation (the project's managers, admins)."),
)
class AllocationViewSet(
    mixins.ListModelMixin, mixins.RetrieveModelMixin, mixins.DestroyModelMixin, PortalViewSet
):
    serializer_class = AllocationSerializer
    filterset_class = AllocationFilter
    ordering = ["project__slug", "gpu_model__name"]
    ordering_fields = ["project__slug", "gpu_model__name", "monthly_hours"]
    http_method_names = ["get", "post", "put", "delete", "head", "options"]

    def get_queryset(self) -> QuerySet[GpuHourAllocation]:
        if getattr(self, "swagger_fake_view", False):
            return GpuHourAllocation.objects.none()
        return access.scope(
            GpuHourAllocation.objects.select_related("project", "gpu_model"), self.request.user
        )

    def get_serializer(self, *args: Any, **kwargs: Any) -> Any:
        """This month's use of the allocations answered, in one read of usage."""
        shown = args[0] if args else None
        if shown is not None:
            rows = list(shown) if isinstance(shown, list | QuerySet) else [shown]
            now = timezone.now()
            kwargs["context"] = {
                **self.get_serializer_context(),
                "used": allocations.used_seconds(
                    project_ids=[row.project_id for row in rows],
                    gpu_model_ids=[row.gpu_model_id for row in rows],
                    period=now,
                    now=now,
                ),
            }
        return super().get_serializer(*args, **kwargs)

    def create(self, request: Request) -> Response:
        data = self.validated(AllocationCreateSerializer, request)
        project = access.get_project_or_404(request.user, data["project"])
        access.require_manager(request.user, project)
        existed = GpuHourAllocation.objects.filter(
            project=project, gpu_model__name=data["gpu_model"]
        ).exists()
        allocation = self._set(project, data["gpu_model"], data)
        return self.answer(allocation, status=200 if existed else 201)

    def update(self, request: Request, pk: Any = None) -> Response:
        allocation = self.get_object()
        access.require_manager(request.user, allocation.project)
        data = self.validated(AllocationWriteSerializer, request)
        changed = allocations.change_allocation(
            allocation=allocation,
            actor=request.user,
            monthly_hours=data["monthly_hours"],
            thresholds=[dict(item) for item in data["thresholds"]],
            hard_stop=data["hard_stop"],
            source="api",
        )
        return self.answer(changed)

    def destroy(self, request: Request, pk: Any = None) -> Response:
        allocation = self.get_object()
        access.require_manager(request.user, allocation.project)
        allocations.remove_allocation_row(allocation=allocation, actor=request.user, source="api")
        return Response(status=204)

    def _set(self, project: Any, gpu_model: Any, data: dict[str, Any]) -> GpuHourAllocation:
        return allocations.set_allocation(
            project=project,
            actor=self.request.user,
            gpu_model=gpu_model,
            monthly_hours=data["monthly_hours"],
            thresholds=[dict(item) for item in data["thresholds"]],
            hard_stop=data["hard_stop"],
            source="api",
        )


def register(router: Any) -> None:
    router.register("gpu-hour-allocations", AllocationViewSet, basename="gpu-hour-allocation")


urlpatterns: list[Any] = []
