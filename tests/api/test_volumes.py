"""``/api/v1/volumes``: projects' data volumes as on the project page, created and deleted
by members through ``rental.catalog.volumes``."""

import pytest

from portal.models import AuditEvent
from rental.catalog import volumes
from rental.loans.lease_request import submit_with_volume
from rental.models import DataVolume
from tests.api.catalog_support import HUGE, NOT_JSON, client_for, counts, finance, post_raw

pytestmark = pytest.mark.django_db

LIST = "/api/v1/volumes"


@pytest.fixture
def zoned(f0):
    f0.offering.zones = ["us-east-1a", "us-east-1b"]
    f0.offering.save()
    return f0


def made(f0, project=None, *, name="datasets", state=DataVolume.State.AVAILABLE, zone="us-east-1a"):
    project = project or f0.alpha
    volume = volumes.create_volume(
        actor=f0.engineer_of(project), project=project, name=name, size_gb=100, zone=zone
    )
    # The cloud's answer, as the volume task records it.
    DataVolume.objects.filter(pk=volume.pk).update(state=state, volume_id=f"vol-{volume.pk:08d}")
    return DataVolume.objects.get(pk=volume.pk)


def test_it_lets_a_member_create_a_volume(zoned, django_capture_on_commit_callbacks):
    body = {"project": "alpha", "name": "datasets", "size_gb": 500, "zone": "us-east-1b"}
    with django_capture_on_commit_callbacks() as sent:
        answer = client_for(zoned.alice).post(LIST, body, format="json")
    assert answer.status_code == 201, answer.content
    volume = DataVolume.objects.get()
    assert answer.json() == {
        "id": volume.pk,
        "project": "alpha",
        "name": "datasets",
        "state": "creating",
        "size_gb": 500,
        "region": "us-east-1",
        "zone": "us-east-1b",
        "volume_id": "",
        "attached_instance": None,
        "attached_lease": None,
        "device": "",
        "held_by_lease": None,
        "storage_rate_per_gb_month": "0.080000",
        "last_error": "",
        "created_by": "alice",
        "created_at": answer.json()["created_at"],
        "deleted_at": None,
    }
    assert (volume.project, volume.account) == (zoned.alpha, zoned.account)
    assert len(sent) == 1  # the cloud's CreateVolume, once committed
    assert AuditEvent.objects.get(verb="volume.created").source == "api"


def test_it_lets_only_members_create_and_delete(zoned):
    body = {"project": "alpha", "name": "d", "size_gb": 5, "zone": "us-east-1a"}
    for who in (zoned.bob, zoned.admin, finance(), zoned.outsider):  # as on the project page
        assert client_for(who).post(LIST, body, format="json").status_code == 404
    volume = made(zoned)
    for who in (zoned.bob, zoned.admin):
        assert client_for(who).delete(f"{LIST}/{volume.pk}").status_code == 404
    assert client_for(None).get(LIST).status_code == 401
    assert DataVolume.objects.get().state == "available"


@pytest.mark.parametrize(
    ("change", "field"),
    [
        ({"size_gb": 0}, "size_gb"),
        ({"size_gb": 10**12}, "size_gb"),
        ({"size_gb": "big"}, "size_gb"),
        ({"name": HUGE}, "name"),
        ({"name": "da\x00ta"}, "name"),
        ({"name": "  "}, "name"),
        ({"zone": ["us-east-1a"]}, "zone"),
        ({"project": HUGE}, "project"),
    ],
)
def test_it_answers_400_naming_the_field_and_writes_nothing(zoned, change, field):
    before = counts()
    body = {"project": "alpha", "name": "d", "size_gb": 5, "zone": "us-east-1a", **change}
    answer = client_for(zoned.alice).post(LIST, body, format="json")
    assert answer.status_code == 400, answer.content
    assert field in answer.json()["errors"]
    assert counts() == before


def test_it_answers_409_to_a_zone_where_no_instance_type_is_offered(zoned):
    """A well-formed zone name, but nothing offered there could attach the volume."""
    before = counts()
    body = {"project": "alpha", "name": "d", "size_gb": 5, "zone": "eu-west-9z"}
    answer = client_for(zoned.alice).post(LIST, body, format="json")
    assert answer.status_code == 409, answer.content
    assert (answer.json()["code"], answer.json()["field"]) == ("bad_zone", "zone")
    assert "errors" not in answer.json()
    assert counts() == before


def test_it_answers_409_to_a_size_past_the_sites_largest(zoned, settings):
    """A whole number of GB the schema takes, past PORTAL_VOLUME_MAX_GB: the site's rule."""
    before = counts()
    size = settings.PORTAL_VOLUME_MAX_GB + 1
    body = {"project": "alpha", "name": "d", "size_gb": size, "zone": "us-east-1a"}
    answer = client_for(zoned.alice).post(LIST, body, format="json")
    assert answer.status_code == 409, answer.content
    assert (answer.json()["code"], answer.json()["field"]) == ("over_max_size", "size_gb")
    assert "errors" not in answer.json()
    assert counts() == before


def test_it_refuses_a_second_volume_of_one_name_and_a_body_that_is_not_json(zoned):
    made(zoned)
    body = {"project": "alpha", "name": "datasets", "size_gb": 5, "zone": "us-east-1a"}
    answer = client_for(zoned.alice).post(LIST, body, format="json")
    assert answer.status_code == 409, answer.content
    assert (answer.json()["code"], answer.json()["field"]) == ("name_taken", "name")
    assert post_raw(client_for(zoned.alice), LIST, NOT_JSON).status_code == 400
    assert DataVolume.objects.count() == 1


def test_it_lists_the_volumes_of_the_callers_projects(zoned):
    mine = made(zoned)
    other_zone = made(zoned, name="scratch", zone="us-east-1b")
    gone = made(zoned, name="old", state=DataVolume.State.DELETED)
    theirs = made(zoned, zoned.gamma, name="secret")
    client = client_for(zoned.alice)

    def ids(query: str = "") -> list[int]:
        answer = client.get(LIST + query)
        assert answer.status_code == 200, answer.content
        return [row["id"] for row in answer.json()["results"]]

    assert ids() == [mine.pk, other_zone.pk]
    assert ids("?zone=us-east-1b") == [other_zone.pk]
    assert ids("?state=deleted") == [gone.pk]
    assert ids("?project=gamma") == []
    assert client.get(f"{LIST}/{theirs.pk}").status_code == 404
    assert client.delete(f"{LIST}/{theirs.pk}").status_code == 404
    assert theirs.pk in [row["id"] for row in client_for(finance()).get(LIST).json()["results"]]


def test_it_says_which_lease_holds_a_volume_and_refuses_to_delete_it(zoned, t0):
    volume = made(zoned)
    lease = submit_with_volume(
        actor=zoned.alice,
        volume=volume,
        project=zoned.alpha,
        gpu_model=zoned.model,
        gpu_count=1,
        duration_hours=4,
        priority="experiment",
        market="on_demand",
        now=t0,
    )
    answer = client_for(zoned.alice).get(f"{LIST}/{volume.pk}")
    assert answer.json()["held_by_lease"] == lease.pk
    refused = client_for(zoned.alice).delete(f"{LIST}/{volume.pk}")
    assert refused.status_code == 409 and refused.json()["code"] == "volume_in_use"
    assert DataVolume.objects.get().state == "available"


def test_it_deletes_an_available_volume_in_the_cloud(zoned, django_capture_on_commit_callbacks):
    volume = made(zoned)
    with django_capture_on_commit_callbacks() as sent:
        answer = client_for(zoned.alpha_manager).delete(f"{LIST}/{volume.pk}")
    assert answer.status_code == 202
    assert answer.json()["state"] == "deleting"
    assert DataVolume.objects.get().state == "deleting" and len(sent) == 1
    assert AuditEvent.objects.get(verb="volume.deleted").source == "api"
    failed = made(zoned, name="never made", state=DataVolume.State.FAILED)
    DataVolume.objects.filter(pk=failed.pk).update(volume_id="")
    answer = client_for(zoned.alice).delete(f"{LIST}/{failed.pk}")
    assert (answer.status_code, answer.json()["state"]) == (202, "deleted")


def test_it_lists_volumes_in_a_fixed_number_of_queries(zoned, django_assert_num_queries):
    made(zoned, name="v0")
    client = client_for(zoned.alice)
    with django_assert_num_queries(5):  # finance, roles, count, page, holding leases
        assert len(client.get(LIST).json()["results"]) == 1
    for n in range(1, 15):
        made(zoned, name=f"v{n}")
    client = client_for(zoned.alice)
    with django_assert_num_queries(5):
        assert len(client.get(LIST).json()["results"]) == 15
