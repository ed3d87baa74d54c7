"""``/api/v1/instances``: the instances of the leases the caller can see, with connection
details only for who may connect (members and admins; never finance), and the lease
page's two instance buttons: "I'm still using it" and "Replace this instance"."""

from typing import Any

from django_filters import rest_framework as filters
from drf_spectacular.utils import OpenApiResponse, extend_schema, extend_schema_view
from rest_framework import mixins
from rest_framework.decorators import action
from rest_framework.request import Request
from rest_framework.response import Response

from portal import access
from portal.api.filters import IntegerFilter, PortalFilterSet
from portal.api.views import PortalViewSet
from rental.agent import idle
from rental.api.serializers_leases import InstanceSerializer
from rental.fleet import replace
from rental.models import Instance

TAGS = ["instances"]


class InstanceFilter(PortalFilterSet):
    lease = IntegerFilter(field_name="reservation_id")
    project = filters.CharFilter(field_name="reservation__project__slug", max_length=50)
    state = filters.MultipleChoiceFilter(choices=Instance.State.choices)

    class Meta:
        model = Instance
        fields = ["lease", "project", "state"]


@extend_schema_view(
    list=extend_schema(summary="Instances of the leases you can see", tags=TAGS),
    retrieve=extend_schema(summary="An instance; connection only for members", tags=TAGS),
)
class InstanceViewSet(mixins.ListModelMixin, mixins.RetrieveModelMixin, PortalViewSet):
    serializer_class = InstanceSerializer
    filterset_class = InstanceFilter
    ordering_fields = ["id", "running_at", "launched_at"]
    ordering = ["-id"]

    def get_queryset(self) -> Any:
        instances = Instance.objects.select_related(
            "reservation__project", "reservation__image", "offering"
        )
        return access.scope(instances, self.request.user, project_field="reservation__project")

    def _fresh(self, instance: Instance, *, status: int = 200) -> Response:
        return self.answer(self.get_queryset().get(pk=instance.pk), status=status)

    @extend_schema(
        summary="I'm still using it: the idle count starts again (the requester)",
        request=None,
        responses={200: OpenApiResponse(InstanceSerializer, description="The instance.")},
        tags=TAGS,
    )
    @action(detail=True, methods=["post"], url_path="still-using")
    def still_using(self, request: Request, pk: str | None = None) -> Response:
        instance = idle.still_using(actor=request.user, instance=self.get_object(), source="api")
        return self._fresh(instance)

    @extend_schema(
        summary="Replace an unhealthy instance of an active lease with a new one",
        request=None,
        responses={201: OpenApiResponse(InstanceSerializer, description="The new instance.")},
        tags=TAGS,
    )
    @action(detail=True, methods=["post"])
    def replace(self, request: Request, pk: str | None = None) -> Response:
        new = replace.replace_instance(actor=request.user, instance=self.get_object(), source="api")
        return self._fresh(new, status=201)


def register(router: Any) -> None:
    router.register("instances", InstanceViewSet, basename="instance")


urlpatterns: list[Any] = []
