"""``/api/v1/gpu-models`` and ``/api/v1/offerings``: what can be rented.

Readable by who may see the pools (project members, admins, finance), as on the web;
anyone else gets 404. Prices are decimal strings in the offering's currency. Admins
change an offering's prices and whether it is sold (``PATCH``), as on the pool page.
"""

from typing import Any

from django.db.models import QuerySet
from django.http import Http404
from django.utils.translation import gettext as _
from django_filters import rest_framework as filters
from drf_spectacular.utils import extend_schema, extend_schema_view
from rest_framework import mixins, serializers
from rest_framework.request import Request
from rest_framework.response import Response
from rest_framework.routers import BaseRouter

from portal import access
from portal.api.filters import FlagFilter, PortalFilterSet
from portal.api.views import PortalViewSet
from portal.errors import NotPermitted
from rental.catalog import offerings
from rental.models import GpuModel, Offering


def require_catalog_reader(user: Any) -> None:
    """The pools and catalog pages' rule: members of a project, admins and finance."""
    if not (access.sees_everything(user) or access.roles(user)):
        raise Http404


class GpuModelSerializer(serializers.ModelSerializer):
    class Meta:
        model = GpuModel
        fields = [
            "id",
            "name",
            "vendor",
            "memory_gb",
            "memory_bandwidth_gbps",
            "bf16_tflops",
            "fp16_tflops",
            "interconnect",
            "notes",
        ]
        read_only_fields = fields


class GpuModelFilter(PortalFilterSet):
    name = filters.CharFilter(
        field_name="name", lookup_expr="iexact", max_length=100, help_text="e.g. L4 24GB"
    )

    class Meta:
        model = GpuModel
        fields = ["name", "vendor", "interconnect"]


@extend_schema_view(
    list=extend_schema(summary="GPU models", tags=["catalog"]),
    retrieve=extend_schema(summary="A GPU model", tags=["catalog"]),
)
class GpuModelViewSet(mixins.ListModelMixin, mixins.RetrieveModelMixin, PortalViewSet):
    serializer_class = GpuModelSerializer
    filterset_class = GpuModelFilter
    ordering_fields = ["name", "vendor", "memory_gb", "bf16_tflops"]
    ordering = ["vendor", "memory_gb", "name"]

    def get_queryset(self) -> QuerySet[GpuModel]:
        if not getattr(self, "swagger_fake_view", False):  # the schema has no caller
            require_catalog_reader(self.request.user)
        return GpuModel.objects.all()


class OfferingSerializer(serializers.ModelSerializer):
    account_name = serializers.CharField(source="account.name", read_only=True)
    gpu_model_name = serializers.CharField(source="gpu_model.name", read_only=True)

    class Meta:
        model = Offering
        fields = [
            "id",
            "account",
            "account_name",
            "region",
            "zones",
            "instance_type",
            "gpu_model",
            "gpu_model_name",
            "gpus_per_instance",
            "vcpus",
            "memory_gib",
            "root_disk_gb",
            "on_demand_price_per_hour",
            "spot_price_per_hour",
            "storage_price_per_gb_month",
            "currency",
            "price_updated_at",
            "driver_version",
            "max_cuda_version",
            "is_available",
        ]
        read_only_fields = fields


class OfferingTermsSerializer(serializers.Serializer):
    """An admin's change of an offering's terms: only the fields sent change (PATCH)."""

    on_demand_price_per_hour = serializers.DecimalField(
        max_digits=12, decimal_places=6, min_value=0, required=False
    )
    spot_price_per_hour = serializers.DecimalField(
        max_digits=12,
        decimal_places=6,
        min_value=0,
        required=False,
        allow_null=True,
        help_text="Null: not sold on spot.",
    )
    is_available = serializers.BooleanField(required=False)


class OfferingFilter(PortalFilterSet):
    available = FlagFilter(
        method="filter_available",
        help_text="Sold now: the offering is available and its provider account active.",
    )

    class Meta:
        model = Offering
        fields = ["gpu_model", "region", "account", "currency"]

    def filter_available(self, queryset: QuerySet[Offering], name: str, value: bool):
        sold = {"is_available": True, "account__is_active": True}
        return queryset.filter(**sold) if value else queryset.exclude(**sold)


@extend_schema_view(
    list=extend_schema(summary="Offerings: instance types with their prices", tags=["catalog"]),
    retrieve=extend_schema(summary="An offering", tags=["catalog"]),
)
class OfferingViewSet(mixins.ListModelMixin, mixins.RetrieveModelMixin, PortalViewSet):
    serializer_class = OfferingSerializer
    filterset_class = OfferingFilter
    http_method_names = ["get", "patch", "head", "options"]
    ordering_fields = ["on_demand_price_per_hour", "gpus_per_instance", "instance_type", "region"]
    ordering = ["gpu_model__name", "gpus_per_instance", "on_demand_price_per_hour", "pk"]

    def get_queryset(self) -> QuerySet[Offering]:
        if not getattr(self, "swagger_fake_view", False):
            require_catalog_reader(self.request.user)
        return Offering.objects.select_related("account", "gpu_model")

    @extend_schema(
        summary="Change an offering's prices or whether it is sold (admins)",
        tags=["catalog"],
        request=OfferingTermsSerializer,
        responses=OfferingSerializer,
    )
    def partial_update(self, request: Request, pk: str | None = None) -> Response:
        offering = self.get_object()
        if not access.is_admin(request.user):
            raise NotPermitted(_("Only admins set prices."))
        data = self.validated(OfferingTermsSerializer, request)
        offerings.set_offering_terms(actor=request.user, offering=offering, source="api", **data)
        return self.answer(self.get_object())


def register(router: BaseRouter) -> None:
    router.register("gpu-models", GpuModelViewSet, basename="gpu-model")
    router.register("offerings", OfferingViewSet, basename="offering")


urlpatterns: list = []
