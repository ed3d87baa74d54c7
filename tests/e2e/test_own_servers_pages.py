"""The demo's server room in headless Chromium, at 1280 and 390 px: the L4 pool's "Own
servers" with both servers' GPUs leased by amira's lease, and that lease's page (an SSH
command per server, "The server's own system" as its image). The leases launch through
the demo's transport (devcloud/own_servers.py) as in ``manage.py demo``. The screenshots
land in tests/artifacts/; with PORTAL_DOCS_SCREENSHOTS=1 they also replace docs/images/."""

import re
from datetime import timedelta
from io import StringIO

import pytest
from django.core.management import call_command
from django.core.management.base import OutputWrapper
from django.db import connections
from django.utils import timezone

from devcloud import own_servers
from rental.demo import DEMO_LIVE_LEASES, start_live_leases
from rental.demo.own_servers import OWN_GPU_MODEL, server_gpus
from rental.fleet import instances
from rental.fleet.cloud import LaunchRetry
from rental.fleet.own_hosts import check_all
from rental.fleet.sync import sync_instances
from rental.management.commands.seed_demo import DEMO_ACCOUNT
from rental.models import Pool, Reservation
from tests import factories
from tests.e2e.conftest import screenshot, settle

pytestmark = [pytest.mark.e2e, pytest.mark.django_db(transaction=True)]
SIZES = ((1280, 950, ""), (390, 1400, "-phone"))


def launch_everything() -> None:
    """The worker's launches and the beat's sync and host check, in this process."""
    for lease in Reservation.objects.exclude(status__in=Reservation.FINAL).order_by("pk"):
        for instance in lease.instances.order_by("pk"):
            now = timezone.now()
            for _ in range(12):
                try:
                    instances.provision_instance(instance_id=instance.pk, now=now)
                except LaunchRetry:
                    now += timedelta(seconds=1)
                    continue
                break
    sync_instances()
    check_all()


def test_the_server_room_in_the_pool_and_on_the_lease_page(
    live_server, cloud, settings, monkeypatch, tmp_path, browser
):
    from playwright.sync_api import expect

    monkeypatch.setenv(own_servers.ROOT_VARIABLE, str(tmp_path))
    settings.PORTAL_SSH_TRANSPORT = "devcloud.own_servers.run"
    own_servers.prepare(server_gpus())
    factories.account(name=DEMO_ACCOUNT, endpoint_url=cloud.url)
    call_command("load_catalog", "--account", DEMO_ACCOUNT, stdout=StringIO())
    call_command("seed_demo", "--own-servers", stdout=StringIO(), stderr=StringIO())
    start_live_leases(OutputWrapper(StringIO()))
    launch_everything()
    purpose = next(spec.purpose for spec in DEMO_LIVE_LEASES if spec.username == "amira")
    lease = Reservation.objects.get(requester__username="amira", purpose=purpose)
    pool = Pool.objects.get(gpu_model__name=OWN_GPU_MODEL)

    for width, height, suffix in SIZES:
        context = browser.new_context(viewport={"width": width, "height": height})
        page = context.new_page()
        page.goto(f"{live_server.url}/login/")
        page.fill("input[name=username]", "amira")
        page.fill("input[name=password]", "demo-amira")
        page.click("button[type=submit]")
        expect(page).not_to_have_url(re.compile(r"/login/"))

        page.goto(f"{live_server.url}/pools/{pool.pk}/")
        expect(page.locator("body")).to_contain_text("Own servers")
        expect(page.locator("body")).to_contain_text(f"lease #{lease.pk}")
        settle(page)
        name = f"own-servers-pool{suffix}"
        screenshot(page, name, guide=name)  # the viewport: the servers are near the top

        page.goto(f"{live_server.url}/leases/{lease.pk}/")
        expect(page.locator("#lease-own-system")).to_have_text("The server's own system")
        expect(page.locator("body")).to_contain_text("gpu-box-2")
        settle(page)
        name = f"own-server-lease{suffix}"
        screenshot(page, name, guide=name, full_page=True)  # down to the request's image
        context.close()
    connections.close_all()
