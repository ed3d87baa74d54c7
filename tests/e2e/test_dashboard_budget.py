"""In headless Chromium: the dashboard draws spend against budget with the forecast for
each of the user's projects, and a statement priced partly in CNY lists the rates used."""

from datetime import timedelta
from decimal import Decimal

import pytest
from django.utils import timezone

from billing.models import Budget
from billing.periods import period_start
from portal.models import Membership
from rental.catalog import exchange
from rental.models import Instance, Offering, UsageRecord
from tests import factories
from tests.billing.helpers import lease, run
from tests.e2e.conftest import ARTIFACTS
from tests.e2e.test_billing_journey import login

pytestmark = [pytest.mark.e2e, pytest.mark.django_db(transaction=True)]


def test_dashboard_budget_charts_and_rates_used(live_server, browser):
    from playwright.sync_api import expect

    f0 = factories.fixture_f0()
    factories.member(f0.alpha_manager, f0.beta, Membership.Role.MANAGER)
    now = timezone.now()
    Budget.objects.create(project=f0.alpha, monthly_amount=Decimal("60.00"), thresholds=[])
    Budget.objects.create(project=f0.beta, monthly_amount=Decimal("5000.00"), thresholds=[])
    run(lease(f0, f0.alpha, tier="burst", status="active"), start=now - timedelta(hours=30))
    cny_account = factories.account(name="aliyun-cn")
    cny = factories.offering(cny_account, f0.model, instance_type="cn.a100x1", on_demand="20.00")
    Offering.objects.filter(pk=cny.pk).update(currency="CNY")
    rate = exchange.add_exchange_rate(
        actor=None,
        currency="CNY",
        units_per_billing_unit="7.2500",
        valid_from=period_start(now),
        source="PBOC central parity",
    )
    record = run(lease(f0, f0.beta, tier="burst"), start=period_start(now), hours=1, rate="20.00")
    UsageRecord.objects.filter(pk=record.pk).update(
        currency="CNY", exchange_rate=Decimal("7.25"), exchange_rate_ref=rate
    )
    Instance.objects.filter(pk=record.instance_id).update(currency="CNY", offering=cny)
    ARTIFACTS.mkdir(exist_ok=True)
    page = browser.new_page(viewport={"width": 1360, "height": 1000})
    page.set_default_timeout(15_000)
    login(page, live_server.url, "alma")
    page.goto(f"{live_server.url}/")
    alpha = page.locator("#budget-chart-alpha")
    expect(alpha).to_be_visible()
    expect(alpha.locator("#budget-capped-alpha")).to_be_visible()  # $75 of $60
    beta = page.locator("#budget-chart-beta")
    expect(beta).to_contain_text("budget $5,000.00")
    expect(beta.locator("#chart-actual-beta")).to_be_attached()
    page.screenshot(path=str(ARTIFACTS / "e2e-dashboard-budget.png"), full_page=True)

    page.goto(f"{live_server.url}/billing/projects/beta/statement/")
    rates = page.locator("#rates-used")
    expect(rates).to_contain_text("CNY")
    expect(rates).to_contain_text("PBOC central parity")
    # CNY 20.00 × 1 GPU-h / 7.25 = USD 2.7586… → $2.76
    expect(page.locator("body")).to_contain_text("CNY 20.00/GPU-h at 7.25 CNY per USD")
    expect(page.locator("body")).to_contain_text("$2.76")
    page.screenshot(path=str(ARTIFACTS / "e2e-statement-rates-used.png"), full_page=True)
