"""In headless Chromium: the lease page with the utilization chart drawn by the vendored
uPlot, the SSH, Jupyter and TensorBoard commands, the idle warning and its button; the
SSH key page adding a key and refusing a weak one."""

import re
from datetime import timedelta

import pytest
from django.db import connections
from django.utils import timezone

from rental.models import Instance, UtilizationSample
from tests import factories
from tests.e2e.conftest import screenshot
from tests.rental.agent.conftest import running_lease
from tests.rental.agent.test_pages import ed25519_key, rsa_key

pytestmark = [pytest.mark.e2e, pytest.mark.django_db(transaction=True)]


def log_in(page, live_server, username):
    from playwright.sync_api import expect

    page.goto(f"{live_server.url}/login/")
    page.fill("input[name=username]", username)
    page.fill("input[name=password]", factories.PASSWORD)
    page.click("button[type=submit]")
    expect(page).not_to_have_url(re.compile(r"/login/"))


def test_it_shows_the_lease_with_its_chart_and_commands(live_server, browser):
    from playwright.sync_api import expect

    f0 = factories.fixture_f0()
    f0.image.frameworks = "PyTorch 2.5, JupyterLab 4.2, TensorBoard 2.17"
    f0.image.save()
    run = running_lease(f0, gpus=2)
    end = timezone.now().replace(second=0, microsecond=0)
    UtilizationSample.objects.bulk_create(
        UtilizationSample(
            instance=run.instance,
            at=end - timedelta(minutes=180 - m),
            gpu_utilization=[0.0 if m > 150 else 60 + (m % 30), 0.0 if m > 150 else 90.0],
            memory_used_mb=[30_000.0 if m <= 150 else 2_000.0, 60_000.0],
        )
        for m in range(181)
    )
    Instance.objects.filter(pk=run.instance.pk).update(
        agent_last_sample_at=end,
        idle_warned_at=end - timedelta(minutes=10),
        health="unhealthy",
        health_message="The acceptance burn reached 120.5 TFLOPS, under 50 % of the rated 312.0.",
    )
    page = browser.new_page(viewport={"width": 1360, "height": 1000})
    page.set_default_timeout(15_000)
    log_in(page, live_server, "alice")

    page.goto(f"{live_server.url}{run.lease.get_absolute_url()}")

    expect(page.locator(f"#ssh-{run.instance.pk}")).to_have_text("ssh ubuntu@203.0.113.10")
    expect(page.locator(f"#jupyter-tunnel-{run.instance.pk}")).to_contain_text(
        "ssh -N -L 8888:localhost:8888"
    )
    expect(page.locator(f"#tensorboard-tunnel-{run.instance.pk}")).to_contain_text("6006")
    expect(page.locator(f"#health-{run.instance.pk}")).to_contain_text("120.5 TFLOPS")
    chart = page.locator(f"#utilization-{run.instance.pk} .uplot")
    expect(chart).to_be_visible()
    expect(chart.locator("canvas")).to_have_count(1)
    expect(chart.locator(".u-legend")).to_contain_text("GPU 1 memory (GB)")
    screenshot(page, "agent-lease-page", guide="engineer-lease-agent")

    page.click(f"#still-using-{run.instance.pk}")
    expect(page.locator(".alert, .messages").first).to_contain_text("starts again from now")
    expect(page.locator(f"#still-using-{run.instance.pk}")).to_have_count(0)
    assert Instance.objects.get(pk=run.instance.pk).idle_reset_at is not None
    connections.close_all()  # the ORM's own connection under Playwright's loop


def test_it_manages_ssh_keys(live_server, browser):
    from playwright.sync_api import expect

    factories.fixture_f0()
    page = browser.new_page(viewport={"width": 1360, "height": 900})
    page.set_default_timeout(15_000)
    log_in(page, live_server, "alice")
    page.click(".usermenu summary")
    page.click("#ssh-keys-link")
    expect(page.locator("#no-ssh-keys")).to_be_visible()

    page.fill("#id_name", "old rsa")
    page.fill("#id_public_key", rsa_key(1024))
    page.click("#add-ssh-key")
    expect(page.locator("#ssh-key-error")).to_contain_text("at least 2048 bits")

    page.fill("#id_name", "laptop")
    page.fill("#id_public_key", ed25519_key())
    page.click("#add-ssh-key")
    expect(page.locator("#ssh-key-table")).to_contain_text("SHA256:")
    expect(page.locator("#ssh-key-table")).to_contain_text("ssh-ed25519")
    screenshot(page, "agent-ssh-keys", guide="engineer-ssh-keys")
    connections.close_all()


def test_it_stops_and_resumes_a_lease(live_server, browser):
    from playwright.sync_api import expect

    f0 = factories.fixture_f0()
    run = running_lease(f0, priority="experiment")
    page = browser.new_page(viewport={"width": 1360, "height": 900})
    page.set_default_timeout(15_000)
    page.on("dialog", lambda dialog: dialog.accept())
    log_in(page, live_server, "alice")
    page.goto(f"{live_server.url}{run.lease.get_absolute_url()}")

    page.click("#stop-lease")
    expect(page.locator(".messages")).to_contain_text("GPU billing has stopped")
    expect(page.locator("#lease-status")).to_contain_text("Stopped")
    screenshot(page, "agent-lease-stopped")
    page.click("#resume-lease")
    expect(page.locator(".messages")).to_contain_text("Resuming on the kept disk.")
    expect(page.locator("#lease-status")).to_contain_text("Provisioning")
    connections.close_all()
