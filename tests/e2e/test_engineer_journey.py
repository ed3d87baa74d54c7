"""The engineer's journey in headless Chromium against a live server, a real Celery worker
on Redis and the local EC2 endpoint: log in, fill the form, watch the estimate change,
submit, see the lease become active with its connection details, end it."""

import re
from decimal import Decimal

import pytest
from django.db import connections

from rental.models import Reservation, UsageRecord
from tests import factories
from tests.e2e.conftest import screenshot

pytestmark = [pytest.mark.e2e, pytest.mark.django_db(transaction=True)]


def test_it_takes_an_engineer_from_request_to_ended_lease(live_server, cloud, worker, browser):
    from playwright.sync_api import expect

    f0 = factories.fixture_f0(endpoint_url=cloud.url)
    page = browser.new_page(viewport={"width": 1360, "height": 1000})
    page.set_default_timeout(15_000)

    page.goto(f"{live_server.url}/login/")
    page.fill("input[name=username]", "alice")
    page.fill("input[name=password]", factories.PASSWORD)
    page.click("button[type=submit]")
    expect(page).not_to_have_url(re.compile(r"/login/"))

    page.goto(f"{live_server.url}/leases/new/?project=alpha")
    page.select_option("select[name=gpu_model]", label=str(f0.model))
    page.fill("input[name=gpu_count]", "2")
    page.fill("input[name=duration_hours]", "3")
    page.select_option("select[name=priority]", "experiment")
    page.fill("[name=purpose]", "fine-tune a detector")
    total = page.locator("#estimate-total")
    expect(total).to_contain_text("$15.00")  # 2 GPUs × $2.50 × 3 h
    page.fill("input[name=gpu_count]", "1")
    page.locator("input[name=gpu_count]").dispatch_event("change")
    expect(total).to_contain_text("$7.50")  # the estimate follows the form
    screenshot(page, "e2e-request-form")

    page.click("#submit-lease")
    expect(page).to_have_url(re.compile(r"/leases/\d+/$"))
    lease = Reservation.objects.get()
    assert (lease.gpu_count, lease.project, lease.purpose) == (1, f0.alpha, "fine-tune a detector")

    expect(page.locator("#lease-status")).to_have_text(re.compile("Active"), timeout=60_000)
    instance = lease.instances.get()
    instance.refresh_from_db()
    body = page.locator("body")
    expect(body).to_contain_text(instance.public_address)
    expect(body).to_contain_text(f"ubuntu@{instance.public_address}")
    expect(body).to_contain_text("gpu-portal:project")
    screenshot(page, "e2e-lease-active", guide="engineer-lease-active")

    page.once("dialog", lambda dialog: dialog.accept())
    page.click("#end-lease")
    expect(page.locator("#lease-status")).to_have_text(re.compile("End"), timeout=60_000)
    expect(page.locator("#lease-status")).to_have_text(re.compile("Ended"), timeout=60_000)
    screenshot(page, "e2e-lease-ended")

    lease.refresh_from_db()
    assert lease.status == Reservation.Status.ENDED
    usage = UsageRecord.objects.get()
    assert usage.end is not None and usage.rate == Decimal("2.500000")
    # With Playwright's loop running, the ORM calls above had a connection of their own;
    # close it so the test database can be dropped at the end of the session.
    connections.close_all()
