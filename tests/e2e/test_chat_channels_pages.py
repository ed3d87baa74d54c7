"""In headless Chromium: a manager adds a signed webhook channel on the project's chat
channels page (the address is never shown back), and a person chooses their
subscriptions; both pages fit a phone's width. The user guide's screenshots come from
here (PORTAL_DOCS_SCREENSHOTS=1)."""

import pytest

from portal.messaging.models import Channel
from tests import factories
from tests.e2e.conftest import screenshot
from tests.e2e.test_agent_pages import log_in

pytestmark = [pytest.mark.e2e, pytest.mark.django_db(transaction=True)]

ADDRESS = "https://hooks.example.com/portal/T0K3N-never-shown"


def fits(page) -> bool:
    return page.evaluate("document.documentElement.scrollWidth <= window.innerWidth + 1")


def test_a_manager_adds_a_channel_and_people_choose_what_they_get(live_server, browser):
    from playwright.sync_api import expect

    f0 = factories.fixture_f0()
    page = browser.new_page(viewport={"width": 1280, "height": 900})
    log_in(page, live_server, f0.alpha_manager.username)
    page.goto(f"{live_server.url}/projects/{f0.alpha.slug}/channels/")
    page.fill("#id_channel_name", "team chat")
    page.select_option("#id_channel_kind", "webhook")
    page.fill("#id_channel_address", ADDRESS)
    page.fill("#id_channel_secret", "s3cret-for-the-receiver-01")
    page.click("#add-channel")
    expect(page.locator("body")).to_contain_text("Channel team chat added.")
    assert Channel.objects.filter(project=f0.alpha, name="team chat").exists()
    assert "T0K3N" not in page.content()
    screenshot(page, "chat-channels", guide="manager-chat-channels")

    page.goto(f"{live_server.url}/subscriptions/")
    expect(page.locator("body")).to_contain_text("team chat")
    screenshot(page, "chat-subscriptions", guide="chat-subscriptions")

    phone = browser.new_page(viewport={"width": 390, "height": 844})
    log_in(phone, live_server, f0.alpha_manager.username)
    for path, name in (
        (f"/projects/{f0.alpha.slug}/channels/", "chat-channels-phone"),
        ("/subscriptions/", "chat-subscriptions-phone"),
    ):
        phone.goto(f"{live_server.url}{path}")
        assert fits(phone), path
        screenshot(phone, name)
