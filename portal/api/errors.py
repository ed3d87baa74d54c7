"""Every API failure as one JSON shape a program can act on.

``{"code": ..., "detail": ...}`` always; ``"errors": {field: [messages]}`` for a 400
that names fields; ``"field"`` and ``"figures"`` for a rule refusal (409) that came
from one input and carries its numbers. Codes are stable; messages are translated.
"""

from typing import Any

from django.core.exceptions import PermissionDenied as DjangoPermissionDenied
from django.http import Http404
from django.utils.translation import gettext as _
from rest_framework import exceptions
from rest_framework.response import Response
from rest_framework.views import set_rollback

from portal.errors import DomainError, InvalidInput


def _flatten(detail: Any) -> Any:
    """DRF's ErrorDetail tree → plain strings, lists and dicts."""
    if isinstance(detail, dict):
        return {str(key): _flatten(value) for key, value in detail.items()}
    if isinstance(detail, list):
        return [_flatten(value) for value in detail]
    return str(detail)


def _field_errors(detail: Any) -> dict[str, Any]:
    flat = _flatten(detail)
    if isinstance(flat, dict):
        return flat
    return {"non_field_errors": flat if isinstance(flat, list) else [flat]}


def api_exception_handler(exc: Exception, context: dict[str, Any]) -> Response | None:
    headers: dict[str, str] = {}
    if isinstance(exc, DomainError):
        set_rollback()
        body: dict[str, Any] = exc.as_dict()
        if isinstance(exc, InvalidInput) and exc.field:
            body["errors"] = {exc.field: [exc.message]}
        return Response(body, status=exc.status)
    if isinstance(exc, Http404):
        exc = exceptions.NotFound()
    elif isinstance(exc, DjangoPermissionDenied):
        exc = exceptions.PermissionDenied()
    if not isinstance(exc, exceptions.APIException):
        return None  # a bug: Django's 500 page, and the error is logged
    set_rollback()
    if isinstance(exc, exceptions.ValidationError):
        body = {
            "code": "invalid",
            "detail": _("Some fields are not valid."),
            "errors": _field_errors(exc.detail),
        }
        return Response(body, status=exc.status_code)
    if isinstance(exc, exceptions.Throttled) and exc.wait is not None:
        headers["Retry-After"] = str(max(int(exc.wait + 0.999), 1))
    if getattr(exc, "auth_header", None):
        headers["WWW-Authenticate"] = exc.auth_header
    code = exc.get_codes()
    detail = _flatten(exc.detail)
    body = {
        "code": code if isinstance(code, str) else exc.default_code,
        "detail": detail if isinstance(detail, str) else str(exc.default_detail),
    }
    return Response(body, status=exc.status_code, headers=headers)
