"""``/api/v1/images``: the image catalog a caller sees (site images and their projects'
images, as on /images/), and saving a lease's instance as a project image.

Saving goes through ``images.save_as_image`` (the lease's requester while a member, or a
manager of its project); the image is ``pending`` until the cloud has it ready.
"""

from django.db.models import QuerySet
from django_filters import rest_framework as filters
from drf_spectacular.utils import extend_schema, extend_schema_view
from rest_framework import mixins, serializers
from rest_framework.request import Request
from rest_framework.response import Response
from rest_framework.routers import BaseRouter

from portal import access
from portal.api.filters import FlagFilter, PortalFilterSet
from portal.api.views import PortalViewSet
from rental import selectors
from rental.catalog import images
from rental.models import Image, Reservation

MAX_ID = 2**31 - 1


class ImageSerializer(serializers.ModelSerializer):
    project = serializers.SlugRelatedField(
        slug_field="slug",
        read_only=True,
        allow_null=True,
        help_text="Empty for a site image (every project)",
    )
    created_by = serializers.CharField(
        source="created_by.username", read_only=True, allow_null=True, default=None
    )
    source_lease = serializers.PrimaryKeyRelatedField(
        source="source_reservation", read_only=True, allow_null=True
    )

    class Meta:
        model = Image
        fields = [
            "id",
            "name",
            "project",
            "os",
            "driver_version",
            "cuda_version",
            "frameworks",
            "framework_versions",
            "region",
            "image_id",
            "ssh_user",
            "state",
            "state_message",
            "source_lease",
            "created_by",
            "created_at",
            "available_at",
        ]
        read_only_fields = fields


class SaveImageSerializer(serializers.Serializer):
    lease = serializers.IntegerField(min_value=1, max_value=MAX_ID, help_text="The lease's id")
    name = serializers.CharField(max_length=100)


class ImageFilter(PortalFilterSet):
    project = filters.CharFilter(field_name="project__slug", max_length=50)
    site = FlagFilter(
        field_name="project", lookup_expr="isnull", help_text="Only site images (or only projects')"
    )

    class Meta:
        model = Image
        fields = ["project", "state", "region", "site"]


@extend_schema_view(
    list=extend_schema(summary="Images you can use or see being saved", tags=["images"]),
    retrieve=extend_schema(summary="An image", tags=["images"]),
)
class ImageViewSet(mixins.ListModelMixin, mixins.RetrieveModelMixin, PortalViewSet):
    serializer_class = ImageSerializer
    filterset_class = ImageFilter
    ordering_fields = ["name", "created_at"]
    ordering = None  # the catalog's own order: site images first, then by project and name

    def get_queryset(self) -> QuerySet[Image]:
        return selectors.image_catalog(self.request.user)

    @extend_schema(
        summary="Save a running or stopped lease's instance as an image of its project",
        tags=["images"],
        request=SaveImageSerializer,
        responses={201: ImageSerializer},
    )
    def create(self, request: Request) -> Response:
        data = self.validated(SaveImageSerializer, request)
        lease = access.get_visible_or_404(
            Reservation.objects.select_related("project"), request.user, pk=data["lease"]
        )
        image = images.save_as_image(
            actor=request.user, reservation=lease, name=data["name"], source="api"
        )
        return self.answer(self.get_queryset().get(pk=image.pk), status=201)


def register(router: BaseRouter) -> None:
    router.register("images", ImageViewSet, basename="image")


urlpatterns: list = []
