"""The portal offers only what a lease's drivers can do: own GPU servers (the ``ssh``
driver) are never stopped, saved as images, given data volumes or sold on spot."""

from decimal import Decimal

import pytest
from django.urls import reverse

from portal.models import AuditEvent
from rental import selectors
from rental.catalog import volumes
from rental.catalog.capabilities import (
    boots_images,
    can,
    check_lease_can,
    lease_can,
    lease_drivers,
)
from rental.forms import LeaseRequestForm
from rental.models import (
    GpuModel,
    Image,
    Instance,
    Offering,
    ProviderAccount,
    Quota,
    Reservation,
)
from rental.providers.base import Capability
from rental.providers.registry import DRIVERS
from tests import factories
from tests.api.leases_world import client_for, row_counts, running_lease

pytestmark = pytest.mark.django_db
STOPPED_REFUSAL = "This lease runs on own GPU servers, which cannot be stopped."


@pytest.fixture
def f0(db):
    return factories.fixture_f0()


def own_servers(model: GpuModel, *, spot: str | None = "1.00") -> Offering:
    """A site of own GPU servers selling ``model`` (a spot price set, which it cannot use)."""
    site = ProviderAccount.objects.create(name="Own servers", driver="ssh", regions=["site-a"])
    offering = factories.offering(site, model, instance_type="host.a100x1", spot=spot)
    Offering.objects.filter(pk=offering.pk).update(region="site-a", zones=["site-a"])
    offering.refresh_from_db()
    return offering


def on_own_servers(f0) -> Reservation:
    """An active lease whose instance runs on an own server."""
    lease = running_lease(f0)
    offering = own_servers(f0.model)
    Reservation.objects.filter(pk=lease.pk).update(offering=offering)
    Instance.objects.filter(reservation=lease).update(
        account=offering.account, offering=offering, region="site-a", zone=""
    )
    lease.refresh_from_db()
    return lease


def test_it_reads_capabilities_from_the_drivers_table(f0) -> None:
    offering = own_servers(f0.model)

    assert can(f0.offering, Capability.STOP_START)
    assert can(f0.account, Capability.SPOT)
    assert not can(offering, Capability.STOP_START)
    assert not can(offering.account, Capability.VOLUMES)


def test_only_own_servers_run_their_own_system_whatever_the_image(f0) -> None:
    # A pod or a cloud VM boots the lease's image, even where the driver cannot save one.
    assert [name for name, entry in DRIVERS.items() if not entry.boots_images] == ["ssh"]
    assert boots_images(f0.offering)
    assert not boots_images(own_servers(f0.model))


def test_it_knows_the_drivers_of_a_lease_in_one_query(f0, django_assert_num_queries) -> None:
    lease = on_own_servers(f0)

    with django_assert_num_queries(1):
        assert lease_drivers(lease) == ["ssh"]
    loaded = list(lease.instances.select_related("account"))
    lease = Reservation.objects.select_related("offering__account").get(pk=lease.pk)
    with django_assert_num_queries(0):
        assert not lease_can(lease, Capability.STOP_START, loaded)


def test_it_refuses_a_lease_that_failed_over_to_own_servers(f0) -> None:
    lease = running_lease(f0)  # offered on the cloud, one instance placed on an own server
    offering = own_servers(f0.model)
    Instance.objects.filter(reservation=lease).update(account=offering.account, offering=offering)

    assert lease_drivers(lease) == ["aws", "ssh"]
    assert not lease_can(lease, Capability.STOP_START)
    with pytest.raises(Exception) as caught:
        check_lease_can(lease, Capability.STOP_START)
    assert (caught.value.status, caught.value.code) == (400, "not_supported")
    assert caught.value.message == STOPPED_REFUSAL


# --- stop and start ----------------------------------------------------------------------


def test_it_offers_no_stop_on_the_page_of_a_lease_on_own_servers(client, f0) -> None:
    lease = on_own_servers(f0)
    client.force_login(f0.alice)

    page = client.get(reverse("rental:lease", args=[lease.pk]))

    assert page.status_code == 200
    assert 'id="stop-lease"' not in page.content.decode()
    assert 'id="save-image"' not in page.content.decode()


def test_it_offers_stop_on_the_page_of_a_lease_on_a_cloud(client, f0) -> None:
    lease = running_lease(f0)
    client.force_login(f0.alice)

    page = client.get(reverse("rental:lease", args=[lease.pk]))

    assert 'id="stop-lease"' in page.content.decode()
    assert 'id="save-image"' in page.content.decode()


def test_it_refuses_to_stop_a_lease_on_own_servers_through_the_api(f0) -> None:
    lease = on_own_servers(f0)
    before = row_counts()

    answer = client_for(f0.alice).post(
        reverse("api:lease-stop", kwargs={"pk": lease.pk}), format="json"
    )

    assert answer.status_code == 400
    assert answer.json()["code"] == "not_supported"
    assert answer.json()["detail"] == STOPPED_REFUSAL
    assert row_counts() == before
    assert Reservation.objects.get(pk=lease.pk).status == Reservation.Status.ACTIVE
    assert not Instance.objects.filter(reservation=lease).exclude(state="running").exists()


def test_it_refuses_to_stop_a_lease_on_own_servers_from_the_page(client, f0) -> None:
    lease = on_own_servers(f0)
    client.force_login(f0.alice)

    answer = client.post(reverse("rental:lease_stop", args=[lease.pk]), follow=True)

    assert STOPPED_REFUSAL in answer.content.decode()
    assert Reservation.objects.get(pk=lease.pk).status == Reservation.Status.ACTIVE
    assert not AuditEvent.objects.filter(verb="lease.stopped").exists()


def test_it_still_stops_a_lease_on_a_cloud_through_the_api(f0) -> None:
    lease = running_lease(f0)

    answer = client_for(f0.alice).post(
        reverse("api:lease-stop", kwargs={"pk": lease.pk}), format="json"
    )

    assert answer.status_code == 200 and answer.json()["status"] == "stopped"


# --- images ------------------------------------------------------------------------------


def test_it_refuses_to_save_an_image_of_a_lease_on_own_servers(f0) -> None:
    lease = on_own_servers(f0)
    before = row_counts()

    answer = client_for(f0.alice).post(
        "/api/v1/images", {"lease": lease.pk, "name": "my env"}, format="json"
    )

    assert answer.status_code == 400
    assert answer.json()["code"] == "not_supported"
    assert answer.json()["detail"] == (
        "This lease runs on own GPU servers, which cannot save an instance as an image."
    )
    assert row_counts() == before
    assert not Image.objects.filter(name="my env").exists()


# --- data volumes ------------------------------------------------------------------------


def test_it_offers_volume_zones_only_where_a_driver_keeps_volumes(f0) -> None:
    Offering.objects.filter(pk=f0.offering.pk).update(zones=["us-east-1a"])
    own_servers(f0.model)

    assert [zone.zone for zone in volumes.volume_zones()] == ["us-east-1a"]


def test_it_says_why_no_volume_can_be_made_on_own_servers_alone(f0) -> None:
    Offering.objects.filter(pk=f0.offering.pk).update(is_available=False)
    own_servers(f0.model)

    assert volumes.volume_zones() == []
    assert "own GPU servers keep none" in volumes.why_no_zone([])


# --- the spot market ---------------------------------------------------------------------


def test_it_fits_no_own_server_on_the_spot_market(f0) -> None:
    offering = Offering.objects.select_related("account").get(pk=own_servers(f0.model).pk)

    assert selectors.fitting([offering], gpu_count=1, market="spot") == []
    assert selectors.fitting([offering], gpu_count=1, market="on_demand") == [offering]
    assert not selectors.sells_on(offering, "spot")


def only_on_own_servers(f0) -> GpuModel:
    """A GPU model alpha has a quota for, sold by own servers alone."""
    model = factories.gpu_model("H100 80GB")
    Quota.objects.create(
        project=f0.alpha, gpu_model=model, guaranteed=1, ceiling=2, weight=Decimal(1)
    )
    own_servers(model)
    return model


def request_form(f0, model: GpuModel, market: str) -> LeaseRequestForm:
    data = {
        "project": f0.alpha.pk,
        "gpu_model": model.pk,
        "gpu_count": 1,
        "market": market,
        "priority": "experiment",
        "duration_hours": "4",
        "purpose": "a test",
    }
    return LeaseRequestForm(data, user=f0.alice, checks_keys=False)


def test_it_offers_no_spot_for_a_model_only_own_servers_sell(f0) -> None:
    model = only_on_own_servers(f0)

    form = request_form(f0, model, "spot")

    assert [value for value, _label in form.fields["market"].choices] == ["on_demand"]
    assert not form.is_valid()
    assert "market" in form.errors


def test_it_offers_spot_for_a_model_a_cloud_sells(f0) -> None:
    form = request_form(f0, f0.model, "spot")

    assert [value for value, _label in form.fields["market"].choices] == ["on_demand", "spot"]
    assert form.current_market == "spot"
