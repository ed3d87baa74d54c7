"""The site shell: login, the dashboard frame, notifications, the audit log."""

import sys
from typing import Any

from django.conf import settings
from django.contrib.auth import views as auth_views
from django.contrib.auth.decorators import login_required
from django.http import HttpRequest, HttpResponse, JsonResponse
from django.shortcuts import redirect, render
from django.template import loader
from django.utils import timezone
from django.utils.translation import gettext as _
from django.views import defaults
from django.views import i18n as django_i18n
from django.views.decorators.http import require_POST

from portal import access, errors, languages, login_throttle
from portal.audit_log import AuditFilterForm, in_words
from portal.keyset import keyset_page
from portal.models import AuditEvent
from portal.sso import config as sso_config
from portal.sso import password_login

AUDIT_PAGE_SIZE = 25


class LoginView(auth_views.LoginView):
    """Django's login; a try the throttle refuses is answered 429 with ``Retry-After`` and
    the wait in words (the counting itself is in ``portal.login_throttle``, for the
    admin's login too). With single sign-on set up, the page offers "Sign in with …"; with
    password login switched off, a password for anyone but the break-glass admin is
    refused with 403 and says so (``portal.sso.password_login``), and is never tried."""

    template_name = "portal/login.html"
    redirect_authenticated_user = True

    def post(self, request: HttpRequest, *args: Any, **kwargs: Any) -> HttpResponse:
        if not password_login.allowed(request.POST.get("username", "")):
            form = self.get_form()
            form.errors.clear()
            form.add_error(None, password_login.refusal())
            return self.render_to_response(self.get_context_data(form=form), status=403)
        refusal = login_throttle.check(request, request.POST.get("username", ""))
        if refusal is not None:
            return too_many_logins(self, request, refusal)
        return super().post(request, *args, **kwargs)

    def get_context_data(self, **kwargs: Any) -> dict[str, Any]:
        return {
            **super().get_context_data(**kwargs),
            "sso_name": sso_config.sign_in_name(),
            "password_login": settings.PORTAL_PASSWORD_LOGIN,
        }

    def form_valid(self, form: Any) -> HttpResponse:
        return languages.after_login(self.request, super().form_valid(form))


def set_language(request: HttpRequest) -> HttpResponse:
    """Django's language switch (the cookie), and the choice kept for the person, so
    mail to them is written in it too."""
    response = django_i18n.set_language(request)
    if request.method == "POST" and request.user.is_authenticated:
        languages.remember(
            user=request.user, language=request.POST.get("language", ""), chosen=True
        )
    return response


def too_many_logins(
    view: Any, request: HttpRequest, refusal: login_throttle.Refusal
) -> HttpResponse:
    form = view.get_form()
    form.errors.clear()
    form.add_error(None, refusal.message)
    response = view.render_to_response(view.get_context_data(form=form), status=429)
    response["Retry-After"] = str(refusal.retry_after)
    return response


def throttled_admin_login(admin_login: Any) -> Any:
    """``/admin/login/`` answers a refused try with 429 like our own page."""

    def login(request: HttpRequest, extra_context: Any = None) -> HttpResponse:
        if request.method == "POST" and not password_login.allowed(request.POST.get("username")):
            context = {"form": None, "throttled": password_login.refusal(), "next": ""}
            return render(request, "portal/login.html", context, status=403)
        if request.method == "POST":
            refusal = login_throttle.check(request, request.POST.get("username", ""))
            if refusal is not None:
                response = render(
                    request,
                    "portal/login.html",
                    {
                        "form": None,
                        "throttled": refusal.message,
                        "next": request.GET.get("next", ""),
                    },
                    status=429,
                )
                response["Retry-After"] = str(refusal.retry_after)
                return response
        return admin_login(request, extra_context)

    return login


@login_required
def dashboard(request: HttpRequest) -> HttpResponse:
    return render(request, "portal/dashboard.html", {"panels": settings.PORTAL_DASHBOARD_PANELS})


@login_required
def notifications(request: HttpRequest) -> HttpResponse:
    items = request.user.notifications.all()[:100]
    return render(request, "portal/notifications.html", {"items": items})


@login_required
@require_POST
def notifications_read(request: HttpRequest) -> HttpResponse:
    request.user.notifications.filter(read_at__isnull=True).update(read_at=timezone.now())
    return redirect("notifications")


@login_required
def audit_log(request: HttpRequest) -> HttpResponse:
    """The audit log in words, newest first, filtered by who, project, what happened, to
    what and when; the same queries for a page of any size (``portal.audit_log``), and
    for any page of the log: pages follow a cursor (``portal.keyset``), nothing counts
    the whole log."""
    access.require_admin(request.user)
    form = AuditFilterForm(request.GET)
    form.is_valid()  # an invalid filter is shown with its error and left out
    events = form.filter(
        AuditEvent.objects.select_related("actor__service_token__project", "project")
    )
    page = keyset_page(events, request.GET, size=AUDIT_PAGE_SIZE, moment="at")
    return render(
        request,
        "portal/audit_log.html",
        {"page": page, "lines": in_words(page), "form": form},
    )


# --- Error pages: the site's templates, or the API's one JSON shape under /api/ -----------


def _api_error(request: HttpRequest, status: int, code: str, detail: str) -> HttpResponse | None:
    if not request.path_info.startswith("/api/"):
        return None
    body: dict[str, Any] = {"code": code, "detail": str(detail)}
    if status == 400:
        body["errors"] = {"non_field_errors": [body["detail"]]}
    return JsonResponse(body, status=status)


def bad_request(request: HttpRequest, exception: Exception | None = None) -> HttpResponse:
    answer = _api_error(request, 400, "invalid", _("The request is not valid."))
    return answer or defaults.bad_request(request, exception)


def permission_denied(request: HttpRequest, exception: Exception | None = None) -> HttpResponse:
    answer = _api_error(request, 403, "permission_denied", _("You may not do this."))
    return answer or defaults.permission_denied(request, exception)


def page_not_found(request: HttpRequest, exception: Exception | None = None) -> HttpResponse:
    answer = _api_error(request, 404, "not_found", _("Not found."))
    return answer or defaults.page_not_found(request, exception)


def server_error(request: HttpRequest) -> HttpResponse:
    # Django calls this while the uncaught error is being handled: a service out of reach
    # (the database restarting) is a 503 to try again, not a bug.
    if errors.unavailable(sys.exc_info()[1]):
        return service_unavailable(request)
    answer = _api_error(request, 500, "server_error", _("Something went wrong on our side."))
    return answer or defaults.server_error(request)


def service_unavailable(request: HttpRequest) -> HttpResponse:
    """503 with Retry-After: the API's error shape under /api/, else a page drawn without
    the request (no session, no user, no database), in the language already chosen."""
    answer = _api_error(request, 503, "unavailable", str(errors.UNAVAILABLE_DETAIL))
    if answer is None:
        answer = HttpResponse(loader.render_to_string("503.html"), status=503)
    answer["Retry-After"] = str(settings.PORTAL_RETRY_AFTER_SECONDS)
    return answer
