"""Billing in headless Chromium: a manager signs a statement off and disputes a line of
another; finance downloads the CSV and the PDF (turned into an image to look at); the
project page draws the budget chart."""

import csv
import io
import re
import shutil
import subprocess
from datetime import timedelta
from decimal import Decimal
from pathlib import Path

import pytest
from django.db import connections
from django.utils import timezone

from billing import services
from billing.models import Budget, LineDispute, Statement
from billing.periods import period_start
from portal.models import Membership
from rental.models import Pool
from tests import factories
from tests.billing.helpers import lease, run
from tests.e2e.conftest import ARTIFACTS

pytestmark = [pytest.mark.e2e, pytest.mark.django_db(transaction=True)]


def login(page, base: str, username: str) -> None:
    from playwright.sync_api import expect

    page.goto(f"{base}/login/")
    page.fill("input[name=username]", username)
    page.fill("input[name=password]", factories.PASSWORD)
    page.click("button[type=submit]")
    expect(page).not_to_have_url(re.compile(r"/login/"))


def test_sign_off_dispute_exports_and_budget_chart(live_server, browser):
    from playwright.sync_api import expect

    f0 = factories.fixture_f0()
    factories.member(f0.alpha_manager, f0.beta, Membership.Role.MANAGER)
    factories.user("fiona", finance=True)
    Pool.objects.filter(pk=f0.pool.pk).update(
        committed_gpus=6, committed_monthly_cost=Decimal("5400.00")
    )
    this_month = period_start(timezone.now())
    last_month = period_start(this_month - timedelta(days=1))
    run(lease(f0, f0.alpha, tier="burst"), start=last_month, hours=200)
    run(lease(f0, f0.beta, tier="guaranteed", gpus=4), start=last_month, hours=100, gpus=4)
    services.close_period(period=last_month, now=this_month + timedelta(seconds=1))
    Budget.objects.create(
        project=f0.alpha,
        monthly_amount=Decimal("100000.00"),
        thresholds=[{"percent": 80, "kind": "actual"}],
    )
    run(
        lease(f0, f0.alpha, tier="burst", status="active"),
        start=timezone.now() - timedelta(hours=4),
    )
    label = f"{last_month:%Y-%m}"
    ARTIFACTS.mkdir(exist_ok=True)
    page = browser.new_page(viewport={"width": 1360, "height": 1000})
    page.set_default_timeout(15_000)

    login(page, live_server.url, "alma")
    page.goto(f"{live_server.url}/billing/projects/alpha/statement/?period={label}")
    expect(page.locator("#statement-total")).to_contain_text("$2,300.00")
    page.click("#approve-statement")
    expect(page.locator("#statement-badge")).to_contain_text("Approved")
    expect(page.locator("#signed-off")).to_contain_text("alma")
    assert Statement.objects.get(project=f0.alpha, period=last_month.date()).status == "approved"

    page.goto(f"{live_server.url}/billing/projects/beta/statement/?period={label}")
    page.click("#dispute-toggle-0")
    page.fill("#dispute-form-0 input[name=comment]", "We were down for a day.")
    page.click("#dispute-form-0 button[type=submit]")
    expect(page.locator("#statement-badge")).to_contain_text("Disputed")
    expect(page.locator("body")).to_contain_text("We were down for a day.")
    assert LineDispute.objects.get().comment == "We were down for a day."
    page.screenshot(path=str(ARTIFACTS / "e2e-statement-disputed.png"), full_page=True)

    page.goto(f"{live_server.url}/projects/alpha/")
    chart = page.locator("#budget-chart")
    expect(chart).to_be_visible()
    expect(chart.locator("#chart-actual")).to_be_attached()
    expect(chart).to_contain_text("budget $100,000.00")
    page.screenshot(path=str(ARTIFACTS / "e2e-budget-chart.png"), full_page=True)

    finance = browser.new_page(viewport={"width": 1360, "height": 1000})
    finance.set_default_timeout(15_000)
    login(finance, live_server.url, "fiona")
    finance.goto(f"{live_server.url}/billing/finance/?period={label}")
    expect(finance.locator("#finance-total")).to_contain_text("$5,900.00")
    with finance.expect_download() as csv_download:
        finance.click("#finance-csv")
    rows = list(csv.DictReader(io.StringIO(Path(csv_download.value.path()).read_text())))
    assert sum(Decimal(row["amount"]) for row in rows) == Decimal("5900.00")
    with finance.expect_download() as pdf_download:
        finance.click("#finance-pdf")
    pdf = ARTIFACTS / "e2e-statements.pdf"
    shutil.copy(pdf_download.value.path(), pdf)
    assert pdf.read_bytes().startswith(b"%PDF")
    if shutil.which("pdftoppm"):
        subprocess.run(
            ["pdftoppm", "-png", "-r", "60", "-singlefile", str(pdf), str(ARTIFACTS / "e2e-pdf")],
            check=True,
        )
        assert (ARTIFACTS / "e2e-pdf.png").stat().st_size > 1000
    # With Playwright's loop running, the ORM calls above had a connection of their own;
    # close it so the test database can be dropped at the end of the session.
    connections.close_all()
