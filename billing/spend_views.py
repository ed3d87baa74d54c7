"""The money a project page and the dashboard show as they go: the project's spend
section (this month's draft, the budget's chart and form), the budget's form sent, a
lease's cost, and the dashboard's spend panel."""

from decimal import Decimal
from typing import Any

from django.contrib import messages
from django.contrib.auth.decorators import login_required
from django.http import HttpRequest, HttpResponse
from django.shortcuts import redirect, render
from django.utils import timezone
from django.utils.translation import gettext as _
from django.views.decorators.http import require_POST

from billing import allocations, budgets, linewords
from billing.forms import BudgetForm
from billing.models import Budget
from billing.selectors import draft_statement, lease_cost
from billing.spend import spent_now
from billing.thresholds import readable_thresholds
from portal import access
from portal.errors import DomainError, form_again, put_on_form
from portal.models import Project
from rental.models import Reservation
from rental.views.projects import project_context


@login_required
@require_POST
def budget_set(request: HttpRequest, slug: str) -> HttpResponse:
    project = access.get_project_or_404(request.user, slug)
    access.require_manager(request.user, project)
    form = BudgetForm(request.POST)
    if form.is_valid():
        try:
            budgets.set_budget(
                project=project,
                actor=request.user,
                monthly_amount=form.cleaned_data["monthly_amount"],
                thresholds=form.threshold_list(),
                cap_policy=form.cleaned_data["cap_policy"] or Budget.CapPolicy.REFUSE_NEW,
            )
        except DomainError as refused:
            put_on_form(form, refused)
            status = refused.page_status
        else:
            messages.success(request, _("Budget saved."))
            return redirect("rental:project", slug=project.slug)
    else:
        status = 400
    # The budget's form is in the project page's spend section, which the page fetches
    # once loaded; drawn again, the section is in the page itself, the form open.
    context = project_context(request, project)
    context.update(_spend_context(request, project, budget_form=form), spend_inline=True)
    return form_again(
        request,
        page="rental/leases/project.html",
        partial="billing/_statement_lines.html",
        context=context,
        status=status,
    )


@login_required
def statement_partial(request: HttpRequest, slug: str) -> HttpResponse:
    project = access.get_project_or_404(request.user, slug)
    return render(request, "billing/_statement_lines.html", _spend_context(request, project))


def _spend_context(
    request: HttpRequest, project: Project, *, budget_form: BudgetForm | None = None
) -> dict[str, Any]:
    """The project page's spend section: this month's draft, the budget's chart, the
    GPU-hours used against each allocation, and the budget's form (``budget_form``: a
    refused one, as it was sent)."""
    now = timezone.now()
    view = draft_statement(project_id=project.pk, now=now, kept=True)
    budget = Budget.objects.filter(project=project).first()
    chart = None
    thresholds_problem = ""
    if budget is not None:
        current = budgets.standing(budget=budget.monthly_amount, actual=view.total, now=now)
        chart = budget_chart(current)
        # Stored by an old version, the admin or an import, some may not read as thresholds:
        # the form shows those that do and says what it left out, so a save replaces them.
        thresholds_problem = readable_thresholds(budget.thresholds)[1]
    return {
        "project": project,
        "draft": view,
        "lines": list(zip(view.lines, linewords.words_for(view.lines), strict=True)),
        "budget": budget,
        "budget_form": budget_form or BudgetForm(budget=budget),
        "thresholds_problem": thresholds_problem,
        "chart": chart,
        "hours": allocations.project_standings(project.pk, period=now, now=now),
        "can_manage": access.can_manage(request.user, project),
    }


def budget_chart(current: budgets.BudgetStanding, *, key: str = "") -> dict[str, Any]:
    """Spend against budget as an SVG bar chart's geometry: actual, forecast and budget on
    one scale (the largest of the three), in whole SVG units. ``key`` makes the element
    ids unique where several charts share a page (the dashboard: ``-<slug>``)."""
    scale = max(current.budget, current.actual, current.forecast or Decimal(0), Decimal(1))
    width = 300

    def x(value: Decimal) -> int:
        return int(value * width / scale)

    return {
        "width": width,
        "actual_x": x(current.actual),
        "forecast_x": x(current.forecast) if current.forecast is not None else None,
        "budget_x": x(current.budget),
        "standing": current,
        "over": current.capped,
        "key": key,
    }


@login_required
def lease_cost_partial(request: HttpRequest, pk: int) -> HttpResponse:
    lease = access.get_visible_or_404(Reservation.objects.all(), request.user, pk=pk)
    seconds, cost = lease_cost(reservation_id=lease.pk)
    return render(
        request,
        "billing/_lease_cost.html",
        {
            "lease": lease,
            "gpu_hours": (Decimal(seconds) / 3600).quantize(Decimal("0.01")),
            "cost": cost,
            "final": lease.status in Reservation.FINAL,
        },
    )


@login_required
def panel_spend(request: HttpRequest) -> HttpResponse:
    projects = list(access.visible_projects(request.user).filter(is_active=True).order_by("name"))
    if not projects:
        return HttpResponse("")
    now = timezone.now()
    spend = spent_now(project_ids=[project.pk for project in projects], now=now)
    rows = sorted(
        ((project, spend.get(project.pk)) for project in projects),
        key=lambda row: (-(row[1] or Decimal(0)), row[0].name),
    )
    total = sum(spend.values(), Decimal("0.00"))
    # Spend against budget with the forecast, for each shown project with a budget: the
    # project page's chart, from one query for the budgets.
    shown = rows[:10]
    amounts = dict(
        Budget.objects.filter(project_id__in=[project.pk for project, _ in shown]).values_list(
            "project_id", "monthly_amount"
        )
    )
    charts = {
        project.pk: budget_chart(
            budgets.standing(budget=amounts[project.pk], actual=amount or Decimal("0.00"), now=now),
            key=f"-{project.slug}",
        )
        for project, amount in shown
        if project.pk in amounts
    }
    return render(
        request,
        "billing/_panel_spend.html",
        {
            "rows": [(project, amount, charts.get(project.pk)) for project, amount in shown],
            "more": max(len(rows) - 10, 0),
            "total": total,
        },
    )
