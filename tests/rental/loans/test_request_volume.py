"""A data volume picked on the request form (issue 8.9): the form lists the project's
available volumes, the estimate places the launch in the volume's zone, a volume that
cannot be used is refused on its field with nothing written, and the lease launches in
that zone against the local endpoint and shows its volume."""

import re
from datetime import timedelta

import pytest
from django.urls import reverse

from rental.catalog import volumes
from rental.fleet import instances, sync, volume_cloud
from rental.loans import admission
from rental.models import DataVolume, Reservation
from tests import factories


@pytest.fixture
def f0v(db, cloud):
    f0 = factories.fixture_f0(endpoint_url=cloud.url)
    f0.offering.zones = ["us-east-1a", "us-east-1b"]
    f0.offering.save()
    return f0


def volume(f0, *, project=None, name="datasets", zone="us-east-1b", size=500, state="available"):
    return DataVolume.objects.create(
        project=project or f0.alpha,
        account=f0.account,
        name=name,
        region="us-east-1",
        zone=zone,
        size_gb=size,
        volume_id=f"vol-{name}",
        idempotency_key=f"key-{name}",
        state=state,
    )


def form_data(f0, **changes):
    return {
        "project": f0.alpha.pk,
        "gpu_model": f0.model.pk,
        "gpu_count": "1",
        "duration_hours": "3",
        "priority": "experiment",
        "market": "on_demand",
        "purpose": "tests",
        **changes,
    }


def volume_options(html: str) -> list[str]:
    select = re.search(r'<select name="data_volume".*?</select>', html, re.S)[0]
    return re.findall(r"<option[^>]*>([^<]*)</option>", select)


def test_it_lists_only_the_projects_available_volumes_with_size_and_zone(f0v, client, t0):
    volume(f0v, name="datasets")
    volume(f0v, name="creating", state="creating")
    volume(f0v, name="weights", zone="us-east-1a", size=50)
    held = volume(f0v, name="held")
    volume(f0v, project=f0v.beta, name="theirs")
    admission.submit_reservation(
        actor=f0v.alice,
        project=f0v.alpha,
        gpu_model=f0v.model,
        gpu_count=1,
        duration_hours=1,
        priority="experiment",
        market="on_demand",
        now=t0,
    )
    Reservation.objects.update(data_volume=held)
    client.force_login(f0v.alice)
    page = client.get(reverse("rental:lease_new")).content.decode()
    assert volume_options(page) == [
        "No data volume",
        "datasets · 500 GB · us-east-1b",
        "weights · 50 GB · us-east-1a",
    ]
    assert 'id="estimate-zone"' not in page  # no volume picked: no placement said


def test_it_refreshes_the_volumes_when_the_project_changes(f0v, client):
    volume(f0v, name="datasets")
    volume(f0v, project=f0v.beta, name="theirs", zone="us-east-1a", size=20)
    factories.member(f0v.alice, f0v.beta)
    client.force_login(f0v.alice)
    answer = client.post(
        reverse("rental:lease_estimate"),
        form_data(f0v, project=f0v.beta.pk),
        HTTP_HX_REQUEST="true",
    )
    html = answer.content.decode()
    assert 'id="field-data_volume" hx-swap-oob="true"' in html
    assert volume_options(html) == ["No data volume", "theirs · 20 GB · us-east-1a"]


def test_the_estimate_says_the_launch_is_placed_in_the_volume_zone(f0v, client):
    datasets = volume(f0v, name="datasets", zone="us-east-1b")
    client.force_login(f0v.alice)
    answer = client.post(
        reverse("rental:lease_estimate"),
        form_data(f0v, data_volume=datasets.pk),
        HTTP_HX_REQUEST="true",
    )
    html = answer.content.decode()
    zone = re.search(r'id="estimate-zone">(.*?)</dd>', html, re.S)[1]
    assert "us-east-1b" in zone and "datasets" in zone and "500 GB" in zone
    assert 'data-outcome="guaranteed"' in html
    # Two GPUs cannot run as one instance of a one-GPU type: said before sending.
    two = client.post(
        reverse("rental:lease_estimate"),
        form_data(f0v, data_volume=datasets.pk, gpu_count="2"),
        HTTP_HX_REQUEST="true",
    ).content.decode()
    assert 'data-outcome="invalid"' in two
    assert "in one instance in us-east-1b" in two
    assert not Reservation.objects.exists()


def test_it_submits_with_the_volume_and_launches_in_its_zone(f0v, client, t0):
    made = volumes.create_volume(
        actor=f0v.alice, project=f0v.alpha, name="datasets", size_gb=500, zone="us-east-1b", now=t0
    )
    volume_cloud.create_in_cloud(made.pk, now=t0)
    client.force_login(f0v.alice)
    response = client.post(reverse("rental:lease_new"), form_data(f0v, data_volume=made.pk))
    assert response.status_code == 302
    lease = Reservation.objects.get()
    assert (lease.data_volume_id, lease.offering_id, lease.status) == (
        made.pk,
        f0v.offering.pk,
        "provisioning",
    )

    [instance] = lease.instances.all()
    instances.provision_instance(instance_id=instance.pk, now=t0)
    sync.sync_instances(now=t0 + timedelta(seconds=30))
    instance.refresh_from_db()
    assert instance.zone == "us-east-1b"  # the volume's zone, not the offering's first
    volume_cloud.attach_in_cloud(made.pk, now=t0 + timedelta(seconds=31))
    made.refresh_from_db()
    assert (made.state, made.attached_instance_id) == ("in_use", instance.pk)

    page = client.get(lease.get_absolute_url()).content.decode()
    shown = re.search(r'id="lease-volume">(.*?)</dd>', page, re.S)[1]
    assert "datasets" in shown and "500 GB" in shown and "us-east-1b" in shown
    assert "attached as /dev/sdf" in shown


@pytest.mark.parametrize(
    ("case", "message"),
    [
        ("other_project", "belongs to another project"),
        ("not_available", "not available"),
        ("held", "already used by lease"),
        ("zone", "in one instance in us-east-1c"),
        ("unknown", "Pick one of the project&#x27;s available data volumes"),
        ("outsiders", "Pick one of the project&#x27;s available data volumes"),
    ],
)
def test_it_refuses_a_volume_it_cannot_use_on_its_field_and_writes_nothing(
    f0v, client, t0, case, message
):
    factories.member(f0v.alice, f0v.beta)
    picks = {
        "other_project": lambda: volume(f0v, project=f0v.beta, name="theirs").pk,
        "not_available": lambda: volume(f0v, name="new", state="creating").pk,
        "held": lambda: volume(f0v, name="held").pk,
        "zone": lambda: volume(f0v, name="far", zone="us-east-1c").pk,
        "unknown": lambda: "999999999999999999999",
        "outsiders": lambda: volume(f0v, project=f0v.gamma, name="gammas").pk,
    }
    pk = picks[case]()
    if case == "held":
        holder = admission.submit_reservation(
            actor=f0v.alice,
            project=f0v.alpha,
            gpu_model=f0v.model,
            gpu_count=1,
            duration_hours=1,
            priority="experiment",
            market="on_demand",
            now=t0,
        )
        Reservation.objects.filter(pk=holder.pk).update(data_volume=pk)
    before = Reservation.objects.count()
    client.force_login(f0v.alice)
    response = client.post(reverse("rental:lease_new"), form_data(f0v, data_volume=pk))
    html = response.content.decode()
    assert response.status_code == 400
    error = re.search(r'id="error-data_volume">([^<]*)<', html)[1]
    assert message in error
    assert Reservation.objects.count() == before
    assert not DataVolume.objects.exclude(attached_instance=None).exists()
    if case == "outsiders":  # another project's name is never shown to a non-member
        assert "gammas" not in html


def test_it_refuses_an_instance_type_outside_the_volume_zone_on_the_offering(f0v, client):
    far = factories.offering(f0v.account, f0v.model, instance_type="test.a100x1.far")
    far.zones = ["us-east-1c"]
    far.save()
    datasets = volume(f0v, name="datasets", zone="us-east-1b")
    client.force_login(f0v.alice)
    response = client.post(
        reverse("rental:lease_new"), form_data(f0v, data_volume=datasets.pk, offering=far.pk)
    )
    assert response.status_code == 400
    error = re.search(r'id="error-offering">([^<]*)<', response.content.decode())[1]
    assert "does not run in the volume&#x27;s zone us-east-1b" in error
    assert not Reservation.objects.exists()


def test_a_count_over_the_ceiling_is_named_on_its_own_field_with_a_volume(f0v, client):
    datasets = volume(f0v, name="datasets")
    client.force_login(f0v.alice)
    response = client.post(
        reverse("rental:lease_new"), form_data(f0v, data_volume=datasets.pk, gpu_count="7")
    )
    assert response.status_code == 400
    assert 'id="error-gpu_count"' in response.content.decode()
    assert not Reservation.objects.exists()
