"""The pages the user guide shows, in headless Chromium over the demo's seeded data: each
role logs in and sees its pages render with real content. The screenshots land in
tests/artifacts/; with PORTAL_DOCS_SCREENSHOTS=1 they also replace docs/images/."""

import os
import re
import shutil
from io import StringIO
from pathlib import Path

import pytest
from django.core.management import call_command
from django.db import connections

from rental.management.commands.seed_demo import DEMO_ACCOUNT
from tests import factories
from tests.e2e.conftest import ARTIFACTS

pytestmark = [pytest.mark.e2e, pytest.mark.django_db(transaction=True)]
DOCS_IMAGES = Path(__file__).resolve().parents[2] / "docs" / "images"

# (login, page, a text the page must show, screenshot name)
PAGES = [
    ("erik", "/", "Leases", "engineer-dashboard"),
    ("erik", "/leases/new/", "Estimate", "engineer-request-form"),
    ("erik", "/leases/", "Leases", "engineer-leases"),
    ("maria", "/approvals/", "Approvals", "manager-approvals"),
    ("maria", "/projects/vision/", "Quota", "manager-project"),
    ("fiona", "/billing/projects/vision/statement/", "Statement", "finance-statement"),
    ("admin", "/admin/rental/provideraccount/", "Demo cloud", "admin-provider-accounts"),
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

    ARTIFACTS.mkdir(exist_ok=True)
    shots = []
    for username, path, text, name in PAGES:
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
        page.wait_for_load_state("networkidle")
        shot = ARTIFACTS / f"guide-{name}.png"
        page.screenshot(path=str(shot), full_page=False)
        shots.append(shot)
        context.close()
    if os.environ.get("PORTAL_DOCS_SCREENSHOTS") == "1":
        DOCS_IMAGES.mkdir(parents=True, exist_ok=True)
        for shot in shots:
            shutil.copy(shot, DOCS_IMAGES / shot.name.removeprefix("guide-"))
    connections.close_all()
