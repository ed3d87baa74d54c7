"""Signing in with OpenID Connect in headless Chromium, through the whole redirect flow to
a real provider in a second process (tests/oidc_provider.py): the first login creates the
person with the roles of their groups, a group change at the provider changes them at
the next login, and a tampered ID token, a wrong nonce and a replayed code are refused
with a page that says why."""

import re
from urllib.parse import parse_qs, urlsplit

import pytest
from django.core.cache import cache

from portal.models import Membership
from portal.sso.models import GroupRole
from tests import factories
from tests.e2e.conftest import screenshot
from tests.oidc_provider import OidcProvider

pytestmark = [pytest.mark.e2e, pytest.mark.django_db(transaction=True)]

CLIENT_ID, CLIENT_SECRET = "gpu-portal", "e2e-client-secret-91b2"


@pytest.fixture
def idp(settings):
    provider = OidcProvider()
    provider.control(client_id=CLIENT_ID, client_secret=CLIENT_SECRET)
    settings.PORTAL_OIDC_ISSUER = provider.issuer
    settings.PORTAL_OIDC_CLIENT_ID = CLIENT_ID
    settings.PORTAL_OIDC_CLIENT_SECRET = CLIENT_SECRET
    settings.PORTAL_OIDC_NAME = "Acme SSO"
    cache.delete(f"sso:discovery:{provider.issuer}")
    yield provider
    provider.stop()


def _roles(username: str) -> dict[str, str]:
    return dict(
        Membership.objects.filter(user__username=username).values_list("project__slug", "role")
    )


def test_signing_in_with_the_identity_provider_in_chromium(live_server, browser, idp):
    from playwright.sync_api import expect

    alpha, beta = factories.project("alpha"), factories.project("beta")
    GroupRole.objects.create(group="ml-team", role="engineer", project=alpha)
    GroupRole.objects.create(group="ml-leads", role="manager", project=beta)
    idp.control(users={"ada": {"groups": ["ml-team"]}})
    callbacks: list[str] = []

    def sign_in(context, username: str):
        page = context.new_page()
        page.set_default_timeout(15_000)
        page.on("request", lambda r: callbacks.append(r.url) if "/sso/callback/" in r.url else None)
        page.goto(f"{live_server.url}/login/")
        page.click("#sso-sign-in")
        expect(page).to_have_url(re.compile(rf"^{re.escape(idp.issuer)}/authorize"))
        page.fill("#idp-username", username)
        page.click("#idp-submit")
        return page

    for width, name in ((1280, "login-sso"), (390, "login-sso-phone")):
        context = browser.new_context(viewport={"width": width, "height": 800})
        page = context.new_page()
        page.goto(f"{live_server.url}/login/")
        expect(page.locator("#sso-sign-in")).to_have_text("Sign in with Acme SSO")
        screenshot(page, name, guide=name)
        context.close()

    # First login: the person is created with the roles of their groups.
    context = browser.new_context(viewport={"width": 1280, "height": 900})
    page = sign_in(context, "ada")
    expect(page).to_have_url(f"{live_server.url}/")
    assert _roles("ada") == {"alpha": "engineer"}
    first_callback = callbacks[-1]
    context.close()

    # A group change at the provider changes the roles at the next login.
    idp.control(users={"ada": {"groups": ["ml-leads"]}})
    context = browser.new_context(viewport={"width": 1280, "height": 900})
    page = sign_in(context, "ada")
    expect(page).to_have_url(f"{live_server.url}/")
    assert _roles("ada") == {"beta": "manager"}
    context.close()

    # A tampered ID token and a wrong nonce are refused, and change nothing.
    idp.control(users={"ada": {"groups": ["ml-team"]}})
    for fault in ("tamper", "wrong_nonce"):
        idp.control(**{fault: True})
        context = browser.new_context(viewport={"width": 1280, "height": 900})
        page = sign_in(context, "ada")
        refused = page.locator("#sign-in-refused")
        expect(refused).to_have_attribute("data-reason", "unverified")
        expect(refused).to_contain_text("could not be verified")
        if fault == "tamper":
            screenshot(page, "sso-refused")
        idp.control(**{fault: False})
        context.close()
    assert _roles("ada") == {"beta": "manager"}

    # A replayed code: the first login's code, with a fresh state of a new sign-in.
    code = parse_qs(urlsplit(first_callback).query)["code"][0]
    context = browser.new_context(viewport={"width": 1280, "height": 900})
    page = context.new_page()
    page.goto(f"{live_server.url}/login/")
    page.click("#sso-sign-in")
    expect(page).to_have_url(re.compile(rf"^{re.escape(idp.issuer)}/authorize"))
    state = parse_qs(urlsplit(page.url).query)["state"][0]
    page.goto(f"{live_server.url}/sso/callback/?code={code}&state={state}")
    expect(page.locator("#sign-in-refused")).to_have_attribute("data-reason", "code_refused")
    # And the first login's callback as it was: its state is used up.
    page.goto(first_callback)
    expect(page.locator("#sign-in-refused")).to_have_attribute("data-reason", "expired")
    page.goto(f"{live_server.url}/")
    expect(page).to_have_url(re.compile(r"/login/"))
    context.close()
    assert _roles("ada") == {"beta": "manager"}
