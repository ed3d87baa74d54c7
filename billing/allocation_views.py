"""A project's GPU-hour allocations page (GA1–GA3): its managers and admins see each
allocation's use this month and set, change or remove them."""

from typing import Any

from django.contrib import messages
from django.contrib.auth.decorators import login_required
from django.http import HttpRequest, HttpResponse
from django.shortcuts import redirect, render
from django.utils import timezone
from django.utils.translation import gettext as _
from django.views.decorators.http import require_POST

from billing import allocations
from billing.forms import AllocationForm
from billing.thresholds import readable_thresholds
from portal import access
from portal.errors import DomainError, form_again, put_on_form
from portal.models import Project
from rental.models import GpuModel


def _gpu_models() -> list[tuple[int, str]]:
    return list(GpuModel.objects.order_by("name").values_list("pk", "name"))


def _said(thresholds: list[dict[str, Any]]) -> list[str]:
    """Thresholds as the form takes them: "80:actual" each."""
    return [f"{item['percent']}:{item['kind']}" for item in thresholds]


def _context(
    request: HttpRequest, project: Project, *, form: AllocationForm | None = None
) -> dict[str, Any]:
    now = timezone.now()
    rows = []
    for current in allocations.project_standings(project.pk, period=now, now=now):
        # Stored by an old version, the admin or an import, some may not read as
        # thresholds: the page shows those that do and says what it left out.
        kept, problem = readable_thresholds(current.allocation.thresholds)
        rows.append({"standing": current, "thresholds": _said(kept), "problem": problem})
    return {
        "project": project,
        "rows": rows,
        "form": form or AllocationForm(gpu_models=_gpu_models()),
        "period": now,
    }


@login_required
def allocations_page(request: HttpRequest, slug: str) -> HttpResponse:
    """GET: the project's allocations with their use this month and a form for a new one;
    POST: set one (made or replaced)."""
    project = access.get_project_or_404(request.user, slug)
    access.require_manager(request.user, project)
    if request.method != "POST":
        return render(request, "billing/allocations.html", _context(request, project))
    form = AllocationForm(request.POST, gpu_models=_gpu_models())
    if form.is_valid():
        data = form.cleaned_data
        try:
            allocations.set_allocation(
                project=project,
                actor=request.user,
                gpu_model=data["gpu_model"],
                monthly_hours=data["monthly_hours"],
                thresholds=form.threshold_list(),
                hard_stop=data["hard_stop"],
            )
        except DomainError as refused:
            put_on_form(form, refused)
            status = refused.page_status
        else:
            messages.success(request, _("GPU-hour allocation saved."))
            return redirect("billing:allocations", slug=project.slug)
    else:
        status = 400
    return form_again(
        request,
        page="billing/allocations.html",
        partial="billing/allocations.html",
        context=_context(request, project, form=form),
        status=status,
    )


@login_required
@require_POST
def allocation_remove(request: HttpRequest, slug: str) -> HttpResponse:
    project = access.get_project_or_404(request.user, slug)
    access.require_manager(request.user, project)
    try:
        allocations.remove_allocation(
            project=project, actor=request.user, gpu_model=request.POST.get("gpu_model", "")
        )
    except DomainError as refused:
        messages.error(request, refused.message)
    else:
        messages.success(request, _("GPU-hour allocation removed."))
    return redirect("billing:allocations", slug=project.slug)
