"""In headless Chromium, with a real worker and the local EC2 endpoint: the engineer picks a
data volume on the request form, the estimate places the launch in its zone (and says so
when the volume's zone has no instance type), the lease starts there and its page shows
the volume attached."""

import re
import time

import pytest

from rental.catalog import volumes
from rental.fleet import volume_cloud
from rental.models import Reservation
from tests import factories
from tests.e2e.conftest import screenshot
from tests.e2e.test_agent_pages import log_in

pytestmark = [pytest.mark.e2e, pytest.mark.django_db(transaction=True)]


def test_it_launches_a_lease_next_to_the_picked_volume(live_server, cloud, worker, browser):
    from playwright.sync_api import expect

    f0 = factories.fixture_f0(endpoint_url=cloud.url)
    f0.offering.zones = ["us-east-1a", "us-east-1b"]
    f0.offering.save()
    made = {}
    for name, zone, size in (("datasets", "us-east-1b", 500), ("archive", "us-east-1a", 2000)):
        made[name] = volumes.create_volume(
            actor=f0.alice, project=f0.alpha, name=name, size_gb=size, zone=zone
        )
        volume_cloud.create_in_cloud(made[name].pk)
    # Zones no instance type serves any more: the offering moved away from 1a.
    f0.offering.zones = ["us-east-1b"]
    f0.offering.save()

    page = browser.new_page(viewport={"width": 1360, "height": 1000})
    page.set_default_timeout(15_000)
    log_in(page, live_server, "alice")
    page.goto(f"{live_server.url}/leases/new/?project=alpha")
    page.fill("input[name=gpu_count]", "1")
    page.fill("input[name=duration_hours]", "4")
    page.fill("[name=purpose]", "train on the shared dataset")
    # Let the estimates the typing asked for land first: each redraws the dependent
    # selects, the volume's among them.
    expect(page.locator("#estimate-total")).to_contain_text("$10.00")  # 1 × $2.50 × 4 h
    page.wait_for_load_state("networkidle")
    options = page.locator("#id_data_volume option").all_text_contents()
    assert options == [
        "No data volume",
        "archive · 2000 GB · us-east-1a",
        "datasets · 500 GB · us-east-1b",
    ]

    page.select_option("#id_data_volume", label="archive · 2000 GB · us-east-1a")
    expect(page.locator("#estimate-outcome")).to_have_attribute("data-outcome", "invalid")
    expect(page.locator("#estimate-outcome")).to_contain_text("in one instance in us-east-1a")

    page.select_option("#id_data_volume", label="datasets · 500 GB · us-east-1b")
    expect(page.locator("#estimate-zone")).to_contain_text("us-east-1b")
    expect(page.locator("#estimate-zone")).to_contain_text("datasets (500 GB)")
    expect(page.locator("#estimate-outcome")).to_have_attribute("data-outcome", "guaranteed")
    screenshot(page, "request-form-data-volume", guide="engineer-request-volume")

    page.click("#submit-lease")
    expect(page).to_have_url(re.compile(r"/leases/\d+/$"))
    lease = Reservation.objects.get()
    assert lease.data_volume_id == made["datasets"].pk
    expect(page.locator("#lease-status")).to_have_text(re.compile("Active"), timeout=60_000)
    instance = lease.instances.get()
    assert instance.zone == "us-east-1b"

    # The attachment is a worker task after the instance runs; the card is not polled.
    deadline = time.monotonic() + 60
    while "attached as" not in page.locator("#lease-volume").inner_text():
        assert time.monotonic() < deadline, page.locator("#lease-volume").inner_text()
        time.sleep(1)
        page.reload()
    expect(page.locator("#lease-volume")).to_contain_text("In use, attached as /dev/sdf")
    screenshot(page, "lease-with-data-volume")
