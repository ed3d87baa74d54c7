"""``/api/v1/volumes``: projects' data volumes (disks that outlive leases), as on the
project page: list, detail, create and delete through ``rental.catalog.volumes``.

Members of the project create and delete (others who can see it, admins and finance
included, get 404 for those, as on the page). Deleting is asynchronous: the answer is the
volume in state ``deleting`` (or ``deleted`` when it never existed in the cloud).
"""

from typing import Any

from django.db.models import QuerySet
from django_filters import rest_framework as filters
from drf_spectacular.utils import extend_schema, extend_schema_field, extend_schema_view
from rest_framework import mixins, serializers
from rest_framework.request import Request
from rest_framework.response import Response
from rest_framework.routers import BaseRouter

from portal import access
from portal.api.filters import PortalFilterSet
from portal.api.views import PortalViewSet
from rental import selectors
from rental.catalog import volumes
from rental.models import DataVolume

MAX_SIZE_GB = 10**9  # the service refuses above PORTAL_VOLUME_MAX_GB, naming the bound


class VolumeSerializer(serializers.ModelSerializer):
    project = serializers.SlugRelatedField(slug_field="slug", read_only=True)
    attached_lease = serializers.IntegerField(
        source="attached_instance.reservation_id", read_only=True, allow_null=True, default=None
    )
    held_by_lease = serializers.SerializerMethodField(
        help_text="The lease (not finished) that will use or uses the volume"
    )
    created_by = serializers.CharField(
        source="created_by.username", read_only=True, allow_null=True, default=None
    )

    class Meta:
        model = DataVolume
        fields = [
            "id",
            "project",
            "name",
            "state",
            "size_gb",
            "region",
            "zone",
            "volume_id",
            "attached_instance",
            "attached_lease",
            "device",
            "held_by_lease",
            "storage_rate_per_gb_month",
            "last_error",
            "created_by",
            "created_at",
            "deleted_at",
        ]
        read_only_fields = fields

    @extend_schema_field(serializers.IntegerField(allow_null=True))
    def get_held_by_lease(self, volume: DataVolume) -> int | None:
        holding = getattr(volume, "holding_leases", None)
        return holding[0].pk if holding else None


class VolumeCreateSerializer(serializers.Serializer):
    project = serializers.CharField(max_length=50, help_text="The project's slug")
    name = serializers.CharField(max_length=80)
    size_gb = serializers.IntegerField(min_value=1, max_value=MAX_SIZE_GB)
    zone = serializers.CharField(max_length=40, help_text="A zone where an offering runs")


class VolumeFilter(PortalFilterSet):
    project = filters.CharFilter(field_name="project__slug", max_length=50)

    class Meta:
        model = DataVolume
        fields = ["project", "state", "zone"]


@extend_schema_view(
    list=extend_schema(
        summary="Data volumes of your projects (deleted ones only with state=deleted)",
        tags=["volumes"],
    ),
    retrieve=extend_schema(summary="A data volume", tags=["volumes"]),
)
class VolumeViewSet(
    mixins.ListModelMixin, mixins.RetrieveModelMixin, mixins.DestroyModelMixin, PortalViewSet
):
    serializer_class = VolumeSerializer
    filterset_class = VolumeFilter
    ordering_fields = ["name", "created_at", "size_gb"]
    ordering = ["project__slug", "name", "pk"]

    def get_queryset(self) -> QuerySet[DataVolume]:
        return selectors.volumes(access.scope(DataVolume.objects.all(), self.request.user))

    def filter_queryset(self, queryset: QuerySet[DataVolume]) -> QuerySet[DataVolume]:
        if self.action == "list" and "state" not in self.request.query_params:
            queryset = queryset.exclude(state=DataVolume.State.DELETED)  # as the page lists
        return super().filter_queryset(queryset)

    @extend_schema(
        summary="Create a data volume in a zone where an instance type is offered (members)",
        tags=["volumes"],
        request=VolumeCreateSerializer,
        responses={201: VolumeSerializer},
    )
    def create(self, request: Request) -> Response:
        data = self.validated(VolumeCreateSerializer, request)
        project = access.get_project_or_404(request.user, data["project"])
        access.require_member(request.user, project)
        volume = volumes.create_volume(
            actor=request.user,
            project=project,
            name=data["name"],
            size_gb=data["size_gb"],
            zone=data["zone"],
            source="api",
        )
        return self.answer(self.get_queryset().get(pk=volume.pk), status=201)

    @extend_schema(
        summary="Delete a volume attached nowhere and held by no lease (members)",
        tags=["volumes"],
        request=None,
        responses={202: VolumeSerializer},
    )
    def destroy(self, request: Request, *args: Any, **kwargs: Any) -> Response:
        volume = self.get_object()
        access.require_member(request.user, volume.project)
        volumes.delete_volume(actor=request.user, volume=volume, source="api")
        return self.answer(self.get_queryset().get(pk=volume.pk), status=202)


def register(router: BaseRouter) -> None:
    router.register("volumes", VolumeViewSet, basename="volume")


urlpatterns: list = []
