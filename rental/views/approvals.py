"""The approvals page: the requests beyond the ceiling or the auto-approve limits that
wait for a manager, each with its decision's form."""

from typing import Any

from django.contrib import messages
from django.contrib.auth.decorators import login_required
from django.core.paginator import Paginator
from django.http import Http404, HttpRequest, HttpResponse
from django.shortcuts import redirect, render
from django.utils.translation import gettext as _
from django.views.decorators.http import require_POST

from portal import access
from portal.errors import DomainError, form_again, put_on_form
from rental import selectors
from rental.forms import DecisionForm
from rental.loans import admission
from rental.models import Reservation
from rental.views.leases import LEASES_PER_PAGE

# --- Approvals -------------------------------------------------------------------------


@login_required
def approvals(request: HttpRequest) -> HttpResponse:
    if not access.manages_any(request.user):
        raise Http404
    return render(request, "rental/leases/approvals.html", _approvals_context(request))


def decision_form(lease_pk: int, data: Any = None) -> DecisionForm:
    """The comment of a decision in the lease's row of the approvals page."""
    return DecisionForm(
        data, auto_id=f"%s-{lease_pk}", placeholder=_("Comment (required to reject)")
    )


def _approvals_context(
    request: HttpRequest, refused: tuple[Reservation, DecisionForm] | None = None
) -> dict[str, Any]:
    """The page of requests waiting for this manager, each row with its decision's form;
    ``refused``: a lease whose decision was refused, drawn with its form as it was sent
    (first, if it is not on the page, so that its errors are seen)."""
    pending = selectors.waiting_rows(selectors.pending_approvals(request.user)).order_by(
        "submitted_at", "pk"
    )
    page = Paginator(pending, LEASES_PER_PAGE).get_page(request.GET.get("page"))
    rows = [(lease, decision_form(lease.pk)) for lease in page]
    if refused is not None:
        lease, form = refused
        rows = [(other, form if other.pk == lease.pk else blank) for other, blank in rows]
        if lease.pk not in {other.pk for other in page}:
            rows.insert(0, (lease, form))
    return {"page": page, "rows": rows}


@login_required
def approvals_count(request: HttpRequest) -> HttpResponse:
    """The badge in the navigation: how many requests wait for this manager."""
    count = selectors.pending_approvals(request.user).count()
    return render(request, "rental/leases/_approvals_badge.html", {"count": count})


def _decide(request: HttpRequest, pk: int, *, approve: bool) -> HttpResponse:
    lease = access.get_visible_or_404(selectors.leases(), request.user, pk=pk)
    access.require_manager(request.user, lease.project)
    form = decision_form(lease.pk, request.POST)
    if not form.is_valid():
        return _decision_again(request, lease, form, status=400)
    comment = form.cleaned_data["comment"]
    try:
        if approve:
            lease = admission.approve_reservation(
                actor=request.user, reservation=lease, comment=comment, source="web"
            )
        else:
            lease = admission.reject_reservation(
                actor=request.user, reservation=lease, comment=comment, source="web"
            )
    except DomainError as error:
        # What the manager typed is on its field; what the rules say again about the
        # request as it was asked (its window, its ceiling) is said for the whole form.
        put_on_form(form, error)
        return _decision_again(request, lease, form, status=error.page_status)
    done = (
        _("Lease #%(id)s approved: %(status)s.") if approve else _("Lease #%(id)s rejected.")
    ) % {"id": lease.pk, "status": lease.get_status_display().lower()}
    if request.htmx:
        response = render(
            request, "rental/leases/_approval_row.html", {"lease": lease, "done": done}
        )
        response["HX-Trigger"] = "approvals-changed"
        return response
    messages.success(request, done)
    return redirect("rental:approvals")


def _decision_again(
    request: HttpRequest, lease: Reservation, form: DecisionForm, *, status: int
) -> HttpResponse:
    """The approvals page, or for HTMX the lease's row, with its decision's form as it was
    sent."""
    context = _approvals_context(request, refused=(lease, form))
    context.update(lease=lease, form=form)  # the row's own, for the partial
    return form_again(
        request,
        page="rental/leases/approvals.html",
        partial="rental/leases/_approval_row.html",
        context=context,
        status=status,
    )


@login_required
@require_POST
def lease_approve(request: HttpRequest, pk: int) -> HttpResponse:
    return _decide(request, pk, approve=True)


@login_required
@require_POST
def lease_reject(request: HttpRequest, pk: int) -> HttpResponse:
    return _decide(request, pk, approve=False)
