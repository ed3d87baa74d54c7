"""The pool page's "Own servers": each host with GPUs of the pool's model, its state in
words, each GPU free or leased (linked for those who may see the lease), in the same
number of queries for one host as for many."""

import re
from datetime import timedelta
from decimal import Decimal

import pytest
from django.db import connection
from django.test.utils import CaptureQueriesContext
from django.urls import reverse
from django.utils import timezone

from rental.models import Instance, Offering, OwnHost, ProviderAccount, Reservation

pytestmark = pytest.mark.django_db


def gpu(index: int, model, lease: str = "") -> dict:
    return {
        "index": index,
        "name": "NVIDIA A100-SXM4-80GB",
        "memory_mib": 81920,
        "uuid": f"GPU-{index}",
        "gpu_model": model.pk,
        "busy_pids": [],
        "lease": lease,
    }


def add_host(account, model, name: str, *, leased_by=None, state=OwnHost.State.OK) -> OwnHost:
    lease_key = ""
    if leased_by is not None:
        lease_key = f"key-{name}"
        offering = Offering.objects.get_or_create(
            account=account,
            region="dc-1",
            instance_type="own-2x-a100-80gb",
            defaults={
                "gpu_model": model,
                "gpus_per_instance": 2,
                "vcpus": 0,
                "memory_gib": 0,
                "on_demand_price_per_hour": Decimal("0.60"),
            },
        )[0]
        now = timezone.now()
        lease = Reservation.objects.create(
            project=leased_by.project,
            requester=leased_by.user,
            gpu_model=model,
            gpu_count=2,
            offering=offering,
            start=now,
            end=now + timedelta(hours=4),
            status=Reservation.Status.ACTIVE,
            tier="guaranteed",
        )
        Instance.objects.create(
            reservation=lease,
            account=account,
            offering=offering,
            region="dc-1",
            zone=name,
            idempotency_key=lease_key,
            state=Instance.State.RUNNING,
            market="on_demand",
            gpu_count=2,
            rate_per_hour=Decimal("0.60"),
        )
    gpus = [gpu(0, model, lease_key), gpu(1, model, lease_key), gpu(2, model), gpu(3, model)]
    return OwnHost.objects.create(
        account=account,
        name=name,
        address="10.0.0.1",
        gpus=gpus,
        state=state,
        unreachable_since=timezone.now() if state == OwnHost.State.UNREACHABLE else None,
    )


class Holder:
    def __init__(self, project, user):
        self.project, self.user = project, user


@pytest.fixture
def site(f0):
    account = ProviderAccount.objects.create(name="Basement", driver="ssh", regions=["dc-1"])
    return account


def said(html: str, host: str) -> dict[int, str]:
    """What the page says of each GPU of ``host``, tags and spacing left out."""
    items = re.findall(rf'<li id="own-server-{host}-gpu-(\d+)">(.*?)</li>', html, re.S)
    return {
        int(index): " ".join(re.sub(r"<[^>]+>", " ", text).split()).split(": ", 1)[1]
        for index, text in items
    }


def page(client, who, f0) -> str:
    client.force_login(who)
    response = client.get(reverse("rental:pool", args=[f0.pool.pk]))
    assert response.status_code == 200
    return response.content.decode()


def test_it_shows_each_host_and_which_gpus_are_leased_and_free(client, f0, site):
    host = add_host(site, f0.model, "box-a", leased_by=Holder(f0.alpha, f0.alice))
    add_host(site, f0.model, "box-b", state=OwnHost.State.UNREACHABLE)
    lease = Reservation.objects.get()
    html = page(client, f0.alice, f0)
    assert 'id="pool-own-servers"' in html and "box-a" in html
    assert f'href="{reverse("rental:lease", args=[lease.pk])}"' in html
    assert f"leased, lease #{lease.pk}" in html
    assert "Not answering since" in html and "its leases are at risk" in html
    assert said(html, "box-a") == {
        0: f"leased, lease #{lease.pk}",
        1: f"leased, lease #{lease.pk}",
        2: "free",
        3: "free",
    }
    assert said(html, "box-b") == {0: "free", 1: "free", 2: "free", 3: "free"}
    # An engineer of another project sees the GPUs taken, not whose lease.
    html = page(client, f0.bob, f0)
    assert said(html, "box-a") == {0: "leased", 1: "leased", 2: "free", 3: "free"}
    assert host.name in html


def test_a_pool_with_no_own_servers_shows_no_section(client, f0, site):
    assert 'id="pool-own-servers"' not in page(client, f0.admin, f0)
    assert 'id="pool-own-servers"' not in page(client, f0.alice, f0)


@pytest.mark.parametrize("who", ["admin", "alice"])
def test_it_reads_the_hosts_in_the_same_queries_for_one_or_many(client, f0, site, who):
    user = getattr(f0, who)
    add_host(site, f0.model, "box-0", leased_by=Holder(f0.alpha, f0.alice))
    client.force_login(user)
    url = reverse("rental:pool", args=[f0.pool.pk])
    client.get(url)
    with CaptureQueriesContext(connection) as one:
        client.get(url)
    for n in range(1, 6):
        add_host(site, f0.model, f"box-{n}", leased_by=Holder(f0.beta, f0.bob))
    with CaptureQueriesContext(connection) as many:
        html = client.get(url).content.decode()
    assert len(re.findall(r'<tr id="own-server-box-', html)) == 6
    assert len(many) == len(one)
