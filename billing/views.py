"""Web pages of the money side: a project's draft statement and the spend panel."""

import re
from datetime import UTC, date, datetime
from decimal import Decimal
from typing import Any

from django.contrib.auth.decorators import login_required
from django.http import HttpRequest, HttpResponse
from django.shortcuts import render
from django.utils import timezone
from django.utils.translation import gettext as _

from billing.selectors import draft_statement, month_to_date, period_end, period_start
from portal import access

PERIOD = re.compile(r"^(\d{4})-(\d{2})$")


def parse_period(value: str | None) -> date | None:
    """``YYYY-MM`` → the first day of that month; empty → None (the current month).
    Raises ValueError with a message a person can act on."""
    if not value:
        return None
    match = PERIOD.match(value.strip())
    if match:
        year, month = int(match[1]), int(match[2])
        if 2000 <= year <= 2999 and 1 <= month <= 12:
            return date(year, month, 1)
    raise ValueError(
        _("“%(value)s” is not a month. Give the period as YYYY-MM, e.g. %(example)s.")
        % {"value": value[:20], "example": timezone.now().strftime("%Y-%m")}
    )


def _previous_month(start: datetime) -> datetime:
    return datetime(start.year - (start.month == 1), (start.month - 2) % 12 + 1, 1, tzinfo=UTC)


@login_required
def statement(request: HttpRequest, slug: str) -> HttpResponse:
    project = access.get_project_or_404(request.user, slug)
    error = ""
    try:
        period = parse_period(request.GET.get("period"))
    except ValueError as invalid:
        error, period = str(invalid), None
    draft = draft_statement(project_id=project.pk, period=period)
    current = period_start(timezone.now())
    following = period_end(draft.period)
    context: dict[str, Any] = {
        "project": project,
        "draft": draft,
        "error": error,
        "is_current": draft.period == current,
        "previous": _previous_month(draft.period).strftime("%Y-%m"),
        "next": following.strftime("%Y-%m") if following <= current else "",
    }
    return render(request, "billing/statement.html", context, status=400 if error else 200)


@login_required
def statement_partial(request: HttpRequest, slug: str) -> HttpResponse:
    project = access.get_project_or_404(request.user, slug)
    draft = draft_statement(project_id=project.pk)
    return render(request, "billing/_statement_lines.html", {"project": project, "draft": draft})


@login_required
def panel_spend(request: HttpRequest) -> HttpResponse:
    projects = list(access.visible_projects(request.user).filter(is_active=True).order_by("name"))
    if not projects:
        return HttpResponse("")
    spend = month_to_date(project_ids=[project.pk for project in projects])
    rows = sorted(
        ((project, spend.get(project.pk)) for project in projects),
        key=lambda row: (-(row[1] or Decimal(0)), row[0].name),
    )
    total = sum(spend.values(), Decimal("0.00"))
    return render(
        request,
        "billing/_panel_spend.html",
        {"rows": rows[:10], "more": max(len(rows) - 10, 0), "total": total},
    )
