"""``/api/v1/pools``: each GPU model's pool at a glance, its week of bookings, and (admins)
its settings (C, K, F, cost sharing, fair share) and degraded mark, as on the pool page.

What the pools pages show, from the same selectors: C, K, Σ G, GPUs running by tier,
held for bookings starting, queued demand, and ``degraded`` when C is below Σ G (Q1).
Aggregates only: no project's leases appear. Who may not see the pools gets 404.
"""

import re
from datetime import UTC, date, datetime, time, timedelta
from decimal import Decimal
from typing import Any

from django.db.models import QuerySet
from django.utils import timezone
from django.utils.translation import gettext_lazy as _
from drf_spectacular.utils import extend_schema, extend_schema_field, extend_schema_view
from rest_framework import mixins, serializers
from rest_framework.decorators import action
from rest_framework.exceptions import ValidationError
from rest_framework.request import Request
from rest_framework.response import Response
from rest_framework.routers import BaseRouter

from portal import access
from portal.api.views import PortalViewSet
from portal.errors import NotPermitted
from rental import selectors
from rental.api.catalog import require_catalog_reader
from rental.loans import pool_week, pools
from rental.models import Pool
from rental.models.capacity import DEGRADED_REASON_LENGTH
from rental.selectors import PoolOverview

MAX_GPUS = 1_000_000
LAST_WEEK = date.max - timedelta(days=8)  # the last week whose hours a datetime holds


class RunningByTierSerializer(serializers.Serializer):
    guaranteed = serializers.IntegerField()
    burst = serializers.IntegerField()
    reserved = serializers.IntegerField()
    spot = serializers.IntegerField()


class PoolSerializer(serializers.Serializer):
    """A ``PoolOverview``: the pool's figures in GPUs."""

    id = serializers.IntegerField(source="pool.pk")
    gpu_model = serializers.IntegerField(source="pool.gpu_model_id")
    gpu_model_name = serializers.CharField(source="pool.gpu_model.name")
    capacity = serializers.IntegerField(source="pool.capacity", help_text="C")
    committed_gpus = serializers.IntegerField(source="pool.committed_gpus", help_text="K")
    guaranteed_total = serializers.IntegerField(help_text="Σ G over the projects' quotas")
    running = serializers.IntegerField(help_text="GPUs held by running leases, all tiers")
    running_by_tier = RunningByTierSerializer()
    under_notice = serializers.IntegerField()
    held_for_reservations = serializers.IntegerField()
    scheduled = serializers.IntegerField(help_text="GPUs booked ahead, not started yet")
    queued = serializers.IntegerField(help_text="GPUs asked by queued leases")
    committed_monthly_cost = serializers.DecimalField(
        source="pool.committed_monthly_cost", max_digits=14, decimal_places=2, help_text="F"
    )
    apportionment = serializers.ChoiceField(
        source="pool.apportionment", choices=Pool.Apportionment.choices
    )
    residual = serializers.ChoiceField(source="pool.residual", choices=Pool.Residual.choices)
    state = serializers.SerializerMethodField(
        help_text="degraded while C is below Σ G (Q1) or an admin marks it"
    )
    degraded_reason = serializers.CharField(
        source="pool.degraded_reason", help_text="Why an admin marked it degraded; empty if not"
    )
    fair_share = serializers.BooleanField(
        source="pool.fair_share",
        help_text="Waiting burst and spot leases of one priority go by their projects' "
        "decayed usage per share (Q5)",
    )
    fair_share_half_life_hours = serializers.DecimalField(
        source="pool.fair_share_half_life_hours",
        max_digits=8,
        decimal_places=2,
        help_text="Usage counts half after this many hours (Q5)",
    )
    placement_order = serializers.ChoiceField(
        source="pool.placement_order",
        choices=Pool.PlacementOrder.choices,
        help_text="Where a lease is placed first when several provider accounts sell its GPUs",
    )
    placement_accounts = serializers.ListField(
        source="pool.placement_accounts",
        child=serializers.IntegerField(),
        help_text="Provider account ids tried before the others, in this order",
    )

    @extend_schema_field(serializers.ChoiceField(choices=Pool.State.choices))
    def get_state(self, overview: PoolOverview) -> str:
        return Pool.State.DEGRADED if overview.degraded else Pool.State.OK


class WeekStepSerializer(serializers.Serializer):
    start = serializers.DateTimeField()
    guaranteed = serializers.IntegerField(help_text="The guaranteed floor Σ G")
    reserved = serializers.IntegerField(help_text="GPUs booked beyond the guarantees")
    free = serializers.IntegerField(help_text="C − Σ G − reserved, at least 0")
    over = serializers.BooleanField(help_text="Σ G + reserved exceeds C")


class WeekSerializer(serializers.Serializer):
    pool = serializers.IntegerField()
    capacity = serializers.IntegerField()
    since = serializers.DateTimeField()
    steps = WeekStepSerializer(many=True, help_text="One step per hour, 168 in all")


class WeekQuerySerializer(serializers.Serializer):
    since = serializers.DateField(
        required=False,
        help_text="The week's first day (00:00 UTC); default: this week's Monday. A day in "
        "the last week of year 9999 gives that last week.",
    )

    def validate_since(self, value: date) -> datetime:
        return datetime.combine(min(value, LAST_WEEK), time(0), tzinfo=UTC)


class CapacitySerializer(serializers.Serializer):
    capacity = serializers.IntegerField(min_value=0, max_value=MAX_GPUS)


class PoolChangeSerializer(serializers.Serializer):
    """An admin's change of the pool's settings: only the fields sent change (PATCH)."""

    capacity = serializers.IntegerField(
        min_value=0, max_value=MAX_GPUS, required=False, help_text="C"
    )
    committed_gpus = serializers.IntegerField(
        min_value=0,
        max_value=MAX_GPUS,
        required=False,
        help_text="K: at most C; 0, or at least Σ G (Q1)",
    )
    committed_monthly_cost = serializers.DecimalField(
        max_digits=14, decimal_places=2, min_value=0, required=False, help_text="F"
    )
    apportionment = serializers.ChoiceField(choices=Pool.Apportionment.choices, required=False)
    residual = serializers.ChoiceField(choices=Pool.Residual.choices, required=False)
    fair_share = serializers.BooleanField(
        required=False, help_text="Order waiting burst and spot leases by decayed usage (Q5)"
    )
    fair_share_half_life_hours = serializers.DecimalField(
        max_digits=6,
        decimal_places=2,
        min_value=Decimal("0.01"),
        max_value=pools.MAX_HALF_LIFE_HOURS,
        required=False,
        help_text="More than 0, at most 9,999.99 (about 13 months); 168 is 7 days",
    )
    placement_order = serializers.ChoiceField(
        choices=Pool.PlacementOrder.choices,
        required=False,
        help_text="own_first: own servers, then the cheapest cloud; cheapest: by price alone",
    )
    placement_accounts = serializers.ListField(
        child=serializers.IntegerField(min_value=1),
        required=False,
        max_length=50,
        help_text="Provider account ids tried before the others, in this order",
    )


class DegradedSerializer(serializers.Serializer):
    degraded = serializers.BooleanField(help_text="true: mark degraded; false: clear the mark")
    reason = serializers.CharField(
        required=False,
        allow_blank=True,
        max_length=DEGRADED_REASON_LENGTH,
        help_text="Why, required to mark",
    )


@extend_schema_view(
    list=extend_schema(summary="Pools at a glance", tags=["pools"]),
    retrieve=extend_schema(summary="A pool at a glance", tags=["pools"]),
)
class PoolViewSet(mixins.ListModelMixin, mixins.RetrieveModelMixin, PortalViewSet):
    serializer_class = PoolSerializer
    http_method_names = ["get", "post", "patch", "head", "options"]
    ordering_fields = ["gpu_model__name", "capacity"]
    ordering = ["gpu_model__name"]
    filterset_fields = ["state", "gpu_model"]

    def get_queryset(self) -> QuerySet[Pool]:
        if not getattr(self, "swagger_fake_view", False):
            require_catalog_reader(self.request.user)
        return Pool.objects.select_related("gpu_model")

    def list(self, request: Request, *args: Any, **kwargs: Any) -> Response:
        page = self.paginate_queryset(self.filter_queryset(self.get_queryset()))
        overviews = selectors.pool_overviews(page)
        return self.get_paginated_response(self.get_serializer(overviews, many=True).data)

    def retrieve(self, request: Request, *args: Any, **kwargs: Any) -> Response:
        return self.answer(selectors.pool_overview(self.get_object()))

    @extend_schema(
        summary="The pool's week: booked capacity against C, hour by hour",
        tags=["pools"],
        parameters=[WeekQuerySerializer],
        responses=WeekSerializer,
    )
    @action(detail=True, methods=["get"])
    def week(self, request: Request, pk: str | None = None) -> Response:
        pool = self.get_object()
        query = WeekQuerySerializer(data=request.query_params)
        since = request.query_params.get("since")
        # YYYY-MM-DD as the schema says (DRF would also take 2026-4-7 and skip an empty one).
        if since is not None and not re.fullmatch(r"[0-9]{4}-[0-9]{2}-[0-9]{2}", since):
            raise ValidationError({"since": [_("Give a date as YYYY-MM-DD, or leave it out.")]})
        query.is_valid(raise_exception=True)
        since = query.validated_data.get("since")
        if since is None:
            today = timezone.now().date()
            monday = today - timedelta(days=today.weekday())
            since = datetime.combine(monday, time(0), tzinfo=UTC)
        steps = pool_week.week(pool, since=since)
        return Response(
            WeekSerializer(
                {"pool": pool.pk, "capacity": pool.capacity, "since": since, "steps": steps}
            ).data
        )

    @extend_schema(
        summary="Set the pool's capacity C (admins)",
        tags=["pools"],
        request=CapacitySerializer,
        responses=PoolSerializer,
    )
    @action(detail=True, methods=["post"])
    def capacity(self, request: Request, pk: str | None = None) -> Response:
        pool = self.get_object()
        _require_admin(request.user)
        data = self.validated(CapacitySerializer, request)
        pools.set_capacity(
            actor=request.user, gpu_model=pool.gpu_model_id, capacity=data["capacity"], source="api"
        )
        return self.answer(selectors.pool_overview(self.get_object()))

    @extend_schema(
        summary="Change the pool's capacity, committed GPUs, monthly cost, cost sharing or "
        "fair share (admins; rules Q1, Q5)",
        tags=["pools"],
        request=PoolChangeSerializer,
        responses=PoolSerializer,
    )
    def partial_update(self, request: Request, pk: str | None = None) -> Response:
        pool = self.get_object()
        _require_admin(request.user)
        data = self.validated(PoolChangeSerializer, request)
        pools.configure_pool(actor=request.user, gpu_model=pool.gpu_model_id, source="api", **data)
        return self.answer(selectors.pool_overview(self.get_object()))

    @extend_schema(
        summary="Mark the pool degraded with a reason, or clear the mark (admins)",
        tags=["pools"],
        request=DegradedSerializer,
        responses=PoolSerializer,
    )
    @action(detail=True, methods=["post"])
    def degraded(self, request: Request, pk: str | None = None) -> Response:
        pool = self.get_object()
        _require_admin(request.user)
        data = self.validated(DegradedSerializer, request)
        if data["degraded"]:
            pools.mark_degraded(
                actor=request.user,
                gpu_model=pool.gpu_model_id,
                reason=data.get("reason", ""),
                source="api",
            )
        else:
            pools.clear_degraded(actor=request.user, gpu_model=pool.gpu_model_id, source="api")
        return self.answer(selectors.pool_overview(self.get_object()))


def _require_admin(user: Any) -> None:
    if not access.is_admin(user):
        raise NotPermitted(_("Only admins configure pools."))


def register(router: BaseRouter) -> None:
    router.register("pools", PoolViewSet, basename="pool")


urlpatterns: list = []
