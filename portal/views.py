"""The site shell: login, the dashboard frame, notifications, the audit log."""

from typing import Any

from django.conf import settings
from django.contrib.auth import views as auth_views
from django.contrib.auth.decorators import login_required
from django.core.cache import cache
from django.core.paginator import Paginator
from django.http import HttpRequest, HttpResponse
from django.shortcuts import redirect, render
from django.utils import timezone
from django.utils.translation import gettext as _
from django.views.decorators.http import require_POST

from portal import access
from portal.models import AuditEvent


def _throttle_keys(request: HttpRequest) -> list[str]:
    username = (request.POST.get("username") or "").strip().lower()
    address = request.META.get("REMOTE_ADDR", "")
    return [f"login-fail:user:{username}", f"login-fail:addr:{address}"]


class LoginView(auth_views.LoginView):
    """Django's login with a limit on failed attempts per username and per address."""

    template_name = "portal/login.html"
    redirect_authenticated_user = True

    def post(self, request: HttpRequest, *args: Any, **kwargs: Any) -> HttpResponse:
        keys = _throttle_keys(request)
        if any(cache.get(key, 0) >= settings.LOGIN_THROTTLE_ATTEMPTS for key in keys):
            form = self.get_form()
            form.errors.clear()
            form.add_error(None, _("Too many failed logins. Try again in a few minutes."))
            return self.render_to_response(self.get_context_data(form=form), status=429)
        return super().post(request, *args, **kwargs)

    def form_invalid(self, form: Any) -> HttpResponse:
        for key in _throttle_keys(self.request):
            cache.add(key, 0, settings.LOGIN_THROTTLE_WINDOW)
            try:
                cache.incr(key)
            except ValueError:
                cache.set(key, 1, settings.LOGIN_THROTTLE_WINDOW)
        return super().form_invalid(form)


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
    access.require_admin(request.user)
    events = AuditEvent.objects.select_related("actor", "project")
    verb = request.GET.get("verb", "").strip()
    if verb:
        events = events.filter(verb=verb)
    page = Paginator(events, 50).get_page(request.GET.get("page"))
    return render(request, "portal/audit_log.html", {"page": page, "verb": verb})
