"""Web pages of the money side: statements with drill-down, sign-off and disputes, the
finance page, exports and reports (the spend shown as it goes is in spend_views)."""

from dataclasses import dataclass
from datetime import UTC, datetime
from decimal import Decimal
from typing import Any

from django.conf import settings
from django.contrib import messages
from django.contrib.auth.decorators import login_required
from django.core.cache import cache
from django.core.paginator import Paginator
from django.db.models import Count
from django.http import Http404, HttpRequest, HttpResponse
from django.shortcuts import get_object_or_404, redirect, render
from django.urls import reverse
from django.utils import timezone, translation
from django.utils.translation import gettext as _
from django.views.decorators.http import require_POST

from billing import allocations, drafts, explain, exports, linewords, services
from billing import reports as billing_reports
from billing.forms import AnswerForm, DisputeForm
from billing.models import LineDispute, Statement, StatementLine
from billing.periods import parse_period
from billing.requesters import spend_per_requester
from billing.selectors import (
    StatementView,
    draft_statement,
    gpu_model_names,
    manual_lines,
    period_end,
    period_start,
)
from portal import access
from portal.errors import DomainError, form_again, put_on_form
from portal.models import Project

# Statements the finance page draws at a time.
FINANCE_ROWS_PER_PAGE = 25


def _previous_month(start: datetime) -> datetime:
    return datetime(start.year - (start.month == 1), (start.month - 2) % 12 + 1, 1, tzinfo=UTC)


def _export_response(
    request: HttpRequest, items: list, *, title: str, period: datetime, filename: str
) -> HttpResponse | None:
    wanted = request.GET.get("format", "")
    if wanted not in ("csv", "pdf"):
        return None
    names = gpu_model_names([line for item in items for line in item.view.lines])
    if wanted == "csv":
        response = HttpResponse(
            exports.to_csv(items, names=names), content_type="text/csv; charset=utf-8"
        )
    else:
        response = HttpResponse(
            exports.to_pdf(
                items, names=names, title=title, period=period, generated_at=timezone.now()
            ),
            content_type="application/pdf",
        )
    response["Content-Disposition"] = f'attachment; filename="{filename}.{wanted}"'
    return response


@login_required
def statement(request: HttpRequest, slug: str) -> HttpResponse:
    project = access.get_project_or_404(request.user, slug)
    error = ""
    try:
        period = parse_period(request.GET.get("period"))
    except ValueError as invalid:
        error, period = str(invalid), None
    now = timezone.now()
    view = draft_statement(project_id=project.pk, period=period, now=now, kept=True)
    with translation.override(exports.LANGUAGE):
        exported = _export_response(
            request,
            [exports.ExportStatement(project.slug, project.name, view)],
            title=_("Statement of %(project)s") % {"project": project.name},
            period=view.period,
            filename=f"statement-{project.slug}-{view.period:%Y-%m}",
        )
    if exported is not None and not error:
        return exported
    context = _statement_context(request, project, view, now=now)
    context["error"] = error
    return render(request, "billing/statement.html", context, status=400 if error else 200)


# A closed month's spend per requester never changes (its runs are closed and billed);
# kept a day, so that a statement page does not re-read the month's runs on each view.
CLOSED_REQUESTERS_SECONDS = 24 * 3600


def _requesters(project: Project, view: StatementView, *, now: datetime) -> list:
    if view.requesters is not None:
        return view.requesters
    if view.is_draft:
        return spend_per_requester(project_id=project.pk, period=view.period, now=now)
    statement = view.statement
    key = f"billing:requesters:{statement.pk}:{statement.closed_at:%Y%m%d%H%M%S%f}"
    found = cache.get(key)
    if found is None:
        found = spend_per_requester(project_id=project.pk, period=view.period, now=now)
        cache.set(key, found, timeout=CLOSED_REQUESTERS_SECONDS)
    return found


def dispute_form(index: int, data: Any = None) -> DisputeForm:
    """The dispute of the statement's line at ``index`` (one form per line on the page)."""
    return DisputeForm(data, auto_id=f"dispute-%s-{index}")


def answer_form(dispute_pk: int, data: Any = None) -> AnswerForm:
    """An admin's answer to one dispute (one form per open dispute on the page)."""
    return AnswerForm(data, auto_id=f"answer-%s-{dispute_pk}")


def _statement_context(
    request: HttpRequest,
    project: Project,
    view: StatementView,
    *,
    now: datetime,
    dispute_forms: dict[int, DisputeForm] | None = None,
    answer_forms: dict[int, AnswerForm] | None = None,
) -> dict[str, Any]:
    """What the statement page shows; a refused dispute (by its line's pk) or answer (by
    the dispute's pk) is passed as it was sent, and drawn with its errors."""
    dispute_forms = dispute_forms or {}
    answer_forms = answer_forms or {}
    current = period_start(now)
    following = period_end(view.period)
    disputes: dict[int, list] = {}
    if view.statement is not None:
        for dispute in LineDispute.objects.filter(line__statement=view.statement).select_related(
            "raised_by", "answered_by", "correction"
        ):
            form = answer_forms.get(dispute.pk) or answer_form(dispute.pk)
            disputes.setdefault(dispute.line_id, []).append((dispute, form))
    names = gpu_model_names(view.lines)
    rows = []
    for index, (line, words) in enumerate(
        zip(view.lines, linewords.words_for(view.lines, names=names), strict=True)
    ):
        pk = getattr(line, "pk", None)
        rows.append(
            {
                "index": index,
                "line": line,
                "words": words,
                "model": names.get(getattr(line, "gpu_model_id", None) or 0, ""),
                "disputes": disputes.get(pk, []) if view.statement else [],
                "dispute_form": dispute_forms.get(pk) or dispute_form(index),
            }
        )
    return {
        "project": project,
        "view": view,
        "draft": view,
        "rows": rows,
        "error": "",
        "is_current": view.period == current,
        "period_label": view.period.strftime("%Y-%m"),
        "previous": _previous_month(view.period).strftime("%Y-%m"),
        "next": following.strftime("%Y-%m") if following <= current else "",
        "can_manage": access.can_manage(request.user, project),
        "can_dispute": access.can_manage(request.user, project)
        and view.status in (Statement.Status.CLOSED, Statement.Status.DISPUTED),
        "is_admin": access.is_admin(request.user),
        "requesters": _requesters(project, view, now=now),
        "hours": allocations.project_standings(project.pk, period=view.period, now=now),
    }


def _statement_again(
    request: HttpRequest,
    statement: Statement,
    *,
    partial: str,
    own: dict[str, Any],
    status: int,
    **forms: Any,
) -> HttpResponse:
    """The statement page of ``statement``'s month with a refused dispute or answer as it
    was sent, its errors inside the form; for HTMX that form alone (``partial``, drawn
    with ``own``)."""
    now = timezone.now()
    view = draft_statement(
        project_id=statement.project.pk,
        period=parse_period(f"{statement.period:%Y-%m}"),
        now=now,
        kept=True,
    )
    context = _statement_context(request, statement.project, view, now=now, **forms)
    context.update(own)
    return form_again(
        request, page="billing/statement.html", partial=partial, context=context, status=status
    )


@login_required
def line_detail(request: HttpRequest, slug: str, period: str, index: int) -> HttpResponse:
    """Every cent explained: the usage intervals behind a line, or the formula of a share."""
    project = access.get_project_or_404(request.user, slug)
    try:
        month = parse_period(period)
    except ValueError:
        raise Http404 from None
    now = timezone.now()
    view = draft_statement(project_id=project.pk, period=month, now=now, kept=True)
    if not 0 <= index < len(view.lines):
        raise Http404
    line = view.lines[index]
    return render(
        request,
        "billing/line.html",
        {
            "project": project,
            "view": view,
            "line": line,
            "index": index,
            "explanation": explain.explain(project=project, view=view, line=line, now=now),
            "period_label": view.period.strftime("%Y-%m"),
        },
    )


def _back_to_statement(statement: Statement) -> HttpResponse:
    return redirect(
        reverse("billing:statement", args=[statement.project.slug])
        + f"?period={statement.period:%Y-%m}"
    )


@login_required
@require_POST
def statement_approve(request: HttpRequest, pk: int) -> HttpResponse:
    statement = get_object_or_404(
        Statement.objects.select_related("project"), pk=pk, project__isnull=False
    )
    access.require_manager(request.user, statement.project)
    try:
        services.approve_statement(statement_id=statement.pk, actor=request.user)
        messages.success(request, _("Statement signed off."))
    except DomainError as refused:
        messages.error(request, refused.message)
    return _back_to_statement(statement)


@login_required
@require_POST
def line_dispute(request: HttpRequest, pk: int) -> HttpResponse:
    line = get_object_or_404(
        StatementLine.objects.select_related("statement__project"),
        pk=pk,
        statement__project__isnull=False,
    )
    access.require_manager(request.user, line.statement.project)
    index = _line_index(line)
    form = dispute_form(index, request.POST)
    if form.is_valid():
        try:
            services.dispute_line(
                line_id=line.pk, actor=request.user, comment=form.cleaned_data["comment"]
            )
        except DomainError as refused:
            put_on_form(form, refused)
            status = refused.page_status
        else:
            messages.success(request, _("Line disputed; an admin will answer."))
            return _back_to_statement(line.statement)
    else:
        status = 400
    return _statement_again(
        request,
        line.statement,
        partial="billing/_dispute_form.html",
        own={"line": line, "index": index, "form": form},
        status=status,
        dispute_forms={line.pk: form},
    )


def _line_index(line: StatementLine) -> int:
    """The line's place on its statement page (the page orders a statement's lines by pk)."""
    return StatementLine.objects.filter(statement_id=line.statement_id, pk__lt=line.pk).count()


@login_required
@require_POST
def dispute_answer(request: HttpRequest, pk: int) -> HttpResponse:
    access.require_admin(request.user)
    dispute = get_object_or_404(
        LineDispute.objects.select_related("line__statement__project"), pk=pk
    )
    form = answer_form(dispute.pk, request.POST)
    if form.is_valid():
        data = form.cleaned_data
        try:
            services.answer_dispute(
                dispute_id=dispute.pk,
                actor=request.user,
                answer=data["answer"],
                kind=data["kind"],
                amount=data["amount"] or None,
            )
        except DomainError as refused:
            put_on_form(form, refused)
            status = refused.page_status
        else:
            messages.success(request, _("Dispute answered."))
            return _back_to_statement(dispute.line.statement)
    else:
        status = 400
    return _statement_again(
        request,
        dispute.line.statement,
        partial="billing/_answer_form.html",
        own={"dispute": dispute, "form": form},
        status=status,
        answer_forms={dispute.pk: form},
    )


@login_required
def finance(request: HttpRequest) -> HttpResponse:
    """Every project's statement for a month with their totals (finance, admins)."""
    if not access.sees_everything(request.user):
        raise Http404
    error = ""
    try:
        period = parse_period(request.GET.get("period"))
    except ValueError as invalid:
        error, period = str(invalid), None
    now = timezone.now()
    start = period_start(period or now)
    current = period_start(now)
    if request.GET.get("format") in ("csv", "pdf") and not error:
        items = finance_statements(start=start, now=now)
        with translation.override(exports.LANGUAGE):
            exported = _export_response(
                request,
                items,
                title=_("All statements"),
                period=start,
                filename=f"statements-{start:%Y-%m}",
            )
        assert exported is not None
        return exported
    rows, platform = finance_rows(start=start, now=now)
    following = period_end(start)
    closed_at = next(
        (row.statement.closed_at for row in rows if row.statement and row.statement.closed_at),
        None,
    )
    # A page of rows drawn; the total is every project's.
    page = Paginator(rows, FINANCE_ROWS_PER_PAGE).get_page(request.GET.get("page"))
    return render(
        request,
        "billing/finance.html",
        {
            "items": page,
            "page": page,
            "period": start,
            "is_current": start == current,
            "closes_at": services.closes_at(start),
            "closing_passed": services.closes_at(start) <= now,
            "closed_at": closed_at,
            "grace_hours": settings.PORTAL_STATEMENT_GRACE_HOURS,
            "platform_lines": explain.platform_sentences(
                view=platform, lines=platform.lines, now=now
            )
            if platform is not None
            else [],
            "period_label": start.strftime("%Y-%m"),
            "total": sum((row.total for row in rows), Decimal("0.00")),
            "error": error,
            "previous": _previous_month(start).strftime("%Y-%m"),
            "next": following.strftime("%Y-%m") if following <= current else "",
        },
        status=400 if error else 200,
    )


@dataclass(frozen=True)
class FinanceRow:
    """One statement as the finance page lists it: whose, its state, lines and total."""

    project_slug: str
    project_name: str
    statement: Statement | None
    is_draft: bool
    status: str
    line_count: int
    total: Decimal


def finance_rows(
    *, start: datetime, now: datetime
) -> tuple[list[FinanceRow], StatementView | None]:
    """Every project's row of a month and the platform's statement (its lines are
    explained). A closed month reads its stored totals and counts its lines in the
    database; an open one reads the kept lines (``finance_statements``)."""
    if start != period_start(now):
        closed = list(
            Statement.objects.filter(period=start.date())
            .exclude(status=Statement.Status.DRAFT)
            .select_related("project", "decided_by")
            .annotate(line_count=Count("lines"))
            .order_by("project__slug")
        )
        if closed:
            rows, platform = [], None
            for statement in closed:
                if statement.project is None:
                    platform = StatementView(
                        project_id=0,
                        period=start,
                        lines=sorted(statement.lines.all(), key=lambda line: line.pk),
                        currency=statement.currency,
                        status=statement.status,
                        statement=statement,
                    )
                    continue
                rows.append(
                    FinanceRow(
                        statement.project.slug,
                        statement.project.name,
                        statement,
                        False,
                        statement.status,
                        statement.line_count,
                        statement.total,
                    )
                )
            if platform is not None:
                rows.append(
                    FinanceRow(
                        "platform",
                        _("Platform overhead"),
                        platform.statement,
                        False,
                        platform.status,
                        len(platform.lines),
                        platform.total,
                    )
                )
            return rows, platform
    kept = drafts.read_totals(start=start, now=now) if start == period_start(now) else None
    if kept is not None:
        return _open_rows(start, *kept)
    items = finance_statements(start=start, now=now)
    rows = [
        FinanceRow(
            item.project_slug,
            item.project_name,
            item.view.statement,
            item.view.is_draft,
            item.view.status,
            len(item.view.lines),
            item.view.total,
        )
        for item in items
    ]
    platform = next((item.view for item in items if item.project_slug == "platform"), None)
    return rows, platform


def _open_rows(
    start: datetime, totals: dict[int, drafts.KeptTotal], platform: drafts.Kept
) -> tuple[list[FinanceRow], StatementView | None]:
    """The open month's rows from the kept totals and the manual lines so far: no
    project's lines are read, only the platform's (the page explains them)."""
    manual = manual_lines(project_ids=None, period=start)
    rows = []
    for pk, slug, name, active in Project.objects.order_by("slug").values_list(
        "pk", "slug", "name", "is_active"
    ):
        kept = totals.get(pk, drafts.KeptTotal(0, Decimal("0.00")))
        extra = manual.get(pk, [])
        count = kept.line_count + len(extra)
        if not active and not count:
            continue
        total = kept.total + sum((line.amount for line in extra), Decimal("0.00"))
        rows.append(FinanceRow(slug, name, None, True, "draft", count, total))
    lines = platform.for_project(None)
    if not lines:
        return rows, None
    view = StatementView(project_id=0, period=start, lines=lines, currency=_currency())
    rows.append(
        FinanceRow("platform", _("Platform overhead"), None, True, "draft", len(lines), view.total)
    )
    return rows, view


def finance_statements(*, start: datetime, now: datetime) -> list[exports.ExportStatement]:
    """Every project's statement for a month, closed ones as stored and open ones computed
    once for all projects, in a fixed number of queries."""
    projects = {p.pk: p for p in Project.objects.order_by("slug")}
    stored = {
        statement.project_id: statement
        for statement in Statement.objects.filter(period=start.date())
        .exclude(status=Statement.Status.DRAFT)
        .select_related("decided_by")
        .prefetch_related("lines")
    }
    items: list[exports.ExportStatement] = []
    computed = None
    manual: dict[int, list] = {}
    # A closed month shows what was closed: a project made since has no statement in it.
    if not stored or start == period_start(now):
        computed = drafts.kept_or_computed(start=start, now=now, project_ids=None)
        manual = manual_lines(project_ids=None, period=start)
    for project_id, project in projects.items():
        if project_id in stored:
            statement = stored[project_id]
            view = StatementView(
                project_id=project_id,
                period=start,
                lines=sorted(statement.lines.all(), key=lambda line: line.pk),
                currency=statement.currency,
                status=statement.status,
                statement=statement,
            )
        elif computed is not None:
            lines = computed.for_project(project_id) + manual.get(project_id, [])
            if not project.is_active and not lines:
                continue
            view = StatementView(
                project_id=project_id, period=start, lines=lines, currency=_currency()
            )
        else:
            continue
        items.append(exports.ExportStatement(project.slug, project.name, view))
    platform = stored.get(None)
    if platform is not None:
        view = StatementView(
            project_id=0,
            period=start,
            lines=sorted(platform.lines.all(), key=lambda line: line.pk),
            currency=platform.currency,
            status=platform.status,
            statement=platform,
        )
        items.append(exports.ExportStatement("platform", _("Platform overhead"), view))
    elif computed is not None and computed.for_project(None):
        view = StatementView(
            project_id=0, period=start, lines=computed.for_project(None), currency=_currency()
        )
        items.append(exports.ExportStatement("platform", _("Platform overhead"), view))
    return items


def _currency() -> str:
    return settings.PORTAL_CURRENCY


@login_required
def reports(request: HttpRequest, slug: str) -> HttpResponse:
    """Reports that save money: trend, idle waste, committed-capacity and rent-or-buy
    advice, each with its figures."""
    project = access.get_project_or_404(request.user, slug)
    now = timezone.now()
    names, quota_models = billing_reports.project_gpu_models(project.pk)
    months = billing_reports.trend(
        project_id=project.pk, now=now, created=project.created_at, names=names
    )
    other = billing_reports.other_label()
    models = sorted(
        {name for month in months for name in month.per_model},
        key=lambda name: (name == other, name),
    )
    advice = billing_reports.kept_commitment_advice(gpu_model_ids=quota_models, now=now)
    highest = max((month.total for month in months), default=Decimal(0)) or Decimal(1)
    return render(
        request,
        "billing/reports.html",
        {
            "project": project,
            "months": [
                {
                    "month": month,
                    "cells": [month.per_model.get(name) for name in models],
                    "bar": int(month.total * 200 / highest),
                }
                for month in months
            ],
            "models": models,
            "idle": billing_reports.idle_waste(project_id=project.pk, now=now, names=names),
            "sample_seconds": billing_reports.sample_seconds(),
            "advice": billing_reports.rent_or_buy_all(advice),
        },
    )
