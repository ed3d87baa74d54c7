"""The sync of a site of own servers when one of them does not answer: the instances on
the silent server are left as they are (never ended: a server that does not answer cannot
say an instance is gone), while the other servers' instances are synced as usual, and the
lease page says the lease is at risk. Real OpenSSH servers (tests/own_hosts.py); the
silent one has its cable pulled."""

from collections.abc import Iterator
from datetime import UTC, datetime, timedelta
from decimal import Decimal

import pytest
from django.db import connection
from django.test.utils import CaptureQueriesContext
from django.urls import reverse

from rental.fleet import sync
from rental.models import Instance, Offering, OwnHost, ProviderAccount, RegionSync, Reservation
from rental.providers.ssh import SshProvider, instance_type
from tests import factories, own_hosts
from tests.own_hosts import RTX_4090, Site

UNAVAILABLE = own_hosts.unavailable()
pytestmark = [
    pytest.mark.django_db,
    pytest.mark.skipif(bool(UNAVAILABLE), reason=UNAVAILABLE or "available"),
]
T0 = datetime(2026, 12, 1, 9, 0, tzinfo=UTC)
REGION = "dc-1"


@pytest.fixture
def site() -> Iterator[Site]:
    with own_hosts.site({"box-a": 2 * [RTX_4090], "box-b": 2 * [RTX_4090]}) as made:
        yield made


@pytest.fixture
def basement(site, settings, monkeypatch):
    settings.PORTAL_SYNC_GRACE_SECONDS = 60
    # The real driver, with a short connect timeout so a pulled cable costs a second.
    monkeypatch.setattr(sync, "get_provider", lambda config: SshProvider(config, connect_timeout=1))
    account = ProviderAccount.objects.create(name="Basement", driver="ssh", regions=[REGION])
    for test_host in site.hosts.values():
        host = OwnHost(account=account, name=test_host.name, address=test_host.address)
        host.set_private_key(site.admin_key.private)
        host.save()
    model = factories.gpu_model("RTX 4090 24GB")
    offering = Offering.objects.create(
        account=account,
        region=REGION,
        instance_type=instance_type(model.name, 2),
        gpu_model=model,
        gpus_per_instance=2,
        vcpus=0,
        memory_gib=0,
        on_demand_price_per_hour=Decimal("0.50"),
        zones=["box-a", "box-b"],
    )
    alpha, alice = factories.project("alpha"), factories.user("alice")
    factories.member(alice, alpha)

    def lease_on(host: str) -> Instance:
        lease = Reservation.objects.create(
            project=alpha,
            requester=alice,
            gpu_model=model,
            gpu_count=2,
            offering=offering,
            start=T0,
            end=T0 + timedelta(hours=8),
            status=Reservation.Status.ACTIVE,
            tier="guaranteed",
        )
        # The host program knows no such allocation: on box-a it has vanished.
        return Instance.objects.create(
            reservation=lease,
            account=account,
            offering=offering,
            region=REGION,
            zone=host,
            external_id=f"{host}/gp-{host[-1] * 10}",
            idempotency_key=f"key-{host}",
            state=Instance.State.RUNNING,
            market="on_demand",
            gpu_count=2,
            rate_per_hour=Decimal("1.00"),
            running_at=T0,
        )

    return account, alice, lease_on


def sync_at(account, at):
    RegionSync.objects.filter(account=account).update(claimed_until=None)
    return sync.sync_account_region(account_id=account.pk, region=REGION, now=at)


def state(instance):
    return Instance.objects.get(pk=instance.pk).state


def test_a_silent_server_leaves_its_instances_alone_and_the_others_are_synced(site, basement):
    account, _alice, lease_on = basement
    on_a, on_b = lease_on("box-a"), lease_on("box-b")
    site.hosts["box-b"].unplug()

    sync_at(account, T0)  # both missing from the describe: not yet gone
    sync_at(account, T0 + timedelta(seconds=61))  # past the grace: looked up by id

    assert state(on_a) == Instance.State.TERMINATED  # box-a answered: it is gone
    assert Reservation.objects.get(pk=on_a.reservation_id).status != Reservation.Status.ACTIVE
    assert state(on_b) == Instance.State.RUNNING  # box-b did not: left as it is
    assert Reservation.objects.get(pk=on_b.reservation_id).status == Reservation.Status.ACTIVE
    assert RegionSync.objects.get(account=account, region=REGION).sync_error == ""
    assert ProviderAccount.objects.get(pk=account.pk).sync_error == ""


def test_a_server_known_not_to_answer_is_not_asked_and_its_lease_is_at_risk(site, basement, client):
    account, alice, lease_on = basement
    on_a, on_b = lease_on("box-a"), lease_on("box-b")
    site.hosts["box-b"].unplug()
    OwnHost.objects.filter(name="box-b").update(
        unreachable_since=T0, state=OwnHost.State.UNREACHABLE
    )

    for at in (T0, T0 + timedelta(seconds=61), T0 + timedelta(seconds=122)):
        sync_at(account, at)

    assert state(on_a) == Instance.State.TERMINATED
    row = Instance.objects.get(pk=on_b.pk)
    assert (row.state, row.missing_since) == (Instance.State.RUNNING, None)  # untouched

    client.force_login(alice)
    url = reverse("rental:lease", args=[on_b.reservation_id])
    with CaptureQueriesContext(connection) as one:
        page = client.get(url).content.decode()
    assert "At risk: its server box-b is not answering (since 2026-12-01 09:00 UTC)." in page
    assert (
        "At risk"
        not in client.get(reverse("rental:lease", args=[on_a.reservation_id])).content.decode()
    )
    # A second instance of the lease on a second silent server: the same number of queries.
    OwnHost.objects.filter(name="box-a").update(unreachable_since=T0)
    Instance.objects.filter(pk=on_a.pk).update(
        reservation=on_b.reservation_id, state=Instance.State.RUNNING
    )
    with CaptureQueriesContext(connection) as two:
        page = client.get(url).content.decode()
    assert "At risk: its server box-a is not answering" in page
    assert len(two) == len(one)
