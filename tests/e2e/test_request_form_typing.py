"""Typing on the request form in headless Chromium: the estimate follows the last values
typed, and the console stays clean even when a change comes while an estimate is still
on its way (issue 17.12: htmx:sendAbort errors were logged while typing)."""

import re
import time

import pytest
from django.db import connections

from tests import factories

pytestmark = [pytest.mark.e2e, pytest.mark.django_db(transaction=True)]


def wait_for(condition, page, what: str, timeout: float = 15) -> None:
    """Let Playwright deliver its events until ``condition()`` holds."""
    deadline = time.monotonic() + timeout
    while not condition():
        assert time.monotonic() < deadline, f"timed out waiting for {what}"
        page.wait_for_timeout(20)


def test_typing_while_an_estimate_is_on_its_way_logs_nothing(live_server, browser):
    from playwright.sync_api import expect

    factories.fixture_f0()
    context = browser.new_context(viewport={"width": 1280, "height": 900})
    page = context.new_page()
    page.set_default_timeout(15_000)
    console: list[str] = []
    page.on("console", lambda m: console.append(f"{m.type}: {m.text}"))
    page.on("pageerror", lambda error: console.append(f"pageerror: {error}"))
    page.goto(f"{live_server.url}/login/")
    page.fill("input[name=username]", "alice")
    page.fill("input[name=password]", factories.PASSWORD)
    page.click("button[type=submit]")
    expect(page).not_to_have_url(re.compile(r"/login/"))

    page.goto(f"{live_server.url}/leases/new/")
    expect(page.locator("#estimate-outcome")).to_be_visible()
    # Estimates are held at the network until the test lets them through, so the second
    # change below surely comes while the first estimate is in flight.
    held: list = []
    page.route("**/leases/estimate/", lambda route: held.append(route))
    page.evaluate(
        "window.triggers = 0;"
        "document.addEventListener('htmx:confirm', function () { window.triggers++; });"
    )
    page.fill("#id_gpu_count", "2")
    wait_for(lambda: len(held) == 1, page, "the first estimate")
    page.fill("#id_duration_hours", "3")  # typed while that estimate is in flight
    page.wait_for_function("window.triggers >= 2")
    released = 0

    def all_answered() -> bool:
        nonlocal released
        for route in held[released:]:
            route.continue_()
            released += 1
        return page.locator("#estimate-total").inner_text() == "$15.00"

    wait_for(all_answered, page, "the estimate of the latest values")

    # 2 GPUs × 3 h × $2.50: the latest values, and the fields keep what was typed.
    expect(page.locator("#estimate-total")).to_have_text("$15.00")
    expect(page.locator("#id_gpu_count")).to_have_value("2")
    expect(page.locator("#id_duration_hours")).to_have_value("3")
    page.unroute("**/leases/estimate/")

    # Plain typing, key by key, as a person does: still nothing in the console.
    page.fill("#id_duration_hours", "")
    page.locator("#id_duration_hours").press_sequentially("12.5", delay=120)
    page.fill("#id_gpu_count", "")
    page.locator("#id_gpu_count").press_sequentially("1", delay=120)
    page.locator("#id_purpose").click()
    expect(page.locator("#estimate-total")).to_have_text("$31.25")
    errors = [line for line in console if line.startswith(("error", "pageerror"))]
    assert errors == []
    context.close()
    connections.close_all()
