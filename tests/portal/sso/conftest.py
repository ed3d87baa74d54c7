"""A real OpenID Connect provider (tests/oidc_provider.py) for the module, the portal
pointed at it through the settings, and the redirect flow driven with the test client."""

from urllib.parse import urlsplit

import pytest
from django.core.cache import cache

from tests.oidc_provider import OidcProvider

CLIENT_ID = "gpu-portal"
CLIENT_SECRET = "test-client-secret-7f3a"


@pytest.fixture(scope="session")
def oidc_process():
    provider = OidcProvider()
    yield provider
    provider.stop()


@pytest.fixture
def idp(oidc_process, settings):
    """The provider, reset: no users, no faults; the portal configured for it."""
    oidc_process.control(
        users={},
        client_id=CLIENT_ID,
        client_secret=CLIENT_SECRET,
        tamper=False,
        wrong_nonce=False,
        wrong_key=False,
    )
    settings.PORTAL_OIDC_ISSUER = oidc_process.issuer
    settings.PORTAL_OIDC_CLIENT_ID = CLIENT_ID
    settings.PORTAL_OIDC_CLIENT_SECRET = CLIENT_SECRET
    settings.PORTAL_OIDC_NAME = "Test IdP"
    settings.PORTAL_OIDC_ADMIN_GROUPS = ["portal-admins"]
    settings.PORTAL_OIDC_FINANCE_GROUPS = []
    cache.delete(f"sso:discovery:{oidc_process.issuer}")
    return oidc_process


def start(client, next_url: str = "") -> str:
    """Press "Sign in with …": the provider's authorization URL the portal sends us to."""
    answer = client.get("/sso/sign-in/" + (f"?next={next_url}" if next_url else ""))
    assert answer.status_code == 302, answer.status_code
    return answer["Location"]


def callback(client, location: str):
    """Follow the provider's redirect back to the portal's callback."""
    url = urlsplit(location)
    assert url.path == "/sso/callback/", location
    return client.get(f"{url.path}?{url.query}")


def sign_in(client, idp, username: str):
    return callback(client, idp.log_in(start(client), username))
