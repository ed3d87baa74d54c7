"""Data volumes (issue 8.9) against the local EC2 endpoint, and their storage lines (B8)."""

from datetime import UTC, datetime, timedelta
from decimal import Decimal

import pytest

from billing.services import close_period, recompute_closed
from billing.statements import compute_period
from portal.errors import InvalidInput
from rental.catalog import volumes
from rental.fleet import instances, stop, sync, termination, volume_cloud
from rental.fleet.cloud import provider_for
from rental.loans import admission, ending
from rental.loans.lease_request import submit_with_volume
from rental.models import DataVolume, Instance, StorageInterval
from tests import factories


@pytest.fixture
def f0c(db, cloud):
    f0 = factories.fixture_f0(endpoint_url=cloud.url)
    f0.offering = f0.model.offerings.get()
    f0.offering.zones = ["us-east-1a", "us-east-1b"]
    f0.offering.save()
    return f0


def made_volume(f0c, t0, *, size=500, zone="us-east-1b"):
    volume = volumes.create_volume(
        actor=f0c.alice, project=f0c.alpha, name="datasets", size_gb=size, zone=zone, now=t0
    )
    volume_cloud.create_in_cloud(volume.pk, now=t0)
    volume.refresh_from_db()
    return volume


def cloud_volumes(volume):
    provider = provider_for(Instance(account=volume.account))
    return provider.describe_volumes([volume.volume_id], region="us-east-1")


def test_it_creates_a_volume_once_however_often_the_task_is_delivered(f0c, t0, cloud):
    volume = made_volume(f0c, t0)
    assert (volume.state, volume.zone, volume.size_gb) == ("available", "us-east-1b", 500)
    assert volume.storage_rate_per_gb_month == Decimal("0.08")
    # A duplicate delivery, and a lost answer (the row forgot its cloud id): no second one.
    volume_cloud.create_in_cloud(volume.pk, now=t0)
    DataVolume.objects.filter(pk=volume.pk).update(volume_id="", state="creating")
    volume_cloud.create_in_cloud(volume.pk, now=t0 + timedelta(minutes=5))
    assert cloud.count("CreateVolume") == 1
    assert DataVolume.objects.get(pk=volume.pk).volume_id == volume.volume_id
    assert StorageInterval.objects.filter(volume=volume).count() == 1


def test_it_refuses_a_bad_size_or_zone_and_writes_nothing(f0c, t0):
    with pytest.raises(InvalidInput) as bad_size:
        volumes.create_volume(
            actor=f0c.alice, project=f0c.alpha, name="x", size_gb="0", zone="us-east-1a", now=t0
        )
    assert bad_size.value.field == "size_gb"
    with pytest.raises(InvalidInput) as bad_zone:
        volumes.create_volume(
            actor=f0c.alice, project=f0c.alpha, name="x", size_gb=10, zone="eu-west-9z", now=t0
        )
    assert bad_zone.value.field == "zone"
    assert not DataVolume.objects.exists()


def test_it_places_the_launch_in_the_volume_zone_attaches_and_keeps_it_at_the_end(f0c, t0):
    volume = made_volume(f0c, t0)
    lease = submit_with_volume(
        actor=f0c.alice,
        volume=volume,
        project=f0c.alpha,
        gpu_model=f0c.model,
        gpu_count=1,
        duration_hours=4,
        priority="experiment",
        market="on_demand",
        now=t0,
    )
    [instance] = lease.instances.all()
    instances.provision_instance(instance_id=instance.pk, now=t0)
    sync.sync_instances(now=t0 + timedelta(seconds=30))
    instance.refresh_from_db()
    assert instance.zone == "us-east-1b"  # the volume's zone, not the offering's first
    assert instance.root_disk_gb == 100
    volume.refresh_from_db()
    assert (volume.state, volume.attached_instance_id) == ("attaching", instance.pk)
    volume_cloud.attach_in_cloud(volume.pk, now=t0 + timedelta(seconds=31))
    volume.refresh_from_db()
    assert volume.state == "in_use"
    [seen] = cloud_volumes(volume)
    assert seen.attached_to == instance.external_id

    # A second lease cannot take it while the first holds it.
    with pytest.raises(InvalidInput):
        submit_with_volume(
            actor=f0c.alice,
            volume=volume,
            project=f0c.alpha,
            gpu_model=f0c.model,
            gpu_count=1,
            duration_hours=1,
            priority="experiment",
            market="on_demand",
            now=t0,
        )

    ending.end_reservation(actor=f0c.alice, reservation=lease, now=t0 + timedelta(hours=1))
    termination.terminate_instance(instance_id=instance.pk, now=t0 + timedelta(hours=1))
    volume.refresh_from_db()
    assert (volume.state, volume.attached_instance_id) == ("available", None)
    [after] = cloud_volumes(volume)  # detached, never deleted
    assert (after.state, after.attached_to) == ("available", "")


def test_it_bills_storage_per_gb_second_split_at_the_month_boundary(f0c):
    # 500 GB from 30 April 00:00 to 3 May 00:00: 1 day in April, 2 in May, at 0.10/GB-month.
    created = datetime(2026, 4, 30, tzinfo=UTC)
    f0c.offering.storage_price_per_gb_month = Decimal("0.10")
    f0c.offering.save()
    volume = made_volume(f0c, created)
    assert volume.storage_rate_per_gb_month == Decimal("0.10")
    volume.refresh_from_db()
    volumes.delete_volume(actor=f0c.alice, volume=volume, now=created + timedelta(days=3))
    volume_cloud.delete_in_cloud(volume.pk, now=created + timedelta(days=3))
    assert DataVolume.objects.get(pk=volume.pk).state == "deleted"

    june = datetime(2026, 6, 2, tzinfo=UTC)
    april = compute_period(period=created, now=june).for_project(f0c.alpha.pk)
    may = compute_period(period=datetime(2026, 5, 1, tzinfo=UTC), now=june).for_project(
        f0c.alpha.pk
    )
    [april_line] = [line for line in april if line.kind == "storage"]
    [may_line] = [line for line in may if line.kind == "storage"]
    # 500 × 86,400 × 0.10 / 2,592,000 = 1.666… → 1.67; 500 × 172,800 × 0.10 / 2,592,000 = 3.33…
    assert (april_line.amount, may_line.amount) == (Decimal("1.67"), Decimal("3.33"))
    assert april_line.references["gb_seconds"] + may_line.references["gb_seconds"] == (
        500 * 3 * 86400
    )
    assert april_line.quantity == Decimal("16.666667")  # GB-months

    # Closing April writes the storage line into the statement's total; recompute is identical.
    assert close_period(period=created, now=june) >= 1
    statement = f0c.alpha.statements.get(period=created.date().replace(day=1))
    assert statement.lines.filter(kind="storage").get().amount == Decimal("1.67")
    assert statement.total == sum((line.amount for line in april), Decimal("0.00"))
    assert recompute_closed(period=created, now=june + timedelta(days=1)) == {}


def test_it_bills_a_stopped_disk_until_it_resumes(f0c, t0):
    lease = admission.submit_reservation(
        actor=f0c.alice,
        project=f0c.alpha,
        gpu_model=f0c.model,
        gpu_count=1,
        duration_hours=100,
        priority="experiment",
        market="on_demand",
        now=t0,
    )
    [instance] = lease.instances.all()
    instances.provision_instance(instance_id=instance.pk, now=t0)
    sync.sync_instances(now=t0 + timedelta(seconds=30))
    lease.refresh_from_db()
    stopped = t0 + timedelta(hours=1)
    stop.stop_lease(actor=f0c.alice, reservation=lease, now=stopped)
    stop.resume_lease(actor=f0c.alice, reservation=lease, now=stopped + timedelta(days=3))
    [disk] = StorageInterval.objects.filter(instance=instance)
    assert (disk.kind, disk.size_gb, disk.end - disk.start) == ("disk", 100, timedelta(days=3))
    lines = compute_period(period=t0, now=t0 + timedelta(days=5)).for_project(f0c.alpha.pk)
    [line] = [line for line in lines if line.kind == "storage"]
    # 100 GB × 259,200 s × 0.08 / 2,592,000 = 0.80
    assert line.amount == Decimal("0.80")


def test_it_shows_and_creates_volumes_on_the_project_section(
    f0c, client, django_assert_max_num_queries
):
    client.force_login(f0c.alice)
    url = f"/projects/{f0c.alpha.slug}/volumes/"
    bad = client.post(url, {"name": "data", "size_gb": "abc", "zone": "us-east-1a"})
    assert bad.status_code == 400
    assert "whole number of GB" in bad.content.decode()
    assert not DataVolume.objects.exists()
    made = client.post(url, {"name": "data", "size_gb": "50", "zone": "us-east-1a"})
    assert made.status_code == 200
    assert DataVolume.objects.get().size_gb == 50
    for index in range(5):
        DataVolume.objects.create(
            project=f0c.alpha,
            account=f0c.offering.account,
            name=f"v{index}",
            zone="us-east-1a",
            region="us-east-1",
            size_gb=1,
        )
    with django_assert_max_num_queries(12):
        page = client.get(url)
    assert page.status_code == 200 and "v4" in page.content.decode()
    client.force_login(f0c.outsider)
    assert client.get(url).status_code == 404


def test_it_says_why_no_volume_can_be_made_when_no_offering_lists_zones(f0, client):
    url = f"/projects/{f0.alpha.slug}/volumes/"
    client.force_login(f0.alice)
    page = client.get(url).content.decode()
    assert 'id="volumes-why-not"' in page
    assert "no instance type on sale lists its availability zones" in page
    assert "Create volume" not in page
    f0.offering.is_available = False
    f0.offering.save()
    page = client.get(url).content.decode()
    assert "no instance type is on sale" in page
    f0.offering.is_available = True
    f0.offering.zones = ["us-east-1a"]
    f0.offering.save()
    page = client.get(url).content.decode()
    assert 'id="volumes-why-not"' not in page and "Create volume" in page


def test_it_tells_who_may_not_make_volumes_that_members_may(f0, client):
    client.force_login(f0.admin)
    url = f"/projects/{f0.alpha.slug}/volumes/"
    page = client.get(url).content.decode()
    # The admin, who can fix it, reads why too, with the way to the offerings.
    assert 'id="volumes-why-not"' in page and "/admin/rental/offering/" in page
    f0.offering.zones = ["us-east-1a"]
    f0.offering.save()
    page = client.get(url).content.decode()
    assert 'id="volumes-members-only"' in page and "Create volume" not in page
    assert 'id="volumes-why-not"' not in page


def test_the_section_is_a_page_of_its_own_without_htmx(f0c, client):
    """The project page loads the section with HTMX; its link (and its form sent without
    HTMX) lead to the same section inside the site's layout, never a bare fragment."""
    client.force_login(f0c.alice)
    url = f"/projects/{f0c.alpha.slug}/volumes/"
    page = client.get(url).content.decode()
    assert page.startswith("<!doctype html>") and 'class="mainnav"' in page
    assert 'id="volumes"' in page and f"/projects/{f0c.alpha.slug}/" in page
    section = client.get(url, HTTP_HX_REQUEST="true").content.decode()
    assert section.lstrip().startswith('<section class="card" id="volumes">')
    sent = client.post(url, {"name": "data", "size_gb": "50", "zone": "us-east-1a"})
    assert 'class="mainnav"' in sent.content.decode()
