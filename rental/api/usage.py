"""``/api/v1/usage``: usage runs (billing's truth) of the projects the caller can see;
finance and admins see every project's. Read-only. Each run has its rate per GPU-hour
(captured at launch) and its measured GPU-seconds; statements apply billing's rules
(minimum billed time, currency) on top."""

from calendar import monthrange
from datetime import UTC, datetime, timedelta
from typing import Any

from django.core.validators import RegexValidator
from django.db.models import Q
from django.utils.translation import gettext_lazy as _
from django_filters import rest_framework as filters
from drf_spectacular.utils import OpenApiParameter, extend_schema, extend_schema_view
from rest_framework import mixins, serializers

from portal import access
from portal.api.filters import DateTimeFilter, IntegerFilter, PortalFilterSet
from portal.api.views import PortalViewSet
from rental import selectors
from rental.api.serializers_leases import GpuModelRefSerializer, blank_or
from rental.models import Market, TerminationReason, Tier, UsageRecord

TAGS = ["usage"]
MONTH = r"^(2[0-9]{3})-(0[1-9]|1[0-2])$"


class UsageSerializer(serializers.ModelSerializer):
    project = serializers.CharField(source="project.slug", read_only=True)
    lease = serializers.IntegerField(source="instance.reservation_id", read_only=True)
    gpu_model = GpuModelRefSerializer(read_only=True)
    seconds = serializers.SerializerMethodField()
    gpu_seconds = serializers.SerializerMethodField()
    end_reason = blank_or(TerminationReason.choices)

    class Meta:
        model = UsageRecord
        fields = [
            "id",
            "project",
            "lease",
            "instance",
            "gpu_model",
            "tier",
            "market",
            "gpu_count",
            "start",
            "end",
            "seconds",
            "gpu_seconds",
            "rate",
            "currency",
            "exchange_rate",
            "end_reason",
        ]
        read_only_fields = fields
        extra_kwargs = {"rate": {"help_text": "Per GPU-hour, in the run's currency."}}

    def get_seconds(self, record: UsageRecord) -> int:
        """Measured: to the end, or to now while the run is open."""
        return max(int(record.duration.total_seconds()), 0)

    def get_gpu_seconds(self, record: UsageRecord) -> int:
        return self.get_seconds(record) * record.gpu_count


def _month(value: str) -> tuple[datetime, datetime]:
    year, month = int(value[:4]), int(value[5:7])
    start = datetime(year, month, 1, tzinfo=UTC)
    return start, start + timedelta(days=monthrange(year, month)[1])


class UsageFilter(PortalFilterSet):
    project = filters.CharFilter(field_name="project__slug", max_length=50)
    lease = IntegerFilter(field_name="instance__reservation_id")
    market = filters.ChoiceFilter(choices=Market.choices)
    tier = filters.ChoiceFilter(choices=Tier.choices)
    period = filters.CharFilter(
        method="filter_period",
        max_length=7,
        validators=[RegexValidator(MONTH, message=_("Give the period as YYYY-MM, e.g. 2026-04."))],
        help_text="Runs that overlap this month (YYYY-MM, UTC).",
    )
    since = DateTimeFilter(
        method="filter_since", help_text="Runs still going at or after this time."
    )
    until = DateTimeFilter(method="filter_until", help_text="Runs that began before this time.")

    class Meta:
        model = UsageRecord
        fields = ["project", "lease", "gpu_model", "market", "tier"]

    def filter_period(self, queryset: Any, name: str, value: str) -> Any:
        start, end = _month(value)
        return self.filter_until(self.filter_since(queryset, name, start), name, end)

    def filter_since(self, queryset: Any, name: str, value: datetime) -> Any:
        return queryset.filter(Q(end__isnull=True) | Q(end__gt=value))

    def filter_until(self, queryset: Any, name: str, value: datetime) -> Any:
        return queryset.filter(start__lt=value)


@extend_schema_view(
    list=extend_schema(
        summary="Usage runs of the projects you can see",
        tags=TAGS,
        # The filter's own pattern, so the schema allows no month the filter refuses.
        parameters=[
            OpenApiParameter(
                "period",
                str,
                pattern=MONTH,
                description="Runs that overlap this month (YYYY-MM, UTC).",
            )
        ],
    ),
    retrieve=extend_schema(summary="One usage run", tags=TAGS),
)
class UsageViewSet(mixins.ListModelMixin, mixins.RetrieveModelMixin, PortalViewSet):
    serializer_class = UsageSerializer
    filterset_class = UsageFilter
    ordering_fields = ["start", "end", "id"]
    ordering = ["start", "id"]

    def get_queryset(self) -> Any:
        return selectors.usage_records(access.scope(UsageRecord.objects.all(), self.request.user))


def register(router: Any) -> None:
    router.register("usage", UsageViewSet, basename="usage")


urlpatterns: list[Any] = []
