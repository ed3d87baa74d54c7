"""The operator's endpoints: ``/healthz``, ``/readyz`` and ``/metrics``.

For probes and scrapers, not people: no login, no session, no CSRF (GET and HEAD only),
never cached, JSON or Prometheus text; the words are an operator's, not translated (like
log lines). Who may read ``/metrics`` is decided in ``portal.access``.
"""

from django.http import HttpRequest, HttpResponse, JsonResponse
from django.views.decorators.cache import never_cache
from django.views.decorators.http import require_safe
from prometheus_client import CONTENT_TYPE_LATEST

from portal import access, health, metrics


@never_cache
@require_safe
def healthz(request: HttpRequest) -> JsonResponse:
    """The process is up and serves requests; nothing else is asked (no query)."""
    return JsonResponse({"status": "ok"})


@never_cache
@require_safe
def readyz(request: HttpRequest) -> JsonResponse:
    """200 when every check passes, else 503 naming the checks that failed and why. A
    fixed number of queries (one per check that reads the database) and one broker ping
    with a short timeout."""
    checks = health.readiness()
    failed = [check.name for check in checks if not check.ok]
    body = {
        "status": "unready" if failed else "ok",
        "failed": failed,
        "checks": {check.name: {"ok": check.ok, "detail": check.detail} for check in checks},
    }
    return JsonResponse(body, status=503 if failed else 200)


@never_cache
@require_safe
def metrics_view(request: HttpRequest) -> HttpResponse:
    """404 while /metrics is not configured (no token, no address); 403 to a scraper
    neither token nor address lets in."""
    if not access.metrics_open():
        return JsonResponse({"status": "not_found"}, status=404)
    if not access.may_read_metrics(request):
        return JsonResponse({"status": "forbidden"}, status=403)
    return HttpResponse(metrics.exposition(), content_type=CONTENT_TYPE_LATEST)
