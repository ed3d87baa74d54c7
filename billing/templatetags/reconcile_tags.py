"""The finance page's word on a month's provider bills: flagged differences that hold the
close, and a link to the reconciliation page (two queries at most)."""

from datetime import date, datetime
from typing import Any

from django import template

from billing.reconcile_gate import hold_reason
from billing.reconcile_models import CostImport

register = template.Library()


@register.inclusion_tag("billing/_reconcile_flags.html")
def reconcile_flags(period: date | datetime) -> dict[str, Any]:
    month = date(period.year, period.month, 1)
    current = list(
        CostImport.objects.filter(period=month)
        .exclude(status=CostImport.Status.SUPERSEDED)
        .values_list("status", "flagged_count")
    )
    review = [count for status, count in current if status == CostImport.Status.REVIEW]
    return {
        "month_label": f"{month:%Y-%m}",
        "imports": len(current),
        "flagged": sum(review),
        "held": hold_reason(month) if review else "",
    }
