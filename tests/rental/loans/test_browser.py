"""Headless Chromium against a live server: an engineer books a future slot from the form
and sees it on the pool's week view; an engineer sees a waiting lease's place and reason;
a manager decides a quota request."""

import re
from pathlib import Path

import pytest
from django.db import connections

from rental.loans import admission
from rental.models import Quota, QuotaRequest, Reservation
from tests import factories

pytestmark = [pytest.mark.e2e, pytest.mark.django_db(transaction=True)]
CHROMIUM = "/usr/bin/chromium"


@pytest.fixture
def browser(monkeypatch):
    monkeypatch.setenv("DJANGO_ALLOW_ASYNC_UNSAFE", "true")
    if not Path(CHROMIUM).exists():
        pytest.fail(f"{CHROMIUM} is missing: apt-get install -y chromium")
    from playwright.sync_api import sync_playwright

    with sync_playwright() as playwright:
        chromium = playwright.chromium.launch(
            executable_path=CHROMIUM,
            args=["--headless", "--no-sandbox", "--disable-gpu", "--disable-background-networking"],
        )
        yield chromium
        chromium.close()
    connections.close_all()


def logged_in(browser, live_server, username):
    from playwright.sync_api import expect

    page = browser.new_page(viewport={"width": 1360, "height": 1000})
    page.set_default_timeout(15_000)
    page.goto(f"{live_server.url}/login/")
    page.fill("input[name=username]", username)
    page.fill("input[name=password]", factories.PASSWORD)
    page.click("button[type=submit]")
    expect(page).not_to_have_url(re.compile(r"/login/"))
    return page


def test_an_engineer_books_a_future_slot_and_sees_it_on_the_week(live_server, browser):
    from playwright.sync_api import expect

    f0 = factories.fixture_f0()
    page = logged_in(browser, live_server, "alice")
    page.goto(f"{live_server.url}/leases/new/?project=alpha")
    page.fill("input[name=gpu_count]", "4")
    page.fill("input[name=duration_hours]", "8")
    page.check("input[name=start_mode][value=later]")
    page.fill("input[name=start_at]", "2099-04-06T09:00")
    page.locator("input[name=start_at]").dispatch_event("change")
    expect(page.locator("#estimate-outcome")).to_have_attribute("data-outcome", "scheduled")
    page.click("#submit-lease")
    expect(page).to_have_url(re.compile(r"/leases/\d+/$"))
    expect(page.locator("#lease-status")).to_have_text(re.compile("Scheduled"))
    lease = Reservation.objects.get()
    assert (lease.status, lease.is_reservation) == (Reservation.Status.SCHEDULED, True)

    page.goto(f"{live_server.url}/pools/{f0.pool.pk}/?week=2099-04-06")
    cell = page.locator("#week-20990406-09")
    expect(cell).to_have_attribute("data-reserved", "2")  # 4 booked, G 2
    expect(cell).to_have_attribute("data-free", "0")
    expect(page.locator("#week-20990406-17")).to_have_attribute("data-free", "2")
    connections.close_all()


def test_an_engineer_sees_the_place_and_reason_of_a_waiting_lease(live_server, browser):
    from playwright.sync_api import expect

    f0 = factories.fixture_f0()
    for project, gpus in ((f0.beta, 4), (f0.alpha, 2), (f0.gamma, 2)):
        admission.submit_reservation(
            actor=f0.engineer_of(project),
            project=project,
            gpu_model=f0.model,
            gpu_count=gpus,
            duration_hours=4,
            priority="experiment",
            market="on_demand",
        )
    waiting = admission.submit_reservation(
        actor=f0.gary,
        project=f0.gamma,
        gpu_model=f0.model,
        gpu_count=1,
        duration_hours=4,
        priority="learning",
        market="on_demand",
    )
    assert waiting.status == Reservation.Status.QUEUED
    page = logged_in(browser, live_server, "gary")
    page.goto(f"{live_server.url}{waiting.get_absolute_url()}")
    expect(page.locator("#lease-queue-position")).to_have_text(
        "Place 1 of 1 in the A100 80GB queue."
    )
    expect(page.locator("#lease-reason")).to_contain_text("The pool has 0 of 8 GPUs free")
    expect(page.locator("#lease-wait-hint")).to_contain_text("as soon as 1 GPUs of the pool")
    expect(page.locator("body")).not_to_contain_text("no_capacity")
    connections.close_all()


def test_a_manager_decides_a_quota_request(live_server, browser):
    from playwright.sync_api import expect

    f0 = factories.fixture_f0()
    page = logged_in(browser, live_server, "alice")
    page.goto(f"{live_server.url}/projects/alpha/")
    page.fill("#qr-l", "5")
    page.fill("#qr-reason", "a bigger sweep")
    page.click("#ask-quota")
    expect(page.locator("body")).to_contain_text("Your request is sent")
    asked = QuotaRequest.objects.get()

    manager = logged_in(browser, live_server, "alma")
    manager.goto(f"{live_server.url}/projects/alpha/")
    manager.click(f"#approve-quota-{asked.pk}")
    expect(manager.locator(f"#quota-request-status-{asked.pk}")).to_have_text("Approved")
    assert Quota.objects.get(project=f0.alpha).ceiling == 5
    connections.close_all()


def test_an_admin_caps_the_auto_approve_limits_and_a_manager_stays_within(live_server, browser):
    from playwright.sync_api import expect

    from tests.e2e.conftest import screenshot

    f0 = factories.fixture_f0()
    quota = Quota.objects.get(project=f0.alpha)
    admin = logged_in(browser, live_server, "root")
    admin.goto(f"{live_server.url}/projects/alpha/")
    admin.fill(f"#cap-gpus-{quota.pk}", "2")
    admin.fill(f"#cap-hours-{quota.pk}", "8")
    admin.click(f"#save-auto-approve-caps-{quota.pk}")
    expect(admin.locator("body")).to_contain_text("Caps on the auto-approve limits")
    expect(admin.locator(f"#auto-approve-caps-now-{quota.pk}")).to_contain_text("2 GPUs")
    screenshot(admin, "loan-auto-approve-caps-admin")

    manager = logged_in(browser, live_server, "alma")
    manager.goto(f"{live_server.url}/projects/alpha/")
    expect(manager.locator(f"#auto-approve-caps-form-{quota.pk}")).to_have_count(0)
    manager.fill(f"#aa-gpus-{quota.pk}", "4")
    manager.fill(f"#aa-hours-{quota.pk}", "8")
    manager.click(f"#save-auto-approve-{quota.pk}")
    expect(manager.locator(f"#error-aa-gpus-{quota.pk}")).to_have_text(
        "At most 2 GPUs, as the admin allows."
    )
    screenshot(manager, "loan-auto-approve-manager-refused")
    manager.fill(f"#aa-gpus-{quota.pk}", "2")
    manager.click(f"#save-auto-approve-{quota.pk}")
    expect(manager.locator(f"#auto-approve-now-{quota.pk}")).to_contain_text("up to 2 GPUs")
    quota.refresh_from_db()
    assert (quota.max_gpus_per_lease, quota.max_hours_per_lease) == (2, 8)
    connections.close_all()
