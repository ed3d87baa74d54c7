"""The projects pages (the list, a project's page with its quotas, members, leases and
quota changes) and the dashboard's panels of leases and approvals."""

from typing import Any

from django.conf import settings
from django.contrib.auth.decorators import login_required
from django.core.paginator import Paginator
from django.http import HttpRequest, HttpResponse
from django.shortcuts import render
from django.utils.translation import gettext as _

from portal import access
from rental import project_reads, selectors
from rental.forms import DecisionForm, QuotaRequestForm
from rental.loans import quota_requests
from rental.models import QuotaRequest, Reservation
from rental.project_rows import ProjectRows
from rental.views.leases import any_changing

# Rows of the projects list a page shows.
PROJECTS_PER_PAGE = 25
# Leases in progress a project's page shows, the newest; the lease list has them all.
PROJECT_LEASES_SHOWN = 25

# --- Projects --------------------------------------------------------------------------


@login_required
def project_list(request: HttpRequest) -> HttpResponse:
    """The projects a person can see, a page at a time: a page reads and draws its own
    rows' figures, whatever the number of projects."""
    roles = access.roles(request.user)
    among = None if access.sees_everything(request.user) else roles
    page = Paginator(ProjectRows(among), PROJECTS_PER_PAGE).get_page(request.GET.get("page"))
    rows = [(project, roles.get(project.pk)) for project in page]
    return render(request, "rental/leases/projects.html", {"rows": rows, "page": page})


@login_required
def project_detail(request: HttpRequest, slug: str) -> HttpResponse:
    return project_page(request, access.get_project_or_404(request.user, slug))


def project_page(
    request: HttpRequest,
    project: Any,
    *,
    quota_errors: dict[str, Any] | None = None,
    status: int = 200,
) -> HttpResponse:
    """The project page; ``quota_errors`` puts a refused quota form's error beside its
    field: {"key": "<quota pk>:limits" or ":caps", "field": name, "message": text,
    "values": the values sent}."""
    context = project_context(request, project)
    context["quota_errors"] = quota_errors or {}
    return render(request, "rental/leases/project.html", context, status=status)


def quota_decision_form(asked_pk: int, data: Any = None) -> DecisionForm:
    """The comment of a decision on a quota change, one per request on the project page."""
    return DecisionForm(
        data, auto_id=f"quota-%s-{asked_pk}", placeholder=_("Comment (required to reject)")
    )


def project_context(
    request: HttpRequest,
    project: Any,
    *,
    quota_request_form: QuotaRequestForm | None = None,
    quota_decision_forms: dict[int, DecisionForm] | None = None,
) -> dict[str, Any]:
    """What the project page shows. A refused form is passed as it was sent: the quota
    change asked (``quota_request_form``) or a decision on one (by the request's pk); a
    request with a refused decision shows its form even once it is no longer pending,
    so that the refusal says why."""
    refused = quota_decision_forms or {}
    asked_list = []
    for asked in project_reads.quota_requests(project):
        may_decide = quota_requests.may_decide(request.user, asked)
        form = refused.get(asked.pk)
        if form is None and may_decide and asked.status == QuotaRequest.Status.PENDING:
            form = quota_decision_form(asked.pk)
        asked_list.append((asked, may_decide, form))
    # The newest leases in progress, one more than shown to know whether the list of all
    # of them has more.
    leases = project_reads.leases_in_progress(project, PROJECT_LEASES_SHOWN + 1)
    quota_use = project_reads.quota_use(project)
    return {
        "quota_errors": {},
        "may_manage": access.can_manage(request.user, project),
        "is_admin": access.is_admin(request.user),
        "max_lease_hours": settings.PORTAL_MAX_LEASE_HOURS,
        "project": project,
        "leases": leases[:PROJECT_LEASES_SHOWN],
        "more_leases": len(leases) > PROJECT_LEASES_SHOWN,
        "quota_use": quota_use,
        "members": project_reads.members(project),
        "can_request": access.can_request_for(request.user, project),
        "role": access.role_in(request.user, project),
        "quota_request_form": quota_request_form
        or QuotaRequestForm(project=project, quotas=[row.quota for row in quota_use]),
        "quota_requests": asked_list,
    }


# --- Dashboard panels ------------------------------------------------------------------


@login_required
def panel_leases(request: HttpRequest) -> HttpResponse:
    leases = list(
        selectors.lease_rows(
            access.scope(
                Reservation.objects.filter(
                    requester=request.user, status__in=selectors.IN_PROGRESS
                ),
                request.user,
            )
        ).order_by("-submitted_at", "-pk")[:8]
    )
    return render(
        request,
        "rental/leases/_panel_leases.html",
        {
            "leases": leases,
            "polling": any_changing(leases),
            "is_member": bool(access.roles(request.user)),
        },
    )


@login_required
def panel_approvals(request: HttpRequest) -> HttpResponse:
    if not access.manages_any(request.user):
        return HttpResponse("")
    pending = selectors.pending_approvals(request.user)
    oldest = list(selectors.waiting_rows(pending).order_by("submitted_at", "pk")[:5])
    return render(
        request, "rental/leases/_panel_approvals.html", {"count": pending.count(), "oldest": oldest}
    )
