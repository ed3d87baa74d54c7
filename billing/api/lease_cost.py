"""``GET /api/v1/leases/{id}/cost``: a lease's cost so far (its final cost once it has
ended), as the lease page's cost card shows it. Billing's, because rental never imports
billing; whoever sees the lease sees its cost."""

from decimal import Decimal
from typing import Any

from django.urls import path
from drf_spectacular.utils import extend_schema
from rest_framework import serializers
from rest_framework.decorators import api_view
from rest_framework.request import Request
from rest_framework.response import Response

from billing.selectors import lease_cost
from portal import access
from rental.models import Reservation
from rental.models.currency import billing_currency

HOUR = Decimal(3600)


class LeaseCostSerializer(serializers.Serializer):
    lease = serializers.IntegerField()
    gpu_seconds = serializers.IntegerField(help_text="Billed GPU-seconds so far.")
    # No max_digits: computed figures, wider than a column when prices and counts are
    # stored at their columns' edge.
    gpu_hours = serializers.DecimalField(max_digits=None, decimal_places=2)
    cost = serializers.DecimalField(
        max_digits=None, decimal_places=2, help_text="In the billing currency."
    )
    currency = serializers.CharField()
    final = serializers.BooleanField(help_text="The lease has ended: this is its final cost.")


@extend_schema(
    operation_id="leases_cost_retrieve",
    summary="A lease's cost so far, at the rates captured at launch",
    responses=LeaseCostSerializer,
    tags=["leases"],
)
@api_view(["GET"])
def lease_cost_view(request: Request, pk: int) -> Response:
    lease = access.get_visible_or_404(Reservation.objects.all(), request.user, pk=pk)
    seconds, cost = lease_cost(reservation_id=lease.pk)
    return Response(
        LeaseCostSerializer(
            {
                "lease": lease.pk,
                "gpu_seconds": seconds,
                "gpu_hours": (Decimal(seconds) / HOUR).quantize(Decimal("0.01")),
                "cost": cost,
                "currency": billing_currency(),
                "final": lease.status in Reservation.FINAL,
            }
        ).data
    )


def register(router: Any) -> None:
    """No viewsets: one plain view."""


urlpatterns = [path("leases/<int:pk>/cost", lease_cost_view, name="lease-cost")]
