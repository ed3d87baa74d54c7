"""Authentication backends: the OpenID Connect callback's, and passwords with the switch.

``OidcBackend`` is mozilla-django-oidc's backend, which exchanges the code (with the PKCE
verifier) at the token endpoint and checks the ID token's RS256 signature against the
provider's published keys (its ``jwks_uri``) and its nonce against the one this session
sent. To that it adds the issuer and audience checks, takes its settings from the
provider configured now (``portal.sso.config``), finds the person by issuer and subject
(never by a name or an address someone could choose), refuses an inactive account, and
sets the person's roles from their groups (``portal.sso.roles``), all in one transaction:
a refused login writes nothing.
"""

import re
from typing import Any

from django.contrib.auth import get_user_model
from django.core.exceptions import PermissionDenied, SuspiciousOperation
from django.db import transaction
from django.http import HttpRequest
from django.utils import timezone
from mozilla_django_oidc.auth import OIDCAuthenticationBackend
from mozilla_django_oidc.utils import import_from_settings

from portal.login_throttle import ThrottledModelBackend
from portal.sso import config, password_login, roles
from portal.sso.models import Identity

USERNAME_UNSAFE = re.compile(r"[^\w.@+-]")


class SignInRefused(Exception):
    """A callback that checked out but may not sign in: ``reason`` says why
    (``inactive``, ``not_configured``, ``claims``)."""

    def __init__(self, reason: str) -> None:
        super().__init__(reason)
        self.reason = reason


class OidcBackend(OIDCAuthenticationBackend):
    def __init__(self, *args: Any, **kwargs: Any) -> None:
        # Not the library's: it reads the provider from the settings at import; ours is
        # read per login, so the admin's page takes effect at once.
        self.UserModel = get_user_model()
        self.provider: config.Provider | None = None

    def get_settings(self, attr: str, *args: Any) -> Any:
        if attr == "OIDC_RP_SCOPES" and self.provider is not None:
            return self.provider.scopes
        return import_from_settings(attr, *args)

    def authenticate(self, request: HttpRequest | None, **kwargs: Any) -> Any:
        if request is None or "nonce" not in kwargs:
            return None  # only the callback view passes a nonce: a password login
        self.provider = config.current()
        if self.provider is None:
            raise SignInRefused("not_configured")
        found = config.endpoints(self.provider)
        self.OIDC_OP_TOKEN_ENDPOINT = found.token
        self.OIDC_OP_USER_ENDPOINT = found.userinfo
        self.OIDC_OP_JWKS_ENDPOINT = found.jwks
        self.OIDC_RP_CLIENT_ID = self.provider.client_id
        self.OIDC_RP_CLIENT_SECRET = self.provider.client_secret
        self.OIDC_RP_SIGN_ALGO = "RS256"
        self.OIDC_RP_IDP_SIGN_KEY = None
        return super().authenticate(request, **kwargs)

    def verify_token(self, token: str, **kwargs: Any) -> dict[str, Any]:
        """The library's checks (signature against the provider's keys, nonce), then the
        token's issuer and audience (the library leaves those to us)."""
        payload = super().verify_token(token, **kwargs)
        audience = payload.get("aud")
        audiences = audience if isinstance(audience, list) else [audience]
        if str(payload.get("iss", "")).rstrip("/") != self.provider.issuer:
            raise SuspiciousOperation("The ID token was issued by another issuer.")
        if self.provider.client_id not in audiences:
            raise SuspiciousOperation("The ID token is meant for another client.")
        if not payload.get("sub"):
            raise SuspiciousOperation("The ID token names no subject.")
        return payload

    def get_or_create_user(self, access_token: str, id_token: str, payload: dict) -> Any:
        info = self.get_userinfo(access_token, id_token, payload)
        if not isinstance(info, dict) or info.get("sub") != payload["sub"]:
            raise SignInRefused("claims")
        claims = {**info, **payload}
        groups = _groups(claims.get(self.provider.groups_claim))
        with transaction.atomic():
            identity = (
                Identity.objects.select_for_update()
                .select_related("user")
                .filter(issuer=self.provider.issuer, subject=payload["sub"])
                .first()
            )
            if identity is not None and not identity.user.is_active:
                raise SignInRefused("inactive")
            now = timezone.now()
            if identity is None:
                user = self.UserModel.objects.create_user(
                    _free_username(claims, self.UserModel), email=claims.get("email") or ""
                )
                identity = Identity(user=user, issuer=self.provider.issuer, created_at=now)
                identity.subject = payload["sub"]
            user = self._update_user(identity.user, claims)
            identity.groups, identity.last_login_at = groups, now
            identity.save()
            roles.sync_roles(user=user, groups=groups, now=now)
        return user

    def _update_user(self, user: Any, claims: dict) -> Any:
        """The person's e-mail address and name as the provider says them now."""
        fields = {
            "email": claims.get("email"),
            "first_name": claims.get("given_name"),
            "last_name": claims.get("family_name"),
        }
        changed = []
        for name, value in fields.items():
            if isinstance(value, str) and value and getattr(user, name) != value[:150]:
                setattr(user, name, value[:150])
                changed.append(name)
        if changed:
            user.save(update_fields=changed)
        return user

    def get_user(self, user_id: Any) -> Any:
        """A session's user, none when deactivated (the library's returns them anyway)."""
        user = super().get_user(user_id)
        return user if user is not None and user.is_active else None


def _groups(value: Any) -> list[str]:
    """The groups claim as a sorted list of names; a single name as one; else none."""
    if isinstance(value, str):
        value = [value]
    if not isinstance(value, list):
        return []
    return sorted({item for item in value if isinstance(item, str) and 0 < len(item) <= 200})


def _free_username(claims: dict, model: Any) -> str:
    """A username for a new person: their preferred one (or their address's local part),
    with -2, -3 … when it is taken; never an existing account's, which a login must not
    take over."""
    wanted = claims.get("preferred_username") or str(claims.get("email") or "").split("@")[0]
    base = USERNAME_UNSAFE.sub("-", str(wanted or ""))[:140].strip("-") or "user"
    name, number = base, 1
    while model.objects.filter(username__iexact=name).exists():
        number += 1
        name = f"{base}-{number}"
    return name


class PasswordBackend(ThrottledModelBackend):
    """Passwords, throttled; when ``PORTAL_PASSWORD_LOGIN`` is off, only the break-glass
    admin's (``portal.sso.password_login``)."""

    def authenticate(self, request: HttpRequest | None, username: Any = None, **kwargs: Any):
        if kwargs.get("password") is None:
            return None  # not a password login (the OpenID Connect callback)
        name = username if username is not None else kwargs.get("username", "")
        if not password_login.allowed(name):
            raise PermissionDenied
        return super().authenticate(request, username=username, **kwargs)
