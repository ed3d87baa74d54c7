"""Finance's reconciliation in headless Chromium, in English and Chinese at 1280 and 390 px:
a month's bill imported through the form (one line charged above the captured rate), the
bill's page with the flag and its explanation, and the finance page's hold on the close.
Screenshots land in tests/artifacts/; with PORTAL_DOCS_SCREENSHOTS=1 the English ones also
replace docs/images/."""

import re

import pytest
from django.db import connections

from billing.reconcile_models import CostImport
from rental.models import Instance
from tests import factories
from tests.billing.helpers import at, lease, run
from tests.billing.test_reconcile_files import CUR, bill_lines
from tests.e2e.conftest import screenshot, settle

pytestmark = [pytest.mark.e2e, pytest.mark.django_db(transaction=True)]
SIZES = ((1280, 900, ""), (390, 1200, "-phone"))


def test_finance_imports_a_bill_and_reads_its_flag_in_both_languages(
    live_server, browser, tmp_path
):
    from playwright.sync_api import expect

    f0 = factories.fixture_f0()
    record = run(lease(f0, f0.alpha), start=at(2026, 3, 2, 8), hours=10)
    Instance.objects.filter(pk=record.instance_id).update(external_id="i-0aaa")
    factories.user("fiona", finance=True)
    bill = tmp_path / "cur-2026-03.csv"
    bill.write_text(CUR + bill_lines(rate="3.00"))

    for width, height, suffix in SIZES:
        for language in ("en", "zh-hans"):
            context = browser.new_context(
                viewport={"width": width, "height": height},
                extra_http_headers={"Accept-Language": language},
            )
            page = context.new_page()
            page.goto(f"{live_server.url}/login/")
            page.fill("input[name=username]", "fiona")
            page.fill("input[name=password]", factories.PASSWORD)
            page.click("button[type=submit]")
            expect(page).not_to_have_url(re.compile(r"/login/"))
            page.goto(f"{live_server.url}/billing/finance/reconcile/?period=2026-03")
            if not CostImport.objects.exists():
                page.fill("input[name=period]", "2026-03")
                page.select_option("select[name=account]", str(f0.account.pk))
                page.set_input_files("input[name=file]", str(bill))
                page.click("#import-bill")
                expect(page).to_have_url(re.compile(r"/reconcile/\d+/"))
            else:
                page.goto(
                    f"{live_server.url}/billing/finance/reconcile/{CostImport.objects.get().pk}/"
                )
            words = "1 difference" if language == "en" else "1 处差异"
            expect(page.locator("body")).to_contain_text(words)
            settle(page)
            tail = "" if language == "en" else "-zh"
            name = f"reconcile-bill{tail}{suffix}"
            screenshot(page, name, guide=name if language == "en" else "", full_page=True)
            context.close()
    connections.close_all()
