"""The language each person reads the portal in, kept so that what is sent to them while
they are away (mail) is written in it.

The language they pick in the user menu is kept, and opens the portal in it at their next
login on any browser. Until they pick one, the language their browser asked for at their
last login is kept. A person with none on record reads the site's default
(``LANGUAGE_CODE``).
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


def remember(*, user: Any, language: str, chosen: bool) -> None:
    """Keep ``language`` as the one ``user`` reads (``chosen``: picked by them); an
    unknown code is ignored, and a language taken from a browser never replaces one the
    person picked."""
    code = supported(language)
    if code is None or not getattr(user, "is_authenticated", False):
        return
    if chosen:
        LanguagePreference.objects.update_or_create(
            user=user, defaults={"language": code, "chosen": True}
        )
    else:
        kept, created = LanguagePreference.objects.get_or_create(
            user=user, defaults={"language": code}
        )
        if not created and not kept.chosen and kept.language != code:
            LanguagePreference.objects.filter(pk=kept.pk, chosen=False).update(language=code)


def preferred(users: Iterable[Any]) -> dict[int, str]:
    """Each user's language by id (one query), the site's default for those with none."""
    ids = [user.pk for user in users]
    kept = dict(
        LanguagePreference.objects.filter(user_id__in=ids).values_list("user_id", "language")
    )
    return {pk: supported(kept.get(pk, "")) or settings.LANGUAGE_CODE for pk in ids}


def after_login(request: HttpRequest, response: HttpResponse) -> HttpResponse:
    """At login: the portal opens in the language the person picked (on another browser
    too), unless this browser has one of its own choosing; until they pick one, the one
    their browser asked for is kept."""
    user = request.user
    picked = (
        LanguagePreference.objects.filter(user=user, chosen=True)
        .values_list("language", flat=True)
        .first()
    )
    if picked is None:
        remember(user=user, language=translation.get_language_from_request(request), chosen=False)
    elif settings.LANGUAGE_COOKIE_NAME not in request.COOKIES:
        response.set_cookie(
            settings.LANGUAGE_COOKIE_NAME,
            picked,
            max_age=settings.LANGUAGE_COOKIE_AGE,
            path=settings.LANGUAGE_COOKIE_PATH,
            domain=settings.LANGUAGE_COOKIE_DOMAIN,
            secure=settings.LANGUAGE_COOKIE_SECURE,
            httponly=settings.LANGUAGE_COOKIE_HTTPONLY,
            samesite=settings.LANGUAGE_COOKIE_SAMESITE,
        )
    return response
