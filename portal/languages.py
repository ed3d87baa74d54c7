"""The language each person reads the portal in, kept so that what is sent to them while
they are away (mail) is written in it.

It is remembered when they pick a language in the user menu, and from the language their
browser asked for when they first log in; a person with none on record reads the site's
default (``LANGUAGE_CODE``).
"""

from collections.abc import Iterable
from typing import Any

from django.conf import settings
from django.http import HttpRequest, HttpResponse
from django.utils import translation

from portal.models import LanguagePreference


def supported(language: str) -> str | None:
    """``language`` as one of ``LANGUAGES``' codes ("zh-Hans" → "zh-hans"), or None."""
    codes = {code.lower(): code for code, _name in settings.LANGUAGES}
    return codes.get((language or "").strip().lower())


def remember(*, user: Any, language: str) -> None:
    """Keep ``language`` as the one ``user`` reads; an unknown code is ignored."""
    code = supported(language)
    if code is None or not getattr(user, "is_authenticated", False):
        return
    LanguagePreference.objects.update_or_create(user=user, defaults={"language": code})


def preferred(users: Iterable[Any]) -> dict[int, str]:
    """Each user's language by id (one query), the site's default for those with none."""
    ids = [user.pk for user in users]
    kept = dict(
        LanguagePreference.objects.filter(user_id__in=ids).values_list("user_id", "language")
    )
    return {pk: supported(kept.get(pk, "")) or settings.LANGUAGE_CODE for pk in ids}


def after_login(request: HttpRequest, response: HttpResponse) -> HttpResponse:
    """At login: the portal opens in the language the person chose before (on another
    browser too), unless this browser has chosen one; a person with none on record keeps
    the one their browser asked for."""
    user = request.user
    kept = LanguagePreference.objects.filter(user=user).values_list("language", flat=True).first()
    if kept is None:
        remember(user=user, language=translation.get_language_from_request(request))
    elif settings.LANGUAGE_COOKIE_NAME not in request.COOKIES:
        response.set_cookie(
            settings.LANGUAGE_COOKIE_NAME,
            kept,
            max_age=settings.LANGUAGE_COOKIE_AGE,
            path=settings.LANGUAGE_COOKIE_PATH,
            domain=settings.LANGUAGE_COOKIE_DOMAIN,
            secure=settings.LANGUAGE_COOKIE_SECURE,
            httponly=settings.LANGUAGE_COOKIE_HTTPONLY,
            samesite=settings.LANGUAGE_COOKIE_SAMESITE,
        )
    return response
