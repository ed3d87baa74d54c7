"""The Content-Security-Policy in headless Chromium: the main pages of every role, their
HTMX partials, the utilization chart (uPlot), the quota bars, the language menu and the
API docs (Swagger UI, Redoc) all work, and Chromium reports no violation of the policy."""

import re
from datetime import timedelta

import pytest
from django.db import connections
from django.utils import timezone

from billing import budgets
from rental.models import Instance, UtilizationSample
from tests import factories
from tests.e2e.conftest import screenshot
from tests.rental.agent.conftest import running_lease

REDOC_CDN_LOGO = "https://cdn.redoc.ly/redoc/logo-mini.svg"
pytestmark = [pytest.mark.e2e, pytest.mark.django_db(transaction=True)]


def _world():
    f0 = factories.fixture_f0()
    run = running_lease(f0, gpus=2)
    end = timezone.now().replace(second=0, microsecond=0)
    UtilizationSample.objects.bulk_create(
        UtilizationSample(
            instance=run.instance,
            at=end - timedelta(minutes=60 - m),
            gpu_utilization=[50.0 + m % 20, 80.0],
            memory_used_mb=[20_000.0, 40_000.0],
        )
        for m in range(61)
    )
    Instance.objects.filter(pk=run.instance.pk).update(agent_last_sample_at=end)
    f0.admin.is_superuser = True  # the admin site's pages need its permissions
    f0.admin.save()
    budget = budgets.set_budget(
        project=f0.alpha,
        actor=f0.admin,
        monthly_amount="100.00",
        thresholds=[{"percent": 80, "kind": "actual"}],
    )
    factories.user("fiona", finance=True)
    return f0, run, budget


class Violations:
    """Every console line and page error that mentions the policy."""

    def __init__(self) -> None:
        self.seen: list[str] = []

    def watch(self, page, where: str) -> None:
        def on_console(message) -> None:
            if "Content Security Policy" in message.text or "Refused to" in message.text:
                self.seen.append(f"{where}: {message.text}")

        page.on("console", on_console)
        page.on("pageerror", lambda error: self.seen.append(f"{where}: {error}"))


def _log_in(browser, live_server, username: str, violations: Violations):
    from playwright.sync_api import expect

    context = browser.new_context(viewport={"width": 1360, "height": 900})
    page = context.new_page()
    page.set_default_timeout(15_000)
    violations.watch(page, username)
    page.goto(f"{live_server.url}/login/")
    page.fill("input[name=username]", username)
    page.fill("input[name=password]", factories.PASSWORD)
    page.click("button[type=submit]")
    expect(page).not_to_have_url(re.compile(r"/login/"))
    return context, page


def test_the_main_pages_work_under_the_policy(live_server, browser):
    from playwright.sync_api import expect

    f0, run, budget = _world()
    violations = Violations()

    context, page = _log_in(browser, live_server, "alice", violations)
    response = page.goto(f"{live_server.url}/")
    assert "default-src 'self'" in response.headers["content-security-policy"]
    expect(page.locator("#panel-rental-panel_leases, .panels").first).to_be_visible()
    page.wait_for_load_state("networkidle")
    expect(page.locator("body")).to_contain_text(f"#{run.lease.pk}")

    page.goto(f"{live_server.url}{run.lease.get_absolute_url()}")
    chart = page.locator(f"#utilization-{run.instance.pk} .uplot")
    expect(chart.locator("canvas")).to_have_count(1)

    page.goto(f"{live_server.url}/projects/alpha/")
    bar = page.locator(f"#quota-{f0.model.pk} .seg-burst")
    expect(bar).to_have_attribute("data-width", "33")
    assert bar.evaluate("element => element.style.width") == "33%"
    page.wait_for_load_state("networkidle")
    screenshot(page, "csp-project-page")

    page.goto(f"{live_server.url}/leases/new/")
    page.fill("[name=purpose]", "check the estimate under the policy")
    page.fill("#id_gpu_count", "2")
    meter = page.locator("#estimate-quota .fill-burst")
    expect(meter).to_have_attribute("data-width", re.compile(r"\d+"))
    page.wait_for_function(
        "() => document.querySelector('#estimate-quota .fill-burst').style.width !== ''"
    )

    for path in ("/leases/", "/pools/", "/images/", "/keys/", "/tokens/", "/notifications/"):
        assert page.goto(f"{live_server.url}{path}").status == 200, path
        page.wait_for_load_state("networkidle")

    # The language menu (a form in the user menu) switches to Chinese and back.
    page.goto(f"{live_server.url}/leases/")
    page.click("details.usermenu summary")
    page.click("#language-switch button")
    expect(page.locator("html")).to_have_attribute("lang", "zh-hans")
    expect(page.locator("body")).to_contain_text("租约")
    # The chart's legend and times follow the page's language and clock.
    page.goto(f"{live_server.url}{run.lease.get_absolute_url()}")
    legend = page.locator(f"#utilization-{run.instance.pk} .u-legend")
    expect(legend).to_contain_text("时间")
    expect(legend).not_to_contain_text("Time")
    page.locator(f"#utilization-{run.instance.pk} .u-over").hover()
    moment = legend.locator(".u-series").first
    expect(moment).to_contain_text(re.compile(r"\d+月\d+日 \d\d:\d\d"))
    expect(moment).not_to_contain_text(re.compile(r"[AP]M|上午|下午"))
    page.click("details.usermenu summary")
    page.click("#language-switch button")
    expect(page.locator("html")).to_have_attribute("lang", "en")
    context.close()

    context, page = _log_in(browser, live_server, "alma", violations)
    for path in ("/approvals/", f"/billing/projects/{f0.alpha.slug}/statement/"):
        assert page.goto(f"{live_server.url}{path}").status == 200, path
        page.wait_for_load_state("networkidle")
    context.close()

    context, page = _log_in(browser, live_server, "fiona", violations)
    page.goto(f"{live_server.url}/billing/finance/")
    page.wait_for_load_state("networkidle")
    context.close()

    context, page = _log_in(browser, live_server, "root", violations)
    for path in (
        "/audit/",
        "/admin/",
        "/admin/rental/provideraccount/",
        f"/admin/billing/budget/{budget.pk}/change/",
    ):
        assert page.goto(f"{live_server.url}{path}").status == 200, path
        page.wait_for_load_state("networkidle")
    page.goto(f"{live_server.url}/api/docs/")
    # Swagger UI, like Redoc, builds its page from the whole schema in the browser.
    expect(page.locator(".swagger-ui .info")).to_contain_text("GPU Portal API", timeout=60_000)
    expect(page.locator(".opblock-tag-section").first).to_be_visible()
    screenshot(page, "csp-swagger-ui", full_page=False)
    page.goto(f"{live_server.url}/api/redoc/")
    # Redoc renders the whole schema in the browser before its first heading: on a busy
    # two-core machine that has taken more than 20 s.
    expect(page.locator("h1").first).to_contain_text("GPU Portal API", timeout=60_000)
    expect(page.locator("body")).to_contain_text("tokens")
    # Its page is tens of thousands of pixels long: the first screen says enough.
    screenshot(page, "csp-redoc", full_page=False)
    context.close()

    # Redoc's bundle always shows its vendor's logo from a CDN; the policy keeps it out (the
    # docs load nothing from outside the portal). Nothing else may be refused.
    refused = [line for line in violations.seen if REDOC_CDN_LOGO not in line]
    assert refused == []
    connections.close_all()
