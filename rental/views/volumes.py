"""The project page's data volumes section: list, create, delete (issue 8.9)."""

from django.contrib.auth.decorators import login_required
from django.http import HttpRequest, HttpResponse
from django.shortcuts import get_object_or_404, render
from django.views.decorators.http import require_POST

from portal import access
from portal.errors import DomainError
from rental import selectors
from rental.catalog import volumes
from rental.models import DataVolume


def _section(request: HttpRequest, project, *, error: str = "", status: int = 200) -> HttpResponse:
    """The section, for the project page's HTMX; a page of its own for a browser that
    follows the section's link or sends its form without HTMX."""
    zones = volumes.volume_zones()
    return render(
        request,
        "rental/volumes/_volumes.html" if request.htmx else "rental/volumes/volumes.html",
        {
            "project": project,
            "volumes": list(selectors.project_volumes(project)),
            "zones": zones,
            "why_no_zone": volumes.why_no_zone(zones),
            "can_request": access.can_request_for(request.user, project),
            "error": error,
            "values": request.POST if request.method == "POST" else {},
        },
        status=status,
    )


@login_required
def project_volumes(request: HttpRequest, slug: str) -> HttpResponse:
    project = access.get_project_or_404(request.user, slug)
    if request.method != "POST":
        return _section(request, project)
    access.require_member(request.user, project)
    try:
        volumes.create_volume(
            actor=request.user,
            project=project,
            name=request.POST.get("name", ""),
            size_gb=request.POST.get("size_gb", ""),
            zone=request.POST.get("zone", ""),
        )
    except DomainError as error:
        return _section(request, project, error=str(error), status=error.page_status)
    return _section(request, project)


@login_required
@require_POST
def volume_delete(request: HttpRequest, slug: str, pk: int) -> HttpResponse:
    project = access.get_project_or_404(request.user, slug)
    access.require_member(request.user, project)
    volume = get_object_or_404(DataVolume, pk=pk, project=project)
    try:
        volumes.delete_volume(actor=request.user, volume=volume)
    except DomainError as error:
        return _section(request, project, error=str(error), status=error.page_status)
    return _section(request, project)
