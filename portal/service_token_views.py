"""A project's service tokens page, for its managers and admins (anybody else: 404): make
a named token with its scopes and an expiry (shown once, in the answer to the form and
never again), list the project's tokens with who made them and their last use, revoke
them. Reached from the project page.

As on the personal tokens page (portal/token_views.py), the new token is rendered straight
into the answer to the POST, stored nowhere, and that answer is not cached.
"""

from datetime import timedelta

from django.contrib import messages
from django.contrib.auth.decorators import login_required
from django.http import Http404, HttpRequest, HttpResponse
from django.shortcuts import redirect, render
from django.utils import timezone
from django.utils.translation import gettext as _
from django.views.decorators.cache import never_cache
from django.views.decorators.http import require_POST

from portal import access, service_tokens
from portal.errors import DomainError
from portal.models import Project, ServiceToken
from portal.token_views import DEFAULT_DAYS, FORM_FIELD_OF, LIFETIMES


def _managed_project(request: HttpRequest, slug: str) -> Project:
    project = access.get_project_or_404(request.user, slug)
    access.require_manager(request.user, project)
    return project


def _render(
    request: HttpRequest,
    project: Project,
    *,
    new_token: str = "",
    values: dict[str, object] | None = None,
    errors: dict[str, str] | None = None,
    notice: str = "",
) -> HttpResponse:
    rows = list(
        ServiceToken.objects.filter(project=project)
        .select_related("created_by")
        .order_by("-created_at", "-id")
    )
    context = {
        "project": project,
        "tokens": rows,
        "now": timezone.now(),
        "new_token": new_token,
        "values": values
        or {"name": "", "days": str(DEFAULT_DAYS), "scopes": [ServiceToken.Scope.READ]},
        "errors": errors or {},
        "lifetimes": LIFETIMES,
        "scopes": [
            (scope, label, service_tokens.SCOPE_WORDS[scope])
            for scope, label in ServiceToken.Scope.choices
        ],
        "notice": notice,
    }
    template = "portal/_service_tokens.html" if request.htmx else "portal/service_tokens.html"
    return render(request, template, context)


@never_cache
@login_required
def service_token_list(request: HttpRequest, slug: str) -> HttpResponse:
    project = _managed_project(request, slug)
    if request.method != "POST":
        return _render(request, project)
    values: dict[str, object] = {
        "name": request.POST.get("name", ""),
        "days": request.POST.get("days", ""),
        "scopes": request.POST.getlist("scopes"),
    }
    try:
        days = int(str(values["days"]))
    except ValueError:
        days = 0
    if days not in dict(LIFETIMES):
        return _render(
            request, project, values=values, errors={"days": _("Choose how long it lasts.")}
        )
    try:
        _row, raw = service_tokens.create_service_token(
            actor=request.user,
            project=project,
            name=str(values["name"]),
            scopes=values["scopes"],
            expires_at=timezone.now() + timedelta(days=days),
        )
    except DomainError as error:
        field = FORM_FIELD_OF.get(error.field, error.field) or "name"
        return _render(request, project, values=values, errors={field: error.message})
    return _render(request, project, new_token=raw)


@never_cache
@login_required
@require_POST
def service_token_revoke(request: HttpRequest, slug: str, pk: int) -> HttpResponse:
    project = _managed_project(request, slug)
    row = ServiceToken.objects.filter(pk=pk, project=project).first()
    if row is None:
        raise Http404
    try:
        service_tokens.revoke_service_token(actor=request.user, token=row)
    except DomainError as error:
        notice = error.message
    else:
        notice = _("Service token %(name)s revoked.") % {"name": row.name}
    if request.htmx:
        return _render(request, project, notice=notice)
    messages.info(request, notice)
    return redirect("service_tokens", slug=project.slug)
