"""Service tokens: a project's API tokens for pipelines, not tied to a person.

A manager of the project (or an admin) makes one with a name, its scopes and an expiry; it
is ``gps_`` + 40 random URL-safe characters, shown once. The database keeps its SHA-256
and its first characters, never the token. It is sent as a personal token is
(``Authorization: Bearer gps_…``, ``portal.api.auth``).

It acts through its own account: a user with no password whom the login backend refuses
(so it never has a web session), who belongs to no project and is no person in any list
or picker (``people()``). While the token is usable, ``portal.access.roles`` gives that
account an engineer's reach in the token's project and nowhere else; its scopes then say
which API calls it may make at all (``scope_needed``, checked on every API view by
``portal.api.auth.ServiceTokenScopes``). What it does is audited as its account, which the
audit log names "service token <name> (<project>)" (``actor_name``). Revoking it, or
its expiry, stops it at the next request.
"""

import hashlib
import secrets
from datetime import datetime, timedelta
from typing import Any

from django.contrib.auth import get_user_model
from django.db import transaction
from django.db.models import QuerySet
from django.utils import timezone
from django.utils.translation import gettext as _
from django.utils.translation import gettext_lazy

from portal import access, audit, tokens
from portal.errors import Conflict, InvalidInput, InvalidTransition, NotPermitted
from portal.models import Project, ServiceToken
from portal.text import plain_text

PREFIX = "gps_"
MAX_DAYS = tokens.MAX_DAYS  # no longer than a personal token

Scope = ServiceToken.Scope

# What each scope lets a token do, as the pages and the docs say it.
SCOPE_WORDS = {
    Scope.READ: gettext_lazy("Read everything its project may see (any GET of the API)."),
    Scope.LEASES: gettext_lazy(
        "Ask for GPUs in its project; extend, end and cancel the leases it asked for; add "
        "and remove the SSH keys those leases install."
    ),
}

# The API's writes a scope allows: (the resource's name in the router, its action). Any
# other write is refused to every service token, whatever its scopes.
WRITES: dict[tuple[str, str], str] = {
    ("lease", "create"): Scope.LEASES,
    ("lease", "cancel"): Scope.LEASES,
    ("lease", "extend"): Scope.LEASES,
    ("lease", "end"): Scope.LEASES,
    ("ssh-key", "create"): Scope.LEASES,
    ("ssh-key", "destroy"): Scope.LEASES,
}
# Resources a service token never uses, not even to read: tokens are made by people.
NEVER = frozenset({"token", "project-service-token"})
SAFE_METHODS = frozenset({"GET", "HEAD", "OPTIONS"})


def scope_needed(method: str, resource: str | None, action: str | None) -> str | None:
    """The scope an API call needs: ``read`` for a read, the scope ``WRITES`` names for a
    write; None when no service token may make the call at all."""
    if resource in NEVER:
        return None
    if method in SAFE_METHODS:
        return Scope.READ
    return WRITES.get((resource or "", action or ""))


def digest(token: str) -> str:
    return hashlib.sha256(token.encode()).hexdigest()


def _scopes(scopes: Any) -> list[str]:
    """The scopes asked for, each known, in the order of ``Scope``; at least one."""
    asked = set(scopes) if isinstance(scopes, list | tuple | set | frozenset) else set()
    unknown = asked - set(Scope.values)
    if unknown or not asked:
        raise InvalidInput(
            _("Choose one or more scopes among: %(scopes)s.") % {"scopes": ", ".join(Scope.values)},
            field="scopes",
        )
    return [scope for scope in Scope.values if scope in asked]


def _account_for(project: Project, name: str) -> Any:
    """The token's own user: no password (so no login), named for the project."""
    username = f"svc.{project.slug}.{secrets.token_hex(4)}"
    return get_user_model().objects.create_user(username=username, first_name=name[:150])


@transaction.atomic
def create_service_token(
    *,
    actor: Any,
    project: Project,
    name: str,
    scopes: Any,
    expires_at: datetime,
    now: datetime | None = None,
    source: str = "web",
) -> tuple[ServiceToken, str]:
    """Make a token for ``project`` (its managers and admins); returns the row and the
    token, which is never stored."""
    if not access.can_manage(actor, project):
        raise NotPermitted(_("Only a manager of the project makes its service tokens."))
    now = now or timezone.now()
    name = plain_text(name, field="name", max_length=80, label=_("Name"))
    if not name:
        raise InvalidInput(_("Give the token a name of 1 to 80 characters."), field="name")
    chosen = _scopes(scopes)
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
    # Locks the project's row: two makers of one name wait for each other.
    Project.objects.select_for_update().filter(pk=project.pk).first()
    if ServiceToken.objects.filter(project=project, name=name, revoked_at__isnull=True).exists():
        raise Conflict(
            _("The project already has a service token with this name; revoke it first."),
            code="name_taken",
            field="name",
        )
    token = PREFIX + secrets.token_urlsafe(30)
    row = ServiceToken.objects.create(
        project=project,
        account=_account_for(project, name),
        name=name,
        scopes=chosen,
        digest=digest(token),
        prefix=token[: len(PREFIX) + 4],
        created_by=actor,
        created_at=now,
        expires_at=expires_at,
    )
    audit.record(
        actor=actor,
        verb="service_token.created",
        obj=row,
        project=project,
        source=source,
        after={"name": name, "scopes": chosen, "expires_at": expires_at},
        at=now,
    )
    return row, token


@transaction.atomic
def revoke_service_token(
    *, actor: Any, token: ServiceToken, now: datetime | None = None, source: str = "web"
) -> ServiceToken:
    """Stop the token at once: its next request is refused, and its account is closed."""
    if not access.can_manage(actor, token.project_id):
        raise NotPermitted(_("Only a manager of the project revokes its service tokens."))
    now = now or timezone.now()
    locked = ServiceToken.objects.select_for_update().select_related("account").get(pk=token.pk)
    if locked.revoked_at is not None:
        raise InvalidTransition(_("This token is already revoked."), code="revoked")
    locked.revoked_at = now
    locked.save(update_fields=["revoked_at"])
    locked.account.is_active = False
    locked.account.save(update_fields=["is_active"])
    audit.record(
        actor=actor,
        verb="service_token.revoked",
        obj=locked,
        project=locked.project_id,
        source=source,
        before={"name": locked.name},
        at=now,
    )
    return locked


def authenticate(token: str, *, now: datetime | None = None) -> ServiceToken | None:
    """The usable token row for ``token`` (with its account and project), or None."""
    if not token.startswith(PREFIX) or len(token) > 100:
        return None
    now = now or timezone.now()
    row = (
        ServiceToken.objects.select_related("account", "project")
        .filter(digest=digest(token), revoked_at__isnull=True, expires_at__gt=now)
        .first()
    )
    if row is None or not row.account.is_active or not row.project.is_active:
        return None
    if row.last_used_at is None or now - row.last_used_at >= tokens.LAST_USED_RESOLUTION:
        ServiceToken.objects.filter(pk=row.pk).update(last_used_at=now)
        row.last_used_at = now
    return row


# --- Its account among people ------------------------------------------------------------


def token_of(user: Any) -> ServiceToken | None:
    """The service token whose account ``user`` is, or None for a person. Reads the
    database unless the user was read with ``select_related("service_token")``."""
    if user is None or not getattr(user, "pk", None):
        return None
    # The reverse one-to-one's "no such row" is an AttributeError too.
    return getattr(user, "service_token", None)


def is_service_account(user: Any) -> bool:
    return token_of(user) is not None


def people() -> QuerySet[Any]:
    """Every user who is a person: what lists and pickers of people offer."""
    return get_user_model().objects.filter(service_token__isnull=True)


def actor_name(user: Any) -> str:
    """Who did something, as the audit log says it: a person's username, or
    "service token ci-nightly (Alpha)"."""
    token = token_of(user)
    if token is None:
        return user.get_username()
    return _("service token %(name)s (%(project)s)") % {
        "name": token.name,
        "project": token.project.name,
    }
