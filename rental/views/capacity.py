"""Web pages of the loan model beyond the lease itself: extending and rescheduling a
lease, availability watches, quota requests and auto-approve limits (the pools pages are
in ``rental.views.pools``). Views parse input, call one service or
selector, and render."""

from datetime import timedelta
from typing import Any

from django.contrib import messages
from django.contrib.auth.decorators import login_required
from django.http import Http404, HttpRequest, HttpResponse
from django.shortcuts import redirect
from django.utils.translation import gettext as _
from django.views.decorators.http import require_POST

from portal import access
from portal.errors import DomainError, form_again, put_on_form
from rental.forms import ExtendForm, QuotaRequestForm, RescheduleForm
from rental.loans import extension, pools, quota_requests, reservations
from rental.models import Quota, QuotaRequest, Reservation
from rental.views.leases import extension_decision_form, lease_form_again
from rental.views.projects import project_context, project_page, quota_decision_form

Status = Reservation.Status


# --- Extend, watch, quota requests -------------------------------------------------------


def _lease_for_member(request: HttpRequest, pk: int) -> Reservation:
    return access.get_lease_to_act_on_or_404(
        Reservation.objects.select_related("project", "gpu_model"), request.user, pk=pk
    )


def _done(request: HttpRequest, error: DomainError | None, ok: str) -> None:
    if error is None:
        messages.success(request, ok)
    else:
        messages.error(request, error.message)


@login_required
@require_POST
def lease_extend(request: HttpRequest, pk: int) -> HttpResponse:
    lease = _lease_for_member(request, pk)
    form = ExtendForm(request.POST)
    if not form.is_valid():
        return lease_form_again(request, pk, extend_form=form, status=400)
    try:
        lease = extension.extend_reservation(
            actor=request.user, reservation=lease, hours=form.cleaned_data["hours"]
        )
    except DomainError as error:
        put_on_form(form, error)
        return lease_form_again(request, pk, extend_form=form, status=error.page_status)
    messages.success(
        request,
        _("The extension waits for a manager's approval.")
        if lease.extension_until
        else _("Lease #%(id)s now ends at %(end)s UTC.")
        % {"id": lease.pk, "end": lease.end.strftime("%Y-%m-%d %H:%M")},
    )
    return redirect("rental:lease", pk=pk)


@login_required
@require_POST
def lease_reschedule(request: HttpRequest, pk: int) -> HttpResponse:
    """Move or resize a booking before it starts (R2 re-checked without its own window)."""
    lease = _lease_for_member(request, pk)
    form = RescheduleForm(request.POST)
    if not form.is_valid():
        return lease_form_again(request, pk, reschedule_form=form, status=400)
    start = form.cleaned_data["start"]
    hours = form.cleaned_data["duration_hours"]
    try:
        lease = reservations.reschedule_reservation(
            actor=request.user,
            reservation=lease,
            start=start,
            end=start + timedelta(seconds=int(hours * 3600)),
            gpu_count=form.cleaned_data["gpu_count"],
        )
    except DomainError as error:
        put_on_form(form, error)
        return lease_form_again(request, pk, reschedule_form=form, status=error.page_status)
    messages.success(
        request,
        _("Booking #%(id)s now runs %(start)s to %(end)s UTC on %(gpus)s GPUs.")
        % {
            "id": lease.pk,
            "start": lease.start.strftime("%Y-%m-%d %H:%M"),
            "end": lease.end.strftime("%Y-%m-%d %H:%M"),
            "gpus": lease.gpu_count,
        },
    )
    return redirect("rental:lease", pk=pk)


@login_required
@require_POST
def lease_extension_decide(request: HttpRequest, pk: int) -> HttpResponse:
    lease = access.get_visible_or_404(Reservation.objects.all(), request.user, pk=pk)
    access.require_manager(request.user, lease.project)
    approve = request.POST.get("decision") == "approve"
    form = extension_decision_form(request.POST)
    if not form.is_valid():
        return lease_form_again(request, pk, extension_form=form, status=400)
    try:
        extension.decide_extension(
            actor=request.user,
            reservation=lease,
            approve=approve,
            comment=form.cleaned_data["comment"],
        )
    except DomainError as error:
        put_on_form(form, error)
        return lease_form_again(request, pk, extension_form=form, status=error.page_status)
    messages.success(request, _("Extension approved.") if approve else _("Extension refused."))
    return redirect("rental:lease", pk=pk)


@login_required
@require_POST
def lease_watch(request: HttpRequest, pk: int) -> HttpResponse:
    lease = _lease_for_member(request, pk)
    error = None
    try:
        pools.watch_availability(
            actor=request.user, gpu_model=lease.gpu_model, count=lease.gpu_count
        )
    except DomainError as caught:
        error = caught
    _done(
        request,
        error,
        _("You will be told once when %(n)s× %(model)s are free.")
        % {"n": lease.gpu_count, "model": lease.gpu_model},
    )
    return redirect("rental:lease", pk=pk)


@login_required
@require_POST
def quota_request_new(request: HttpRequest, slug: str) -> HttpResponse:
    project = access.get_project_or_404(request.user, slug)
    access.require_member(request.user, project)
    form = QuotaRequestForm(request.POST, project=project)
    if not form.is_valid():
        return _quota_requests_again(request, project, status=400, quota_request_form=form)
    data = form.cleaned_data
    try:
        quota_requests.request_quota_change(
            actor=request.user,
            project=project,
            gpu_model=data["gpu_model"],
            guaranteed=data["guaranteed"] or None,
            ceiling=data["ceiling"] or None,
            reason=data["reason"],
        )
    except DomainError as error:
        put_on_form(form, error)
        return _quota_requests_again(
            request, project, status=error.page_status, quota_request_form=form
        )
    messages.success(request, _("Your request is sent to the people who decide it."))
    return redirect("rental:project", slug=slug)


@login_required
@require_POST
def quota_request_decide(request: HttpRequest, pk: int) -> HttpResponse:
    asked = access.get_visible_or_404(
        QuotaRequest.objects.select_related("project"), request.user, pk=pk
    )
    if not quota_requests.may_decide(request.user, asked):
        raise Http404
    approve = request.POST.get("decision") == "approve"
    form = quota_decision_form(asked.pk, request.POST)
    if form.is_valid():
        try:
            quota_requests.decide_quota_request(
                actor=request.user,
                request=asked,
                approve=approve,
                comment=form.cleaned_data["comment"],
            )
        except DomainError as error:
            put_on_form(form, error)
            status = error.page_status
        else:
            messages.success(
                request, _("Quota change approved.") if approve else _("Quota change rejected.")
            )
            return redirect("rental:project", slug=asked.project.slug)
    else:
        status = 400
    return _quota_requests_again(
        request, asked.project, status=status, quota_decision_forms={asked.pk: form}
    )


def _quota_requests_again(
    request: HttpRequest, project: Any, *, status: int, **forms: Any
) -> HttpResponse:
    """The project page with a refused quota change or decision as it was sent, its
    errors inside the form; for HTMX the quota changes section alone."""
    return form_again(
        request,
        page="rental/leases/project.html",
        partial="rental/leases/_quota_requests.html",
        context=project_context(request, project, **forms),
        status=status,
    )


# --- Auto-approve limits (managers) and their caps (admins) -----------------------------


def _quota_of(request: HttpRequest, slug: str, pk: int) -> tuple[Any, Quota]:
    project = access.get_project_or_404(request.user, slug)
    quota = Quota.objects.filter(project=project, pk=pk).select_related("gpu_model").first()
    if quota is None:
        raise Http404
    return project, quota


def _refused(
    request: HttpRequest, project: Any, quota: Quota, form: str, error: DomainError
) -> HttpResponse:
    """The project page again, with the error beside the field that caused it."""
    return project_page(
        request,
        project,
        quota_errors={
            "key": f"{quota.pk}:{form}",
            "field": error.field or "",
            "message": error.message,
            "values": request.POST,
        },
        status=error.page_status,
    )


@login_required
@require_POST
def quota_auto_approve(request: HttpRequest, slug: str, pk: int) -> HttpResponse:
    """A manager sets the quota's auto-approve limits, within the admin's caps."""
    project, quota = _quota_of(request, slug, pk)
    access.require_manager(request.user, project)
    try:
        quota_requests.set_auto_approve_limits(
            actor=request.user,
            quota=quota,
            max_gpus=request.POST.get("max_gpus_per_lease", "").strip(),
            max_hours=request.POST.get("max_hours_per_lease", "").strip(),
        )
    except DomainError as error:
        return _refused(request, project, quota, "limits", error)
    messages.success(
        request, _("Auto-approve limits for %(model)s saved.") % {"model": quota.gpu_model}
    )
    return redirect("rental:project", slug=slug)


@login_required
@require_POST
def quota_auto_approve_caps(request: HttpRequest, slug: str, pk: int) -> HttpResponse:
    """An admin sets how high the managers may set the quota's auto-approve limits."""
    project, quota = _quota_of(request, slug, pk)
    access.require_admin(request.user)
    try:
        quota_requests.set_auto_approve_caps(
            actor=request.user,
            quota=quota,
            gpus_cap=request.POST.get("auto_approve_gpus_cap", "").strip(),
            hours_cap=request.POST.get("auto_approve_hours_cap", "").strip(),
        )
    except DomainError as error:
        return _refused(request, project, quota, "caps", error)
    messages.success(
        request,
        _("Caps on the auto-approve limits for %(model)s saved.") % {"model": quota.gpu_model},
    )
    return redirect("rental:project", slug=slug)
