"""Who may still log in with a local password: everyone, unless ``PORTAL_PASSWORD_LOGIN``
is off; then only the break-glass admin named in ``PORTAL_BREAK_GLASS_USERNAME``."""

import unicodedata
from typing import Any

from django.conf import settings
from django.utils.translation import gettext as _

from portal.sso import config


def _name(username: Any) -> str:
    # As Django's login form reads a username (NFKC), without surrounding space.
    return unicodedata.normalize("NFKC", str(username or "")).strip()


def allowed(username: Any) -> bool:
    """Whether a password login as ``username`` may be tried at all."""
    if settings.PORTAL_PASSWORD_LOGIN:
        return True
    glass = _name(settings.PORTAL_BREAK_GLASS_USERNAME)
    return bool(glass) and _name(username) == glass


def refusal() -> str:
    """What a person who may not use a password reads, in the active language."""
    name = config.sign_in_name()
    if name:
        return _("Password login is switched off. Sign in with %(name)s instead.") % {"name": name}
    return _("Password login is switched off. Ask an administrator how to sign in.")
