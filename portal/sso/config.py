"""Which OpenID Connect provider people sign in with, and where its endpoints are.

The settings (``PORTAL_OIDC_ISSUER`` and the rest) win when they name an issuer; else the
admin's ``IdentityProvider`` row, when it is enabled; else there is none, and the login
page offers passwords only. Endpoints come from the issuer's discovery document
(``/.well-known/openid-configuration``), kept in the cache for a while.
"""

from dataclasses import dataclass

import requests
from django.conf import settings
from django.core.cache import cache

from portal.sso.models import IdentityProvider

DISCOVERY_PATH = "/.well-known/openid-configuration"


class ProviderUnreachable(Exception):
    """The provider's discovery document could not be read (down, or not a provider)."""


@dataclass(frozen=True)
class Provider:
    name: str
    issuer: str
    client_id: str
    client_secret: str
    scopes: str
    groups_claim: str

    def __repr__(self) -> str:  # never the secret, in a traceback or a log line
        return f"Provider(name={self.name!r}, issuer={self.issuer!r})"


@dataclass(frozen=True)
class Endpoints:
    authorization: str
    token: str
    userinfo: str
    jwks: str


def current() -> Provider | None:
    """The provider configured now, or None."""
    if settings.PORTAL_OIDC_ISSUER:
        return Provider(
            name=settings.PORTAL_OIDC_NAME,
            issuer=settings.PORTAL_OIDC_ISSUER,
            client_id=settings.PORTAL_OIDC_CLIENT_ID,
            client_secret=settings.PORTAL_OIDC_CLIENT_SECRET,
            scopes=settings.PORTAL_OIDC_SCOPES,
            groups_claim=settings.PORTAL_OIDC_GROUPS_CLAIM,
        )
    row = IdentityProvider.objects.filter(pk=IdentityProvider.ONLY, enabled=True).first()
    if row is None or not row.has_client_secret:
        return None
    return Provider(
        name=row.name,
        issuer=row.issuer.rstrip("/"),
        client_id=row.client_id,
        client_secret=row.client_secret(),
        scopes=row.scopes,
        groups_claim=row.groups_claim,
    )


def sign_in_name() -> str:
    """The provider's name for the login page's button, or "" when there is none."""
    if settings.PORTAL_OIDC_ISSUER:
        return settings.PORTAL_OIDC_NAME
    row = IdentityProvider.objects.filter(pk=IdentityProvider.ONLY, enabled=True).first()
    return row.name if row is not None and row.has_client_secret else ""


def endpoints(provider: Provider) -> Endpoints:
    """The provider's endpoints from its discovery document (cached); ProviderUnreachable
    when it cannot be read or does not describe this issuer."""
    key = f"sso:discovery:{provider.issuer}"
    found = cache.get(key)
    if found is None:
        try:
            answer = requests.get(
                provider.issuer + DISCOVERY_PATH, timeout=settings.PORTAL_OIDC_TIMEOUT_SECONDS
            )
            answer.raise_for_status()
            document = answer.json()
            found = {
                "authorization": document["authorization_endpoint"],
                "token": document["token_endpoint"],
                "userinfo": document["userinfo_endpoint"],
                "jwks": document["jwks_uri"],
            }
            if document["issuer"].rstrip("/") != provider.issuer:
                raise ValueError("the discovery document names another issuer")
        except (requests.RequestException, ValueError, KeyError, TypeError) as error:
            raise ProviderUnreachable(str(error)) from None
        cache.set(key, found, settings.PORTAL_OIDC_DISCOVERY_CACHE_SECONDS)
    return Endpoints(**found)
