"""Log lines for a log collector: each request's id, and one JSON object a line.

``RequestIdMiddleware`` takes the id a proxy sent in ``X-Request-ID`` (when it is a short
plain token) or makes one, keeps it for the request's log lines and sends it back in the
answer's ``X-Request-ID``. ``RequestIdFilter`` puts it on every record (``-`` outside a
request). ``JsonFormatter`` (``PORTAL_LOG_FORMAT=json``) writes the time, level, logger,
message, request id and any traceback, and nothing else from the record: extras such as the
request object Django attaches to its error lines (headers, cookies) are never written.
"""

import json
import logging
import re
import uuid
from collections.abc import Callable
from contextvars import ContextVar
from datetime import UTC, datetime

from django.core.signals import request_finished
from django.http import HttpRequest, HttpResponse

HEADER = "X-Request-ID"
# What a proxy's id may look like; anything else is replaced (no injection into logs).
ACCEPTED = re.compile(r"[A-Za-z0-9._:-]{1,64}")
_request_id: ContextVar[str | None] = ContextVar("request_id", default=None)


def current_request_id() -> str | None:
    return _request_id.get()


class RequestIdMiddleware:
    def __init__(self, get_response: Callable[[HttpRequest], HttpResponse]) -> None:
        self.get_response = get_response

    def __call__(self, request: HttpRequest) -> HttpResponse:
        given = request.headers.get(HEADER, "")
        request_id = given if ACCEPTED.fullmatch(given) else uuid.uuid4().hex
        # Kept until the request is finished, not only until this middleware returns:
        # Django logs a 4xx or 5xx answer ("django.request") after the middleware.
        _request_id.set(request_id)
        response = self.get_response(request)
        response[HEADER] = request_id
        return response


def _forget_request_id(**_: object) -> None:
    _request_id.set(None)


request_finished.connect(_forget_request_id, dispatch_uid="portal.logs.forget_request_id")


class RequestIdFilter(logging.Filter):
    def filter(self, record: logging.LogRecord) -> bool:
        record.request_id = _request_id.get() or "-"
        return True


class JsonFormatter(logging.Formatter):
    def format(self, record: logging.LogRecord) -> str:
        line = {
            "time": datetime.fromtimestamp(record.created, tz=UTC).isoformat(
                timespec="milliseconds"
            ),
            "level": record.levelname,
            "logger": record.name,
            "message": record.getMessage(),
        }
        request_id = getattr(record, "request_id", None) or _request_id.get()
        if request_id and request_id != "-":
            line["request_id"] = request_id
        if record.exc_info:
            line["exception"] = self.formatException(record.exc_info)
        return json.dumps(line, ensure_ascii=False)
