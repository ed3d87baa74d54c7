"""In headless Chromium: a manager reaches the project's service tokens from its page, makes
one with its scopes (HTMX, shown once), a pipeline uses it on the API, the manager revokes
it and the next call is refused; the page fits a phone's width."""

import json
import urllib.error
import urllib.request

import pytest

from portal.models import ServiceToken
from tests import factories
from tests.e2e.conftest import screenshot
from tests.e2e.test_agent_pages import log_in

pytestmark = [pytest.mark.e2e, pytest.mark.django_db(transaction=True)]


def call(live_server, token: str, path: str) -> tuple[int, dict]:
    request = urllib.request.Request(
        f"{live_server.url}{path}", headers={"Authorization": f"Bearer {token}"}
    )
    try:
        with urllib.request.urlopen(request, timeout=10) as answer:
            return answer.status, json.loads(answer.read())
    except urllib.error.HTTPError as refused:
        return refused.code, json.loads(refused.read())


def test_a_manager_makes_uses_and_revokes_a_service_token(live_server, browser):
    from playwright.sync_api import expect

    factories.fixture_f0()
    page = browser.new_page(viewport={"width": 1360, "height": 900})
    page.set_default_timeout(15_000)
    log_in(page, live_server, "alma")
    page.goto(f"{live_server.url}/projects/alpha/")
    page.click("#project-service-tokens")
    expect(page.locator("h1")).to_have_text("Service tokens")

    page.fill("#id_token_name", "ci-nightly")
    expect(page.locator("#id_scope_read")).to_be_checked()
    page.check("#id_scope_leases")
    page.click("#make-token")
    token = page.locator("#new-token")
    expect(token).to_contain_text("gps_")
    raw = token.inner_text().strip()
    expect(page.locator("#service-token-table")).to_contain_text("read, leases")
    screenshot(page, "service-tokens", guide="manager-service-tokens")

    status, body = call(live_server, raw, "/api/v1/projects")
    assert status == 200 and [p["slug"] for p in body["results"]] == ["alpha"]

    page.reload()
    expect(page.locator("#new-token")).to_have_count(0)  # shown once
    page.once("dialog", lambda dialog: dialog.accept())
    row = ServiceToken.objects.get(name="ci-nightly")
    page.locator(f"#service-token-{row.pk} button[type=submit]").click()
    expect(page.locator(f"#service-token-{row.pk}")).to_contain_text("revoked")
    status, body = call(live_server, raw, "/api/v1/projects")
    assert status == 401

    phone = browser.new_page(viewport={"width": 390, "height": 844})
    phone.context.add_cookies(page.context.cookies())
    phone.goto(f"{live_server.url}/projects/alpha/service-tokens/")
    expect(phone.locator("#service-token-form")).to_be_visible()
    overflow = phone.evaluate("document.documentElement.scrollWidth - window.innerWidth")
    assert overflow <= 0, f"the page is {overflow}px wider than the phone"
    screenshot(phone, "service-tokens-phone")
