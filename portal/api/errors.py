"""Every API failure as one JSON shape a program can act on.

``{"code": ..., "detail": ...}`` always; ``"errors": {field: [messages]}`` for every
400 (``non_field_errors`` when no one field is at fault); ``"field"`` and ``"figures"``
for a rule refusal (409) that came from one input and carries its numbers, and
``"field"`` for a 404 whose missing object the body named.

Which status: 400 when the request does not fit the schema (a type, a length, a format,
a range, a field missing); 404 when what it names does not exist or is not the caller's
to see, in the path or in the body; 409 when it fits but a rule refuses it (its code
names the rule). Codes are
stable; messages are translated. A service out of reach (the database restarting) is
a 503 ``unavailable`` with ``Retry-After``, never a server error.
"""

import logging
from typing import Any

from django.conf import settings
from django.core.exceptions import PermissionDenied as DjangoPermissionDenied
from django.http import Http404
from django.utils.translation import gettext as _
from rest_framework import exceptions
from rest_framework.response import Response
from rest_framework.views import set_rollback

from portal.errors import UNAVAILABLE_DETAIL, DomainError, unavailable

logger = logging.getLogger(__name__)


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


def _codes(detail: Any) -> set[str]:
    """The codes of every message in DRF's ErrorDetail tree."""
    if isinstance(detail, dict):
        return set().union(*(_codes(value) for value in detail.values()))
    if isinstance(detail, list):
        return set().union(*(_codes(value) for value in detail))
    return {getattr(detail, "code", None) or "invalid"}


def _missing(exc: exceptions.ValidationError) -> str | None:
    """The field of a body whose only fault is that it names rows that do not exist (or
    that the caller cannot see): a 404 naming the field, as for an object in the path;
    the schema cannot say which ids exist. None when anything else is wrong too."""
    if not isinstance(exc.detail, dict) or _codes(exc.detail) != {"does_not_exist"}:
        return None
    return next(iter(exc.detail))


def api_exception_handler(exc: Exception, context: dict[str, Any]) -> Response | None:
    headers: dict[str, str] = {}
    if unavailable(exc):
        logger.warning("Answered 503: %s: %s", type(exc).__name__, exc)
        return Response(
            {"code": "unavailable", "detail": str(UNAVAILABLE_DETAIL)},
            status=503,
            headers={"Retry-After": str(settings.PORTAL_RETRY_AFTER_SECONDS)},
        )
    if isinstance(exc, DomainError):
        set_rollback()
        body: dict[str, Any] = exc.as_dict()
        if exc.status == 400:
            body["errors"] = {exc.field or "non_field_errors": [exc.message]}
        return Response(body, status=exc.status)
    if isinstance(exc, Http404):
        exc = exceptions.NotFound()
    elif isinstance(exc, DjangoPermissionDenied):
        exc = exceptions.PermissionDenied()
    if not isinstance(exc, exceptions.APIException):
        return None  # a bug: Django's 500 page, and the error is logged
    set_rollback()
    if isinstance(exc, exceptions.ValidationError) and (field := _missing(exc)):
        body = {
            "code": "not_found",
            "detail": _("The %(field)s given does not exist, or is not yours to see.")
            % {"field": field},
            "field": field,
        }
        return Response(body, status=404)
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
    if exc.status_code == 400:  # a body that is not JSON, say: every 400 names its errors
        body["errors"] = {"non_field_errors": [body["detail"]]}
    return Response(body, status=exc.status_code, headers=headers)
