"""The pages the user guide shows, in headless Chromium over the demo's seeded data: each
role logs in and sees its pages render with real content. The screenshots land in
tests/artifacts/; with PORTAL_DOCS_SCREENSHOTS=1 they also replace docs/images/."""

import re
from io import StringIO

import pytest
from django.core.management import call_command
from django.db import connections

from rental.management.commands.seed_demo import DEMO_ACCOUNT
from tests import factories
from tests.e2e.conftest import screenshot, settle

pytestmark = [pytest.mark.e2e, pytest.mark.django_db(transaction=True)]


def choose_a10g(page) -> None:
    page.select_option("select[name=gpu_model]", label="A10G 24GB")
    page.fill("[name=purpose]", "fine-tune the detector on the new labels")
    page.locator("#estimate-total").filter(has_text="$").wait_for()


def open_a_busy_pool(page) -> None:
    page.locator('a[href^="/pools/"]:not([href="/pools/"])').first.click()
    page.wait_for_url("**/pools/*/")


# (login, page, a text the page must show, screenshot name[, what to do first])
PAGES = [
    ("erik", "/", "Leases", "engineer-dashboard"),
    ("erik", "/leases/new/", "Estimate", "engineer-request-form", choose_a10g),
    ("erik", "/leases/", "Leases", "engineer-leases"),
    ("maria", "/approvals/", "Approvals", "manager-approvals"),
    ("maria", "/projects/vision/", "Quota", "manager-project"),
    ("maria", "/billing/projects/vision/reports/", "Idle", "manager-reports"),
    ("erik", "/pools/", "Pools", "engineer-pools", open_a_busy_pool),
    ("fiona", "/billing/finance/", "Statements for", "finance-overview"),
    ("fiona", "/billing/projects/vision/statement/", "Statement", "finance-statement"),
    ("admin", "/admin/rental/provideraccount/", "Demo cloud", "admin-provider-accounts"),
    ("admin", "/pools/", "Pools", "admin-pool", open_a_busy_pool),
    ("admin", "/audit/", "Audit", "admin-audit-log"),
]


@pytest.fixture
def demo_site(db):
    factories.account(name=DEMO_ACCOUNT)
    call_command("load_catalog", "--account", DEMO_ACCOUNT, stdout=StringIO())
    call_command("seed_demo", stdout=StringIO(), stderr=StringIO())
    call_command("seed_demo_billing", stdout=StringIO())


def test_it_shows_every_role_its_pages(live_server, demo_site, browser):
    from playwright.sync_api import expect

    for username, path, text, name, *prepare in PAGES:
        context = browser.new_context(viewport={"width": 1360, "height": 900})
        page = context.new_page()
        page.set_default_timeout(15_000)
        page.goto(f"{live_server.url}/login/")
        page.fill("input[name=username]", username)
        page.fill("input[name=password]", f"demo-{username}")
        page.click("button[type=submit]")
        expect(page).not_to_have_url(re.compile(r"/login/"))
        response = page.goto(f"{live_server.url}{path}")
        assert response is not None and response.status == 200, (username, path)
        expect(page.locator("body")).to_contain_text(text)
        for step in prepare:
            step(page)
        settle(page)
        screenshot(page, f"guide-{name}", guide=name)
        context.close()
    connections.close_all()
