"""``/api/v1/leases``: ask for GPUs, follow leases and act on them.

Each endpoint makes the decision the lease page makes (``portal.access``: an outsider's
lease is a 404; an action the page does not offer to this person is the same 404 or
the service's 403) and calls the one service the page calls, with ``source="api"``.
"""

from datetime import timedelta
from typing import Any

from django.db import transaction
from django.http import Http404
from django_filters import rest_framework as filters
from drf_spectacular.utils import (
    OpenApiResponse,
    extend_schema,
    extend_schema_view,
)
from rest_framework import mixins
from rest_framework.decorators import action
from rest_framework.request import Request
from rest_framework.response import Response

from portal import access
from portal.api.filters import DateTimeFromToRangeFilter, FlagFilter, IntegerFilter, PortalFilterSet
from portal.api.views import PortalViewSet
from rental import selectors
from rental.api.serializers_leases import (
    CommentSerializer,
    ExtendSerializer,
    ExtensionDecisionSerializer,
    LeaseDetailSerializer,
    LeaseSerializer,
    NewLeaseSerializer,
    RejectSerializer,
    RescheduleSerializer,
)
from rental.api.watches import WatchSerializer
from rental.fleet import stop
from rental.loans import admission, ending, extension, lease_request, pools, reservations
from rental.models import Market, Priority, Reservation, Tier

TAGS = ["leases"]


class LeaseFilter(PortalFilterSet):
    project = filters.CharFilter(field_name="project__slug", max_length=50)
    status = filters.MultipleChoiceFilter(choices=Reservation.Status.choices)
    priority = filters.ChoiceFilter(choices=Priority.choices)
    market = filters.ChoiceFilter(choices=Market.choices)
    tier = filters.ChoiceFilter(choices=Tier.choices)
    requester = IntegerFilter(field_name="requester_id")
    mine = FlagFilter(method="filter_mine", help_text="true: only the leases you asked for.")
    start = DateTimeFromToRangeFilter()
    end = DateTimeFromToRangeFilter()

    class Meta:
        model = Reservation
        fields = ["project", "status", "gpu_model", "priority", "market", "tier", "requester"]

    def filter_mine(self, queryset: Any, name: str, value: bool) -> Any:
        if value:
            return queryset.filter(requester=self.request.user)
        return queryset


def _lease_answer(description: str, serializer: Any = LeaseDetailSerializer) -> dict:
    return {200: OpenApiResponse(serializer, description=description)}


@extend_schema_view(
    list=extend_schema(summary="Leases of the projects you can see", tags=TAGS),
    retrieve=extend_schema(
        summary="A lease with its wait, instances and (for members) connection details",
        tags=TAGS,
    ),
    create=extend_schema(
        summary="Ask for GPUs now, or book them from a start",
        description=(
            "The request form's fields and checks. Answers 201 with the lease whatever "
            "the outcome (pending_approval, queued, scheduled, provisioning); a refusal "
            "is a 409 (or 400 for a field) with its code and figures, and writes nothing."
        ),
        request=NewLeaseSerializer,
        responses={201: LeaseDetailSerializer},
        tags=TAGS,
    ),
)
class LeaseViewSet(mixins.ListModelMixin, mixins.RetrieveModelMixin, PortalViewSet):
    serializer_class = LeaseDetailSerializer
    filterset_class = LeaseFilter
    ordering_fields = ["start", "end", "submitted_at", "id"]
    ordering = ["-submitted_at", "-id"]

    def get_queryset(self) -> Any:
        leases = selectors.leases(access.scope(Reservation.objects.all(), self.request.user))
        if self.action == "list":
            return leases
        return leases.prefetch_related("instances__offering", "ssh_keys")

    def get_serializer_class(self) -> Any:
        return LeaseSerializer if self.action == "list" else LeaseDetailSerializer

    def _fresh(self, lease: Reservation, *, status: int = 200) -> Response:
        return self.answer(self.get_queryset().get(pk=lease.pk), status=status)

    def _lease_for_member(self) -> Reservation:
        """As the page's end, extend and watch buttons: the requester (still a member),
        the project's managers and admins; anybody else gets a 404."""
        lease = self.get_object()
        if not access.can_act_on_lease(self.request.user, lease):  # as may_end_lease
            raise Http404
        return lease

    def _lease_for_manager(self) -> Reservation:
        lease = self.get_object()
        access.require_manager(self.request.user, lease.project)
        return lease

    # One transaction for the lease and the answer read back from it: when the database
    # is cut before the answer is read (a restart), the lease is rolled back with it, so a
    # 503 means nothing was asked for, and asking again never makes two.
    @transaction.atomic
    def create(self, request: Request, *args: Any, **kwargs: Any) -> Response:
        data = self.validated(NewLeaseSerializer, request)
        lease = lease_request.submit_lease(
            actor=request.user,
            ssh_keys=data.get("ssh_keys"),
            data_volume=data["data_volume"],
            project=data["project"],
            gpu_model=data["gpu_model"],
            gpu_count=data["gpu_count"],
            duration_hours=data["duration_hours"],
            priority=data["priority"],
            market=data["market"],
            offering=data["offering"],
            image=data["image"],
            purpose=data["purpose"],
            requeue_on_preemption=data["requeue_on_preemption"],
            allow_other_instance_types=data["allow_other_instance_types"],
            start=data["start"],
            source="api",
        )
        return self._fresh(lease, status=201)

    # --- A manager's decision ----------------------------------------------------------

    @extend_schema(
        summary="Approve a request waiting for a manager (managers of the project, admins)",
        request=CommentSerializer,
        responses=_lease_answer("The lease, admitted, queued or scheduled."),
        tags=TAGS,
    )
    @action(detail=True, methods=["post"])
    def approve(self, request: Request, pk: str | None = None) -> Response:
        lease = self._lease_for_manager()
        data = self.validated(CommentSerializer, request)
        lease = admission.approve_reservation(
            actor=request.user, reservation=lease, comment=data["comment"], source="api"
        )
        return self._fresh(lease)

    @extend_schema(
        summary="Reject a request waiting for a manager; the comment says why",
        request=RejectSerializer,
        responses=_lease_answer("The lease, rejected."),
        tags=TAGS,
    )
    @action(detail=True, methods=["post"])
    def reject(self, request: Request, pk: str | None = None) -> Response:
        lease = self._lease_for_manager()
        data = self.validated(RejectSerializer, request)
        lease = admission.reject_reservation(
            actor=request.user, reservation=lease, comment=data["comment"], source="api"
        )
        return self._fresh(lease)

    # --- The requester's (and managers') actions ----------------------------------------

    @extend_schema(
        summary="Cancel a request that has not started (pending, queued or scheduled)",
        request=None,
        responses=_lease_answer("The lease, cancelled."),
        tags=TAGS,
    )
    @action(detail=True, methods=["post"])
    def cancel(self, request: Request, pk: str | None = None) -> Response:
        lease = ending.cancel_reservation(
            actor=request.user, reservation=self._lease_for_member(), source="api"
        )
        return self._fresh(lease)

    @extend_schema(
        summary="End a lease (a waiting one is cancelled), as the page's End button",
        request=None,
        responses=_lease_answer("The lease, ending (or cancelled)."),
        tags=TAGS,
    )
    @action(detail=True, methods=["post"])
    def end(self, request: Request, pk: str | None = None) -> Response:
        lease = ending.end_reservation(
            actor=request.user, reservation=self._lease_for_member(), source="api"
        )
        return self._fresh(lease)

    @extend_schema(
        summary="Extend by some hours; beyond the auto-approve limit a manager decides",
        description="extension_until in the answer: the new end waits for a manager.",
        request=ExtendSerializer,
        responses=_lease_answer("The lease, with its new end or its extension waiting."),
        tags=TAGS,
    )
    @action(detail=True, methods=["post"])
    def extend(self, request: Request, pk: str | None = None) -> Response:
        lease = self._lease_for_member()
        data = self.validated(ExtendSerializer, request)
        lease = extension.extend_reservation(
            actor=request.user, reservation=lease, hours=data["hours"], source="api"
        )
        return self._fresh(lease)

    @extend_schema(
        summary="Move or resize a booking that has not started (R2, R3)",
        description="The new window is admitted by R2 without counting the booking's own "
        "window; a refusal (409 reservation_conflict with its figures) leaves it unchanged. "
        "An empty body changes nothing and answers the booking as it is.",
        request=RescheduleSerializer,
        responses=_lease_answer("The booking, moved or resized."),
        tags=TAGS,
    )
    @action(detail=True, methods=["post"])
    def reschedule(self, request: Request, pk: str | None = None) -> Response:
        lease = self._lease_for_member()
        data = self.validated(RescheduleSerializer, request)
        if not data:  # nothing to change: the booking as it is
            return self._fresh(lease)
        start = data.get("start")
        end = None
        if "duration_hours" in data:
            seconds = int(data["duration_hours"] * 3600)
            end = (start or lease.start) + timedelta(seconds=seconds)
        lease = reservations.reschedule_reservation(
            actor=request.user,
            reservation=lease,
            start=start,
            end=end,
            gpu_count=data.get("gpu_count"),
            source="api",
        )
        return self._fresh(lease)

    @extend_schema(
        summary="Approve or refuse a waiting extension (managers of the project, admins)",
        request=ExtensionDecisionSerializer,
        responses=_lease_answer("The lease, with its end decided."),
        tags=TAGS,
    )
    @action(detail=True, methods=["post"], url_path="decide-extension")
    def decide_extension(self, request: Request, pk: str | None = None) -> Response:
        lease = self._lease_for_manager()
        data = self.validated(ExtensionDecisionSerializer, request)
        lease = extension.decide_extension(
            actor=request.user,
            reservation=lease,
            approve=data["decision"] == "approve",
            comment=data["comment"],
            source="api",
        )
        return self._fresh(lease)

    @extend_schema(
        summary="Stop an active on-demand lease: GPU billing stops, the disk is kept",
        request=None,
        responses=_lease_answer("The lease, stopped."),
        tags=TAGS,
    )
    @action(detail=True, methods=["post"])
    def stop(self, request: Request, pk: str | None = None) -> Response:
        lease = stop.stop_lease(actor=request.user, reservation=self.get_object(), source="api")
        return self._fresh(lease)

    @extend_schema(
        summary="Resume a stopped lease on its kept disk (admitted again; 409 if no room)",
        request=None,
        responses=_lease_answer("The lease, provisioning."),
        tags=TAGS,
    )
    @action(detail=True, methods=["post"])
    def resume(self, request: Request, pk: str | None = None) -> Response:
        lease = stop.resume_lease(actor=request.user, reservation=self.get_object(), source="api")
        return self._fresh(lease)

    @extend_schema(
        summary="End a stopped lease: its instances and their disks are deleted",
        request=None,
        responses=_lease_answer("The lease, ending."),
        tags=TAGS,
    )
    @action(detail=True, methods=["post"], url_path="end-stopped")
    def end_stopped(self, request: Request, pk: str | None = None) -> Response:
        lease = stop.end_stopped_lease(
            actor=request.user, reservation=self.get_object(), source="api"
        )
        return self._fresh(lease)

    @extend_schema(
        summary="Be told once when the lease's GPU count of its model is free in the pool",
        request=None,
        responses={201: WatchSerializer},
        tags=TAGS,
    )
    @action(detail=True, methods=["post"])
    def watch(self, request: Request, pk: str | None = None) -> Response:
        lease = self._lease_for_member()
        watch = pools.watch_availability(
            actor=request.user, gpu_model=lease.gpu_model, count=lease.gpu_count
        )
        return Response(WatchSerializer(watch).data, status=201)


def register(router: Any) -> None:
    router.register("leases", LeaseViewSet, basename="lease")


urlpatterns: list[Any] = []
