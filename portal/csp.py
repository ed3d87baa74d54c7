"""Content-Security-Policy on every answer: pages, partials, the API, files.

Pages load scripts, styles, images and fonts from the portal itself and nothing else: no
inline script, no inline style, no ``eval``, no plugins, never framed. A bar's width or a
marker's position is a ``data-`` attribute that ``static/js/portal.js`` applies, and
HTMX's own indicator style is in ``portal.css``. The API docs (Swagger UI, Redoc) build
their styles in the browser, so those two pages alone may use inline styles and Redoc's
search worker; their scripts still come from the portal's own static files.
"""

from collections.abc import Callable

from django.conf import settings
from django.http import HttpRequest, HttpResponse

HEADER = "Content-Security-Policy"

BASE = {
    "default-src": "'self'",
    "script-src": "'self'",
    "style-src": "'self'",
    "img-src": "'self' data:",
    "font-src": "'self'",
    "connect-src": "'self'",
    "object-src": "'none'",
    "base-uri": "'self'",
    "form-action": "'self'",
    "frame-ancestors": "'none'",
}
DOCS = BASE | {
    "style-src": "'self' 'unsafe-inline'",
    "worker-src": "'self' blob:",
}
DOCS_PREFIXES = ("/api/docs/", "/api/redoc/")


def render(directives: dict[str, str]) -> str:
    return "; ".join(f"{name} {value}" for name, value in directives.items())


POLICY = render(BASE)
DOCS_POLICY = render(DOCS)


def policy_for(path: str) -> str:
    return DOCS_POLICY if path.startswith(DOCS_PREFIXES) else POLICY


class ContentSecurityPolicyMiddleware:
    def __init__(self, get_response: Callable[[HttpRequest], HttpResponse]) -> None:
        self.get_response = get_response

    def __call__(self, request: HttpRequest) -> HttpResponse:
        response = self.get_response(request)
        if HEADER in response:
            return response
        if settings.DEBUG and response.status_code >= 500:
            return response  # Django's technical error page is all inline
        response[HEADER] = policy_for(request.path_info)
        return response
