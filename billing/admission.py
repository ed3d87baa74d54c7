"""Billing's admission check (BU3), registered in ``PORTAL_ADMISSION_CHECKS``.

Rental calls every registered check before admitting a lease, so rental never imports
billing. A check returns None to allow, or ``(reason_code, message[, figures])`` to refuse. The cap
reads the month-to-date spend kept by ``billing.spend`` (one row), not the full
computation, so a submission does not wait on the month's usage.
"""

from datetime import datetime
from typing import Any

from django.utils.translation import gettext_noop

from billing import spend
from billing.models import Budget
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
