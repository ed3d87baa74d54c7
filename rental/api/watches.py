"""``/api/v1/availability-watches``: the caller's own "tell me when this fits" watches
(rental.loans.pools): list, create, delete. Nobody sees another person's watches."""

from typing import Any

from drf_spectacular.utils import extend_schema, extend_schema_view
from rest_framework import mixins, serializers
from rest_framework.request import Request
from rest_framework.response import Response

from portal.api.views import PortalViewSet
from rental.loans import pools
from rental.models import AvailabilityWatch, GpuModel

TAGS = ["availability-watches"]
MAX_WATCH_GPUS = 100_000  # the service's bound


class WatchSerializer(serializers.ModelSerializer):
    gpu_model_name = serializers.CharField(source="gpu_model.name", read_only=True)

    class Meta:
        model = AvailabilityWatch
        fields = ["id", "gpu_model", "gpu_model_name", "count", "created_at", "notified_at"]
        read_only_fields = fields


class NewWatchSerializer(serializers.Serializer):
    gpu_model = serializers.PrimaryKeyRelatedField(queryset=GpuModel.objects.all())
    count = serializers.IntegerField(min_value=1, max_value=MAX_WATCH_GPUS)


@extend_schema_view(
    list=extend_schema(summary="Your availability watches", tags=TAGS),
    retrieve=extend_schema(summary="One of your availability watches", tags=TAGS),
    create=extend_schema(
        summary="Be told once when this many GPUs of the model are free in its pool",
        request=NewWatchSerializer,
        responses={201: WatchSerializer},
        tags=TAGS,
    ),
    destroy=extend_schema(summary="Remove one of your watches", tags=TAGS),
)
class WatchViewSet(
    mixins.ListModelMixin,
    mixins.RetrieveModelMixin,
    mixins.DestroyModelMixin,
    PortalViewSet,
):
    serializer_class = WatchSerializer
    ordering_fields = ["created_at", "id"]
    ordering = ["-created_at", "-id"]
    filterset_fields = ["gpu_model"]

    def get_queryset(self) -> Any:
        if getattr(self, "swagger_fake_view", False):  # the schema, without a user
            return AvailabilityWatch.objects.none()
        return AvailabilityWatch.objects.filter(user=self.request.user).select_related("gpu_model")

    def create(self, request: Request, *args: Any, **kwargs: Any) -> Response:
        data = self.validated(NewWatchSerializer, request)
        watch = pools.watch_availability(
            actor=request.user, gpu_model=data["gpu_model"], count=data["count"]
        )
        return self.answer(watch, status=201)

    def perform_destroy(self, instance: AvailabilityWatch) -> None:
        pools.stop_watching(actor=self.request.user, watch=instance, source="api")


def register(router: Any) -> None:
    router.register("availability-watches", WatchViewSet, basename="availability-watch")


urlpatterns: list[Any] = []
