"""The personal API tokens page: make a named token with an expiry (shown once, in the
answer to the form and never again), list them with their last use, revoke them.

The new token is rendered straight into the answer to the POST, never redirected through
the session or a message, so it is stored nowhere; that answer is not cached.
"""

from datetime import timedelta

from django.contrib import messages
from django.contrib.auth.decorators import login_required
from django.http import Http404, HttpRequest, HttpResponse
from django.shortcuts import redirect, render
from django.utils import timezone
from django.utils.translation import gettext as _
from django.utils.translation import gettext_lazy
from django.views.decorators.cache import never_cache
from django.views.decorators.http import require_POST

from portal import tokens
from portal.errors import DomainError
from portal.models import ApiToken

LIFETIMES = [
    (7, gettext_lazy("7 days")),
    (30, gettext_lazy("30 days")),
    (90, gettext_lazy("90 days")),
    (365, gettext_lazy("1 year")),
]
DEFAULT_DAYS = 90

# The service names a token's end ``expires_at``; the form asks for it as ``days``.
FORM_FIELD_OF = {"expires_at": "days"}


def _render(
    request: HttpRequest,
    *,
    new_token: str = "",
    values: dict[str, str] | None = None,
    errors: dict[str, str] | None = None,
    notice: str = "",
) -> HttpResponse:
    rows = list(ApiToken.objects.filter(user=request.user).order_by("-created_at", "-id"))
    context = {
        "tokens": rows,
        "now": timezone.now(),
        "new_token": new_token,
        "values": values or {"name": "", "days": str(DEFAULT_DAYS)},
        "errors": errors or {},
        "lifetimes": LIFETIMES,
        "notice": notice,
    }
    template = "portal/_tokens.html" if request.htmx else "portal/tokens.html"
    return render(request, template, context)


@never_cache
@login_required
def token_list(request: HttpRequest) -> HttpResponse:
    if request.method != "POST":
        return _render(request)
    values = {"name": request.POST.get("name", ""), "days": request.POST.get("days", "")}
    try:
        days = int(values["days"])
    except ValueError:
        days = 0
    if days not in dict(LIFETIMES):
        return _render(request, values=values, errors={"days": _("Choose how long it lasts.")})
    try:
        _row, raw = tokens.create_token(
            actor=request.user,
            name=values["name"],
            expires_at=timezone.now() + timedelta(days=days),
        )
    except DomainError as error:
        field = FORM_FIELD_OF.get(error.field, error.field) or "name"
        return _render(request, values=values, errors={field: error.message})
    return _render(request, new_token=raw)


@never_cache
@login_required
@require_POST
def token_revoke(request: HttpRequest, pk: int) -> HttpResponse:
    row = ApiToken.objects.filter(pk=pk, user=request.user).first()
    if row is None:
        raise Http404
    try:
        tokens.revoke_token(actor=request.user, token=row)
    except DomainError as error:
        notice = error.message
    else:
        notice = _("Token %(name)s revoked.") % {"name": row.name}
    if request.htmx:
        return _render(request, notice=notice)
    messages.info(request, notice)
    return redirect("tokens")
