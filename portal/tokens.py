"""Personal API tokens: create (shown once), authenticate, revoke.

A token is ``gpp_`` + 40 random URL-safe characters. The database keeps its SHA-256
digest and its first characters (to tell tokens apart in a list), never the token.
"""

import hashlib
import secrets
from datetime import datetime, timedelta
from typing import Any

from django.db import transaction
from django.utils import timezone
from django.utils.translation import gettext as _

from portal import audit
from portal.errors import Conflict, InvalidInput, InvalidTransition
from portal.models import ApiToken
from portal.text import plain_text

PREFIX = "gpp_"
MAX_DAYS = 366
# Writing last_used_at on every request would make each API call a write.
LAST_USED_RESOLUTION = timedelta(minutes=1)


def digest(token: str) -> str:
    return hashlib.sha256(token.encode()).hexdigest()


@transaction.atomic
def create_token(
    *,
    actor: Any,
    name: str,
    expires_at: datetime,
    now: datetime | None = None,
    source: str = "web",
) -> tuple[ApiToken, str]:
    """Make a token for ``actor``; returns the row and the token, which is never stored."""
    now = now or timezone.now()
    name = plain_text(name, field="name", max_length=80, label=_("Name"))
    if not name:
        raise InvalidInput(_("Give the token a name of 1 to 80 characters."), field="name")
    if expires_at <= now:
        raise Conflict(
            _("The expiry must be in the future."), code="expiry_past", field="expires_at"
        )
    if expires_at > now + timedelta(days=MAX_DAYS):
        raise Conflict(
            _("A token lasts at most %(days)s days.") % {"days": MAX_DAYS},
            code="expiry_too_far",
            field="expires_at",
        )
    if ApiToken.objects.filter(user=actor, name=name, revoked_at__isnull=True).exists():
        raise Conflict(
            _("You already have a token with this name."), code="name_taken", field="name"
        )
    ApiToken.objects.filter(user=actor, name=name, revoked_at__isnull=False).delete()
    token = PREFIX + secrets.token_urlsafe(30)
    row = ApiToken.objects.create(
        user=actor,
        name=name,
        digest=digest(token),
        prefix=token[: len(PREFIX) + 4],
        created_at=now,
        expires_at=expires_at,
    )
    audit.record(
        actor=actor,
        verb="token.created",
        obj=row,
        source=source,
        after={"name": name, "expires_at": expires_at},
        at=now,
    )
    return row, token


@transaction.atomic
def revoke_token(
    *, actor: Any, token: ApiToken, now: datetime | None = None, source: str = "web"
) -> ApiToken:
    now = now or timezone.now()
    locked = ApiToken.objects.select_for_update().get(pk=token.pk)
    if locked.revoked_at is not None:
        raise InvalidTransition(_("This token is already revoked."), code="revoked")
    locked.revoked_at = now
    locked.save(update_fields=["revoked_at"])
    audit.record(actor=actor, verb="token.revoked", obj=locked, source=source, at=now)
    return locked


def authenticate(token: str, *, now: datetime | None = None) -> ApiToken | None:
    """The usable token row for ``token`` (with its user), or None."""
    if not token.startswith(PREFIX) or len(token) > 100:
        return None
    now = now or timezone.now()
    row = (
        ApiToken.objects.select_related("user")
        .filter(digest=digest(token), revoked_at__isnull=True, expires_at__gt=now)
        .first()
    )
    if row is None or not row.user.is_active:
        return None
    if row.last_used_at is None or now - row.last_used_at >= LAST_USED_RESOLUTION:
        ApiToken.objects.filter(pk=row.pk).update(last_used_at=now)
        row.last_used_at = now
    return row
