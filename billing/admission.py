"""Billing's admission checks, registered in ``PORTAL_ADMISSION_CHECKS``: the budget cap
(BU3) and the GPU-hour allocations' hard stop (GA3).

Rental calls every registered check before admitting a lease, so rental never imports
billing. A check returns None to allow, or ``(reason_code, message[, figures])`` to refuse. The cap
reads the month-to-date spend kept by ``billing.spend`` (one row), not the full
computation, so a submission does not wait on the month's usage. The hard stop reads
nothing for a guaranteed or booked request, and one query for any other: the project's
hard-stop allocation of the model (through its unique index) with, when there is one,
the model's usage this month in the same statement (its rollup rows and its runs not
rolled up: ``billing.allocations.measured``).
"""

from datetime import datetime
from typing import Any

from django.utils.translation import gettext_noop

from billing import allocations, spend
from billing.models import Budget, GpuHourAllocation
from portal.models import Project
from portal.phrases import Phrase

CAPPED_TIERS = frozenset({"burst", "spot"})


def budget_cap(
    *,
    project: Project | int,
    gpu_model: Any,
    gpu_count: int,
    tier: str,
    market: str,
    starts_at: datetime,
    ends_at: datetime,
    is_reservation: bool,
    now: datetime,
    **_extra: Any,
) -> tuple[str, Phrase, dict[str, Any]] | None:
    """At 100 % actual of the month's budget, refuse new burst and spot leases and new
    reservations; guaranteed leases are never refused by the budget (BU3)."""
    if tier not in CAPPED_TIERS and not is_reservation:
        return None
    project_id = project if isinstance(project, int) else project.pk
    budget = (
        Budget.objects.filter(project_id=project_id)
        .values_list("monthly_amount", flat=True)
        .first()
    )
    if budget is None:
        return None
    actual = spend.spend_now(project_id=project_id, now=now)
    if actual < budget:
        return None
    return (
        "budget_cap",
        Phrase(
            gettext_noop(
                "The project has spent %(actual)s of its %(budget)s budget this month, so new "
                "burst and spot leases and new reservations are refused until next month or "
                "until its manager raises the budget. Guaranteed leases still run."
            ),
            actual=actual,
            budget=budget,
        ),
        {"spent": actual, "budget": budget},
    )


def gpu_hour_cap(
    *,
    project: Project | int,
    gpu_model: Any,
    tier: str,
    is_reservation: bool,
    now: datetime,
    **_extra: Any,
) -> tuple[str, Phrase, dict[str, Any]] | None:
    """GA3: once the month's GPU-hours of a hard-stop allocation are used, refuse new
    burst and spot leases of that GPU model; guaranteed leases and bookings are never
    refused by an allocation."""
    if tier not in CAPPED_TIERS or is_reservation:
        return None
    project_id = project if isinstance(project, int) else project.pk
    model_id = gpu_model if isinstance(gpu_model, int) else gpu_model.pk
    hard_stops = GpuHourAllocation.objects.filter(
        project_id=project_id, gpu_model_id=model_id, hard_stop=True
    )
    # Most projects have no hard-stop allocation: a plain look first (one statement, as the
    # measuring one was), so their requests do not pay for building the measuring query,
    # which was two thirds of a submission's CPU (bench/admission.py, issue 19).
    if not hard_stops.exists():
        return None
    found = allocations.measured(hard_stops.select_related("gpu_model"), period=now, now=now)
    if not found or not found[0].used_up:
        return None
    current = found[0]
    allocation = current.allocation
    return (
        "gpu_hour_cap",
        Phrase(
            gettext_noop(
                "The project has used %(used)s of its %(allocated)s GPU-hours of %(model)s "
                "this month (its GPU-hour allocation stops there), so new burst and spot "
                "leases of %(model)s are refused until next month or until its manager "
                "raises the allocation. Guaranteed leases still run."
            ),
            used=current.used_hours,
            allocated=current.allocated_hours,
            model=allocation.gpu_model.name,
        ),
        {"used_gpu_hours": current.used_hours, "allocated_gpu_hours": current.allocated_hours},
    )
