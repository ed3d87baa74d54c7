"""The reconciliation pages (finance and admins): a month's imported bills with the import
form, and one import's differences per project, GPU model and instance."""

from datetime import date, timedelta
from typing import Any

from django.contrib import messages
from django.contrib.auth.decorators import login_required
from django.core.paginator import Paginator
from django.http import Http404, HttpRequest, HttpResponse
from django.shortcuts import get_object_or_404, redirect, render
from django.urls import reverse
from django.utils import timezone
from django.utils.translation import gettext as _
from django.views.decorators.http import require_POST

from billing import reconcile
from billing.periods import parse_period, period_start
from billing.reconcile_forms import AcknowledgeForm, CorrectionForm, ImportForm
from billing.reconcile_gate import hold_reason
from billing.reconcile_models import CostImport, CostImportItem
from billing.reconcile_words import explain
from portal import access
from portal.errors import DomainError, put_on_form

ITEMS_PER_PAGE = 50


def _require_finance(request: HttpRequest) -> None:
    if not access.sees_everything(request.user):
        raise Http404


def _default_month() -> date:
    """Last month: the bill a provider has just delivered."""
    return (period_start(timezone.now()) - timedelta(days=1)).replace(day=1).date()


def _month_context(month: date, form: ImportForm) -> dict[str, Any]:
    return {
        "month": month,
        "month_label": f"{month:%Y-%m}",
        "imports": list(reconcile.imports_of(month)),
        "held": hold_reason(month),
        "closed": reconcile.closed_period(month),
        "form": form,
        "threshold": reconcile.threshold(),
    }


@login_required
def reconcile_page(request: HttpRequest) -> HttpResponse:
    """GET: a month's imported bills and the import form; POST: import a bill."""
    _require_finance(request)
    if request.method == "POST":
        form = ImportForm(request.POST, request.FILES)
        month = _default_month()
        if form.is_valid():
            data = form.cleaned_data
            month = data["period"]
            upload = data["file"]
            try:
                record = reconcile.import_bill(
                    actor=request.user,
                    file=upload.file,
                    file_name=upload.name,
                    fmt=data["format"],
                    period=month,
                    account=data["account"],
                )
            except DomainError as refused:
                put_on_form(form, refused)
                return render(
                    request,
                    "billing/reconcile.html",
                    _month_context(month, form),
                    status=refused.page_status,
                )
            messages.success(request, _("Bill imported."))
            return redirect("billing:reconcile_import", pk=record.pk)
        return render(request, "billing/reconcile.html", _month_context(month, form), status=400)
    try:
        month = parse_period(request.GET.get("period")) or _default_month()
    except ValueError as invalid:
        messages.error(request, str(invalid))
        month = _default_month()
    form = ImportForm(initial={"period": f"{month:%Y-%m}"})
    return render(request, "billing/reconcile.html", _month_context(month, form))


def _import_context(request: HttpRequest, record: CostImport, **forms: Any) -> dict[str, Any]:
    flagged_only = request.GET.get("flagged") == "1"
    page = Paginator(
        reconcile.items_of(record, flagged_only=flagged_only), ITEMS_PER_PAGE
    ).get_page(request.GET.get("page"))
    by_project, by_model = reconcile.rollups(record)
    correction_forms = forms.pop("correction_forms", {})
    rows = [
        (
            item,
            explain(item, record),
            correction_forms.get(item.pk),
            reconcile.suggested_correction(item),
        )
        for item in page
    ]
    return {
        "record": record,
        "page": page,
        "rows": rows,
        "by_project": by_project,
        "by_model": by_model,
        "flagged_only": flagged_only,
        "is_admin": access.is_admin(request.user),
        "acknowledge_form": forms.pop("acknowledge_form", None) or AcknowledgeForm(),
        "held": hold_reason(record.period) if record.status == CostImport.Status.REVIEW else "",
    }


@login_required
def import_page(request: HttpRequest, pk: int) -> HttpResponse:
    _require_finance(request)
    record = get_object_or_404(
        CostImport.objects.select_related("account", "imported_by", "acknowledged_by"), pk=pk
    )
    return render(request, "billing/reconcile_import.html", _import_context(request, record))


@login_required
@require_POST
def acknowledge(request: HttpRequest, pk: int) -> HttpResponse:
    _require_finance(request)
    record = get_object_or_404(CostImport, pk=pk)
    form = AcknowledgeForm(request.POST)
    if form.is_valid():
        try:
            reconcile.acknowledge(
                actor=request.user, import_id=record.pk, note=form.cleaned_data["note"]
            )
        except DomainError as refused:
            put_on_form(form, refused)
            status = refused.page_status
        else:
            messages.success(request, _("Differences acknowledged; the month may close."))
            return redirect("billing:reconcile_import", pk=record.pk)
    else:
        status = 400
    record.refresh_from_db()
    return render(
        request,
        "billing/reconcile_import.html",
        _import_context(request, record, acknowledge_form=form),
        status=status,
    )


@login_required
@require_POST
def correct(request: HttpRequest, pk: int) -> HttpResponse:
    """An admin's adjustment line in the open month for one item's difference."""
    _require_finance(request)
    item = get_object_or_404(CostImportItem.objects.select_related("cost_import"), pk=pk)
    form = CorrectionForm(request.POST)
    if form.is_valid():
        try:
            reconcile.correct_item(
                actor=request.user,
                item_id=item.pk,
                amount=form.cleaned_data["amount"],
                description=form.cleaned_data["description"],
            )
        except DomainError as refused:
            put_on_form(form, refused)
            status, error = refused.page_status, refused.message
        else:
            messages.success(request, _("Adjustment line added to the open month."))
            return redirect(reverse("billing:reconcile_import", args=[item.cost_import_id]))
    else:
        status, error = 400, ""
    context = _import_context(request, item.cost_import, correction_forms={item.pk: form})
    return render(
        request, "billing/reconcile_import.html", {**context, "error": error}, status=status
    )
