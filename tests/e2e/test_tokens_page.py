"""The API tokens page in headless Chromium: make a token, see it once, reload and no longer
see it, use it, revoke it."""

import re
import time

import pytest
from django.db import connections
from rest_framework.test import APIClient

from portal.models import ApiToken
from tests import factories
from tests.e2e.conftest import screenshot

pytestmark = [pytest.mark.e2e, pytest.mark.django_db(transaction=True)]


def test_a_person_makes_sees_once_and_revokes_a_token(live_server, browser):
    from playwright.sync_api import expect

    factories.user("erik")
    context = browser.new_context(viewport={"width": 1280, "height": 900})
    page = context.new_page()
    page.set_default_timeout(15_000)
    violations: list[str] = []

    def on_console(message) -> None:
        if "Content Security Policy" in message.text:
            violations.append(message.text)

    page.on("console", on_console)
    page.goto(f"{live_server.url}/login/")
    page.fill("input[name=username]", "erik")
    page.fill("input[name=password]", factories.PASSWORD)
    page.click("button[type=submit]")
    expect(page).not_to_have_url(re.compile(r"/login/"))

    page.click("details.usermenu summary")
    page.click("#api-tokens-link")
    expect(page).to_have_url(re.compile(r"/tokens/$"))
    expect(page.locator("#no-tokens")).to_be_visible()
    page.fill("#id_token_name", "training pipeline")
    page.select_option("#id_token_days", "30")
    page.click("#make-token")
    shown = page.locator("#new-token")
    expect(shown).to_have_text(re.compile(r"^gpp_"))
    raw = shown.inner_text().strip()
    expect(page.locator("#token-table")).to_contain_text("training pipeline")
    expect(page).to_have_url(re.compile(r"/tokens/$"))  # HTMX: the page's own URL stays
    screenshot(page, "tokens-made")

    row = ApiToken.objects.get(user__username="erik")
    client = APIClient()
    client.credentials(HTTP_AUTHORIZATION=f"Bearer {raw}")
    assert client.get("/api/v1/me").json()["username"] == "erik"

    page.reload()
    expect(page.locator("#token-table")).to_contain_text("training pipeline")
    expect(page.locator("#new-token")).to_have_count(0)
    assert raw not in page.content()
    expect(page.locator(f"#token-{row.pk}")).to_contain_text(row.prefix)
    expect(page.locator(f"#token-{row.pk}")).not_to_contain_text("never")  # used just now

    page.once("dialog", lambda dialog: dialog.accept())
    page.locator(f"#token-{row.pk} button").click()
    expect(page.locator("#token-notice")).to_be_visible()
    expect(page.locator(f"#token-{row.pk}")).to_contain_text("revoked")
    screenshot(page, "tokens-revoked")
    row.refresh_from_db()
    assert row.revoked_at is not None
    assert client.get("/api/v1/me").status_code == 401

    page.click("details.usermenu summary")
    page.click("#language-switch button")
    expect(page.locator("h1")).to_have_text("API 令牌")
    expect(page.locator(f"#token-{row.pk}")).to_contain_text("已吊销")
    screenshot(page, "tokens-zh")
    assert violations == []
    context.close()
    connections.close_all()


WATCH = (
    "document.addEventListener('securitypolicyviolation', function (e) {"
    " console.error('CSP violation: ' + e.violatedDirective + ' ' + e.blockedURI); }, true);"
)
REFUSED = (
    "navigator.clipboard.writeText = function () {"
    " return Promise.reject(new DOMException('refused', 'NotAllowedError')); };"
)
INSECURE = "Object.defineProperty(window, 'isSecureContext', {value: false});"


@pytest.mark.parametrize(
    ("width", "language", "clipboard"),
    [(1280, "en", "allowed"), (390, "zh-hans", "refused"), (1280, "zh-hans", "insecure")],
)
def test_making_and_copying_a_token_breaks_no_policy_and_logs_nothing(
    live_server, browser, width, language, clipboard
):
    """Issue 17.12: after a token is made, the page and its Copy button stay within the
    Content-Security-Policy and log no error, whichever way the browser lets it copy."""
    from playwright.sync_api import expect

    factories.user("erik")
    context = browser.new_context(
        viewport={"width": width, "height": 900}, extra_http_headers={"Accept-Language": language}
    )
    context.add_init_script(WATCH)
    if clipboard == "allowed":
        context.grant_permissions(["clipboard-read", "clipboard-write"])
    context.add_init_script({"refused": REFUSED, "insecure": INSECURE}.get(clipboard, ""))
    page = context.new_page()
    page.set_default_timeout(15_000)
    problems: list[str] = []
    page.on("console", lambda m: problems.append(m.text) if m.type == "error" else None)
    page.on("pageerror", lambda error: problems.append(str(error)))
    page.goto(f"{live_server.url}/login/")
    page.fill("input[name=username]", "erik")
    page.fill("input[name=password]", factories.PASSWORD)
    page.click("button[type=submit]")
    expect(page).not_to_have_url(re.compile(r"/login/"))

    page.goto(f"{live_server.url}/tokens/")
    page.fill("#id_token_name", "notebook sync")
    page.press("#id_token_name", "Enter")
    expect(page.locator("#new-token")).to_have_text(re.compile(r"^gpp_"))
    copy = page.locator("[data-copy='#new-token']")
    copy.click()
    if clipboard == "refused":
        # Nothing copied: the token is selected for Ctrl-C instead. (Polled from here:
        # wait_for_function would evaluate a string in the page, which the policy forbids.)
        deadline = time.monotonic() + 10
        while not page.evaluate("window.getSelection().toString()").startswith("gpp_"):
            assert time.monotonic() < deadline, "the token was not selected"
            page.wait_for_timeout(50)
    else:
        expect(copy).to_have_text(copy.get_attribute("data-copied"))
    screenshot(page, f"tokens-copied-{width}-{language}-{clipboard}")
    assert problems == []
    context.close()
    connections.close_all()
