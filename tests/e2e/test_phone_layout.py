"""Every persona's main pages on a phone (390×844), in headless Chromium over the demo's
seeded data: no page is wider than the screen, the menu button opens the navigation, the
lease list shows each lease's status and the approvals their buttons, on the screen. And a
stopped lease's Resume and End buttons stand apart, on a phone and on a desktop."""

import re
from io import StringIO

import pytest
from django.contrib.auth import get_user_model
from django.core.management import call_command
from django.db import connections

from portal.models import Project
from rental.loans.admission import submit_reservation
from rental.management.commands.seed_demo import DEMO_ACCOUNT
from rental.models import GpuModel, Reservation
from tests import factories
from tests.e2e.conftest import screenshot, settle
from tests.rental.agent.conftest import running_lease

pytestmark = [pytest.mark.e2e, pytest.mark.django_db(transaction=True)]

PHONE = {"width": 390, "height": 844}

# login → (language, the pages it checks); every persona reads its pages in one language,
# the two languages shared between them.
PAGES = {
    "erik": (
        "en",
        [
            "/",
            "/leases/new/",
            "/leases/",
            "/projects/vision/",
            "/pools/",
            "/images/",
            "/keys/",
            "/tokens/",
            "/notifications/",
            "/billing/projects/vision/statement/",
        ],
    ),
    "maria": (
        "zh-hans",
        [
            "/",
            "/approvals/",
            "/leases/",
            "/projects/",
            "/projects/vision/",
            "/billing/projects/vision/statement/?period=2026-11",
            "/billing/projects/vision/reports/",
        ],
    ),
    "admin": ("en", ["/", "/audit/", "/leases/", "/pools/", "/billing/finance/"]),
    "fiona": (
        "zh-hans",
        ["/", "/billing/finance/", "/billing/projects/vision/statement/?period=2026-11"],
    ),
}


@pytest.fixture
def demo_site(db):
    factories.account(name=DEMO_ACCOUNT)
    call_command("load_catalog", "--account", DEMO_ACCOUNT, stdout=StringIO())
    call_command("seed_demo", stdout=StringIO(), stderr=StringIO())
    call_command("seed_demo_billing", stdout=StringIO())


def waiting_for_maria() -> Reservation:
    """A request of erik's beyond vision's auto-approve hours: it waits for maria."""
    lease = submit_reservation(
        actor=get_user_model().objects.get(username="erik"),
        project=Project.objects.get(slug="vision"),
        gpu_model=GpuModel.objects.get(name="A10G 24GB"),
        gpu_count=2,
        duration_hours="100",
        priority="experiment",
        market="on_demand",
        purpose="fine-tune the detector on a phone",
    )
    assert lease.status == Reservation.Status.PENDING_APPROVAL
    return lease


# Each element: shown (it has a box) and within the phone's width, not scrolled off to the
# side. Read in one go in the page, so that a list the page polls cannot change in between.
ON_SCREEN = """elements => elements.map(element => {
    const box = element.getBoundingClientRect();
    return box.width > 0 && box.height > 0 && box.left >= 0 && box.right <= window.innerWidth;
})"""


def on_screen(locator) -> bool:
    """Every element the locator finds (at least one) is shown within the phone's width."""
    found = locator.evaluate_all(ON_SCREEN)
    return bool(found) and all(found)


def log_in(page, url: str, username: str, password: str) -> None:
    from playwright.sync_api import expect

    page.goto(f"{url}/login/")
    page.fill("input[name=username]", username)
    page.fill("input[name=password]", password)
    page.click("button[type=submit]")
    expect(page).not_to_have_url(re.compile(r"/login/"))


def check_page(page, url: str, path: str) -> None:
    response = page.goto(url + path)
    assert response is not None and response.status == 200, path
    settle(page)
    width = page.evaluate("document.documentElement.scrollWidth")
    assert width <= PHONE["width"], f"{path} is {width} px wide on a {PHONE['width']} px phone"


def check_menu(page) -> None:
    """The navigation hides behind the menu button, which opens and closes it; the bell and
    the user menu stay in the top bar, and opening the user menu folds the navigation."""
    links = page.locator("#mainnav a")
    assert links.count() >= 4
    assert not links.first.is_visible()
    for reachable in ("#navmenu-button", "#notifications-bell", ".usermenu summary"):
        assert on_screen(page.locator(reachable)), reachable
    page.click("#navmenu-button")
    assert on_screen(links), links.evaluate_all(ON_SCREEN)
    page.click("#navmenu-button")
    assert not links.first.is_visible()
    page.click("#navmenu-button")
    page.click(".usermenu summary")
    assert not links.first.is_visible()
    assert on_screen(page.locator("#logout"))
    page.click(".usermenu summary")


def test_it_fits_every_personas_main_pages_on_a_phone(live_server, demo_site, browser):
    waiting = waiting_for_maria()
    for username, (language, paths) in PAGES.items():
        context = browser.new_context(
            viewport=PHONE, extra_http_headers={"Accept-Language": language}
        )
        page = context.new_page()
        page.set_default_timeout(15_000)
        log_in(page, live_server.url, username, f"demo-{username}")
        check_menu(page)
        lease_path = ""
        for path in paths:
            check_page(page, live_server.url, path)
            if path == "/leases/":
                statuses = page.locator("#lease-rows .status-cell")
                assert statuses.count() > 1
                assert on_screen(statuses), statuses.evaluate_all(ON_SCREEN)
                lease_path = page.locator("#lease-rows a.strong").first.get_attribute("href")
            if path == "/approvals/":
                for button in (f"#approve-{waiting.pk}", f"#reject-{waiting.pk}"):
                    assert on_screen(page.locator(button)), button
        if username == "erik":  # a lease's own page too
            check_page(page, live_server.url, lease_path)
        screenshot(page, f"phone-{username}-{language}")
        context.close()
    connections.close_all()


def apart(first, second) -> bool:
    """The two buttons do not touch: at least 4 px between them, across or down."""
    a, b = first.bounding_box(), second.bounding_box()
    gap_across = max(b["x"] - (a["x"] + a["width"]), a["x"] - (b["x"] + b["width"]))
    gap_down = max(b["y"] - (a["y"] + a["height"]), a["y"] - (b["y"] + b["height"]))
    return max(gap_across, gap_down) >= 4


def test_a_stopped_leases_buttons_stand_apart(live_server, browser):
    from playwright.sync_api import expect

    f0 = factories.fixture_f0()
    run = running_lease(f0, priority="experiment")
    page = browser.new_page(viewport={"width": 1280, "height": 900})
    page.set_default_timeout(15_000)
    page.on("dialog", lambda dialog: dialog.accept())
    log_in(page, live_server.url, "alice", factories.PASSWORD)
    page.goto(f"{live_server.url}{run.lease.get_absolute_url()}")
    page.click("#stop-lease")
    expect(page.locator("#lease-status")).to_contain_text("Stopped")
    resume, end = page.locator("#resume-lease"), page.locator("#end-stopped-lease")
    assert apart(resume, end)
    page.set_viewport_size(PHONE)
    assert apart(resume, end)
    assert page.evaluate("document.documentElement.scrollWidth") <= PHONE["width"]
    screenshot(page, "phone-stopped-lease")
    page.close()
    connections.close_all()
