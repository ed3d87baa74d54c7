"""One hierarchy of domain errors, mapped to HTTP in one place.

Services raise these; web views, API views and tasks never invent their own.
Each error carries a stable reason code (``over_ceiling``, ``no_capacity`` …)
and, when one input caused it, the name of that field. Its words may be a
``portal.phrases`` text, said in the language active where the error is shown, and kept
as it is where a refusal becomes a lease's reason.
"""

from collections.abc import Callable, Mapping
from typing import Any

from django import forms
from django.contrib import messages
from django.core.exceptions import ValidationError
from django.db import DataError, InterfaceError, OperationalError
from django.http import HttpRequest, HttpResponse, HttpResponseRedirect
from django.shortcuts import render
from django.utils.translation import gettext_lazy as _
from kombu.exceptions import OperationalError as BrokerUnreachable
from redis.exceptions import ConnectionError as RedisConnectionError
from redis.exceptions import TimeoutError as RedisTimeoutError

from portal import phrases
from portal.phrases import Joined, Phrase, Text


class DomainError(Exception):
    status = 409
    default_code = "refused"

    def __init__(
        self,
        message: Text,
        *,
        code: str = "",
        field: str = "",
        figures: dict[str, Any] | None = None,
    ) -> None:
        super().__init__(message)
        # What was said, kept as it is (a phrase is said again in each reader's language).
        self.text: Text = message if isinstance(message, Phrase | Joined) else str(message)
        self.code = code or self.default_code
        self.field = field
        # The numbers behind a refusal (asked, free, ceiling …), for programs to act on.
        self.figures = dict(figures or {})

    @property
    def page_status(self) -> int:
        """The status of a page that shows this refusal on its form."""
        return self.status

    @property
    def message(self) -> str:
        """The words in the active language."""
        return phrases.render(self.text)

    def __str__(self) -> str:
        return self.message

    def as_dict(self) -> dict[str, Any]:
        data: dict[str, Any] = {"code": self.code, "detail": self.message}
        if self.field:
            data["field"] = self.field
        if self.figures:
            data["figures"] = {key: _plain(value) for key, value in self.figures.items()}
        return data


def _plain(value: Any) -> Any:
    return value if isinstance(value, int | float | bool | str | type(None)) else str(value)


class InvalidInput(DomainError):
    """A value breaks a rule that belongs to one field (R1, Q1)."""

    status = 400
    default_code = "invalid"


class NotFound(DomainError):
    """Something the request names by a value of the right shape (a username, say) that
    does not exist or is not the caller's to see: 404, as for an id in the path."""

    status = 404
    default_code = "not_found"


class Conflict(InvalidInput):
    """A value refused on its field although it has the right shape: the portal's state or
    a site rule refuses it (a name another row has, a time already past, a capacity below
    what is committed, a key whose body is not a key). What a schema cannot say, so the
    API answers 409, not 400; to a form it is a field's error like any other."""

    status = 409
    default_code = "conflict"
    page_status = 400  # on a page, a field's error like any other


class QuotaExceeded(DomainError):
    default_code = "over_quota"


class InvalidTransition(DomainError):
    default_code = "invalid_transition"


class NotPermitted(DomainError):
    status = 403
    default_code = "not_permitted"


# A service the portal needs did not answer: the database (down, restarting, a connection
# lost, a lock or statement timeout), or Redis where nothing took its place. Asking again
# later can succeed, so the answer is 503 with Retry-After, never a server error.
UNAVAILABLE: tuple[type[Exception], ...] = (
    OperationalError,
    InterfaceError,
    BrokerUnreachable,
    RedisConnectionError,
    RedisTimeoutError,
)
UNAVAILABLE_DETAIL = _("The portal cannot answer right now. Try again in a moment.")


def unavailable(error: BaseException | None) -> bool:
    """Whether ``error``, or an error that caused it, is a service out of reach."""
    while error is not None:
        if isinstance(error, UNAVAILABLE):
            return True
        error = error.__cause__
    return False


def put_on_form(
    form: forms.BaseForm, error: DomainError, field_of: Mapping[str, str] | None = None
) -> None:
    """A refusal goes on the field it names, so the person sees it where they typed; one
    that names no field of the form is said for the whole form, inside it. ``field_of``
    maps a service's name for a value to the form's (a view's ``FORM_FIELD_OF``).
    The form must have been validated (``is_valid()``)."""
    name = (field_of or {}).get(error.field or "", error.field)
    field = name if name in form.fields else None
    form.add_error(field, ValidationError(error.message, code=error.code))


def form_again(
    request: HttpRequest,
    *,
    page: str,
    partial: str,
    context: dict[str, Any],
    status: int,
) -> HttpResponse:
    """A refused form drawn again with its errors and the values as they were sent: for
    HTMX the partial that holds the form (with 200, since htmx swaps no 4xx answer in),
    otherwise the whole page with the refusal's status."""
    if getattr(request, "htmx", False):
        return render(request, partial, context)
    return render(request, page, context, status=status)


class DomainErrorMiddleware:
    """A domain error that escapes a web view becomes a message, never a traceback."""

    def __init__(self, get_response: Callable[[HttpRequest], HttpResponse]) -> None:
        self.get_response = get_response

    def __call__(self, request: HttpRequest) -> HttpResponse:
        return self.get_response(request)

    def process_exception(self, request: HttpRequest, exc: Exception) -> HttpResponse | None:
        if isinstance(exc, DataError) and "NUL" in str(exc):
            # The last net under portal.text: a text no form or service checked reached
            # PostgreSQL, which refused it (the transaction rolled back: nothing written).
            exc = InvalidInput(_("A value holds a NUL character, which is not allowed."))
        if not isinstance(exc, DomainError):
            return None
        if getattr(request, "htmx", False):
            return render(request, "portal/_error.html", {"error": exc}, status=200)
        messages.error(request, exc.message)
        back = request.headers.get("Referer") or "/"
        if not back.startswith(("/", request.build_absolute_uri("/"))):
            back = "/"
        return HttpResponseRedirect(back)


ERROR_TITLES = {
    400: _("Bad request"),
    403: _("Not permitted"),
    404: _("Not found"),
    409: _("Refused"),
}
