"""Input no view should ever see: a NUL byte in the path or a query parameter, and in any
part of an API request.

PostgreSQL refuses NUL in text, so such a value would reach the database as a 500. A page
asked for with one is answered 400 here, before any view (the admin's filters included),
with the site's own error page in the person's language; the API answers in its one
error shape (``{code, detail}``). A form sent with one goes on to its view: the form or
the service refuses it on its field (``portal.text``), so the person keeps what they typed
and sees which field to fix.
"""

from collections.abc import Callable

from django.conf import settings
from django.contrib.auth import logout
from django.http import HttpRequest, HttpResponse, JsonResponse
from django.shortcuts import render
from django.utils import timezone
from django.utils.translation import gettext as _

FORM_TYPES = ("application/x-www-form-urlencoded", "multipart/form-data")


def _with_nul(values: object) -> list[str]:
    """The names of the parameters (or fields) whose name or value holds a NUL byte."""
    return [
        key.replace("\x00", "")
        for key, items in values.lists()  # type: ignore[attr-defined]
        if "\x00" in key or any("\x00" in item for item in items if isinstance(item, str))
    ]


class RejectNulBytesMiddleware:
    """After the session, language, user and messages are known: the 400 page is the
    site's own, in the person's language."""

    def __init__(self, get_response: Callable[[HttpRequest], HttpResponse]) -> None:
        self.get_response = get_response

    def __call__(self, request: HttpRequest) -> HttpResponse:
        api = request.path_info.startswith("/api/")
        bad = ["path"] if "\x00" in request.path_info else _with_nul(request.GET)
        if not bad and api and request.method == "POST" and request.content_type in FORM_TYPES:
            bad = _with_nul(request.POST)
        if not bad:
            return self.get_response(request)
        message = _("A value in the request holds a NUL character, which is not allowed.")
        if api:
            errors = {name or "non_field_errors": [message] for name in bad}
            return JsonResponse(
                {"code": "invalid", "detail": message, "errors": errors}, status=400
            )
        return render(request, "400.html", {"detail": message}, status=400)


class SessionTimeoutMiddleware:
    """A session ends after ``PORTAL_SESSION_IDLE_SECONDS`` without a request (sliding) and,
    however active, ``PORTAL_SESSION_MAX_SECONDS`` after it logged in. The next request is
    then anonymous: a page redirects to the login, the API answers 401."""

    STARTED, SEEN = "_portal_started", "_portal_seen"
    TOUCH_EVERY = 60  # seconds; the last-seen time is written at most this often

    def __init__(self, get_response: Callable[[HttpRequest], HttpResponse]) -> None:
        self.get_response = get_response

    def __call__(self, request: HttpRequest) -> HttpResponse:
        user = getattr(request, "user", None)
        if user is not None and user.is_authenticated and hasattr(request, "session"):
            now = int(timezone.now().timestamp())
            started = request.session.get(self.STARTED)
            seen = request.session.get(self.SEEN)
            if started is None or seen is None:
                request.session[self.STARTED] = started or now
                request.session[self.SEEN] = now
            elif (
                now - seen > settings.PORTAL_SESSION_IDLE_SECONDS
                or now - started > settings.PORTAL_SESSION_MAX_SECONDS
            ):
                logout(request)
            elif now - seen >= self.TOUCH_EVERY:
                request.session[self.SEEN] = now
        return self.get_response(request)


def start_session_clock(sender: object, request: HttpRequest, user: object, **_: object) -> None:
    """At login (``user_logged_in``): the session's absolute and idle clocks start."""
    if hasattr(request, "session"):
        now = int(timezone.now().timestamp())
        request.session[SessionTimeoutMiddleware.STARTED] = now
        request.session[SessionTimeoutMiddleware.SEEN] = now
