"""``/api/v1/images``: the image catalog a caller sees (as on /images/) and saving a
lease's instance as an image (``images.save_as_image``, against the local EC2 endpoint)."""

from datetime import timedelta

import pytest

from portal.models import AuditEvent
from rental.fleet import instances, sync
from rental.loans import admission
from rental.models import Image, Reservation
from tests import factories
from tests.api.catalog_support import HUGE, NOT_JSON, client_for, counts, finance, post_raw

pytestmark = pytest.mark.django_db

LIST = "/api/v1/images"


def project_image(f0, project, name, *, state=Image.State.AVAILABLE, n=0) -> Image:
    return Image.objects.create(
        name=name,
        account=f0.account,
        region="us-east-1",
        image_id=f"ami-0b{n:015d}" if state != Image.State.PENDING else "",
        os="Ubuntu 22.04",
        driver_version="550.54",
        cuda_version="12.4",
        framework_versions={"PyTorch": "2.5.1", "PaddlePaddle": "2.6.2"},
        project=project,
        state=state,
    )


def test_it_lists_the_images_the_caller_sees_with_their_versions(f0):
    mine = project_image(f0, f0.alpha, "alpha env", state=Image.State.PENDING)
    theirs = project_image(f0, f0.beta, "beta env", n=2)
    answer = client_for(f0.alice).get(LIST)
    assert answer.status_code == 200
    rows = answer.json()["results"]
    assert [row["id"] for row in rows] == [f0.image.pk, mine.pk]  # site images first
    assert rows[1] == {
        "id": mine.pk,
        "name": "alpha env",
        "project": "alpha",
        "os": "Ubuntu 22.04",
        "driver_version": "550.54",
        "cuda_version": "12.4",
        "frameworks": "",
        "framework_versions": {"PyTorch": "2.5.1", "PaddlePaddle": "2.6.2"},
        "region": "us-east-1",
        "image_id": "",
        "ssh_user": "ubuntu",
        "state": "pending",
        "state_message": "",
        "source_lease": None,
        "created_by": None,
        "created_at": rows[1]["created_at"],
        "available_at": None,
    }
    assert rows[0]["project"] is None and rows[0]["frameworks"] == "PyTorch 2.5"
    assert client_for(f0.alice).get(f"{LIST}/{theirs.pk}").status_code == 404
    assert client_for(f0.bob).get(f"{LIST}/{theirs.pk}").json()["name"] == "beta env"
    everything = client_for(finance()).get(LIST).json()["results"]
    assert {row["id"] for row in everything} == {f0.image.pk, mine.pk, theirs.pk}
    assert client_for(None).get(LIST).status_code == 401


def test_it_filters_images(f0):
    pending = project_image(f0, f0.alpha, "alpha env", state=Image.State.PENDING)
    ready = project_image(f0, f0.alpha, "alpha ready", n=1)
    client = client_for(f0.alpha_manager)

    def ids(query: str) -> list[int]:
        answer = client.get(LIST + query)
        assert answer.status_code == 200, answer.content
        return [row["id"] for row in answer.json()["results"]]

    assert ids("?site=true") == [f0.image.pk]
    assert ids("?site=false") == [pending.pk, ready.pk]
    assert ids("?project=alpha&state=available") == [ready.pk]
    by_name = ids("?ordering=name")
    assert by_name.index(pending.pk) < by_name.index(ready.pk)  # "alpha env" < "alpha ready"
    assert ids("?ordering=-name") == by_name[::-1]


@pytest.fixture
def f0c(db, cloud):
    return factories.fixture_f0(endpoint_url=cloud.url)


@pytest.fixture
def running(f0c, t0) -> Reservation:
    lease = admission.submit_reservation(
        actor=f0c.alice,
        project=f0c.alpha,
        gpu_model=f0c.model,
        gpu_count=1,
        duration_hours=4,
        priority="experiment",
        market="on_demand",
        now=t0,
    )
    for instance in lease.instances.all():
        instances.provision_instance(instance_id=instance.pk, now=t0)
    sync.sync_instances(now=t0 + timedelta(seconds=30))
    lease.refresh_from_db()
    assert lease.status == Reservation.Status.ACTIVE
    return lease


def test_it_saves_a_running_lease_as_an_image(
    f0c, running, client, django_capture_on_commit_callbacks
):
    with django_capture_on_commit_callbacks() as sent:
        answer = client_for(f0c.alice).post(
            LIST, {"lease": running.pk, "name": "ranking env"}, format="json"
        )
    assert answer.status_code == 201, answer.content
    image = Image.objects.get(project=f0c.alpha)
    assert answer.json()["id"] == image.pk
    assert (answer.json()["state"], answer.json()["source_lease"]) == ("pending", running.pk)
    assert (answer.json()["created_by"], answer.json()["cuda_version"]) == ("alice", "12.4")
    assert image.source_instance == running.instances.get()
    assert len(sent) == 1  # the save task, once committed
    assert AuditEvent.objects.get(verb="image.requested").source == "api"


def test_it_lets_only_the_requester_and_managers_save(f0c, running):
    body = {"lease": running.pk, "name": "x"}
    assert client_for(f0c.bob).post(LIST, body, format="json").status_code == 404
    other = factories.user("amy")
    factories.member(other, f0c.alpha)
    refused = client_for(other).post(LIST, body, format="json")
    assert refused.status_code == 403 and refused.json()["code"] == "not_permitted"
    assert client_for(finance()).post(LIST, body, format="json").status_code == 403
    assert not Image.objects.filter(project=f0c.alpha).exists()
    by_manager = client_for(f0c.alpha_manager).post(LIST, body, format="json")
    assert by_manager.status_code == 201
    assert Image.objects.get(project=f0c.alpha).created_by == f0c.alpha_manager


def test_it_refuses_a_duplicate_name_and_a_lease_that_is_not_running(f0c, running, t0):
    client = client_for(f0c.alice)
    assert client.post(LIST, {"lease": running.pk, "name": "env"}).status_code == 201
    twice = client.post(LIST, {"lease": running.pk, "name": "env"}, format="json")
    assert twice.status_code == 400 and twice.json()["field"] == "name"
    waiting = admission.submit_reservation(
        actor=f0c.alice,
        project=f0c.alpha,
        gpu_model=f0c.model,
        gpu_count=1,
        duration_hours=4,
        priority="experiment",
        market="on_demand",
        start=t0 + timedelta(days=2),
        now=t0,
    )
    not_running = client.post(LIST, {"lease": waiting.pk, "name": "later"}, format="json")
    assert not_running.status_code == 409
    assert not_running.json()["code"] == "invalid_transition"
    assert Image.objects.filter(project=f0c.alpha).count() == 1


@pytest.mark.parametrize(
    ("body", "field"),
    [
        ({"name": "env"}, "lease"),
        ({"lease": "one", "name": "env"}, "lease"),
        ({"lease": 10**12, "name": "env"}, "lease"),
        ({"lease": 1, "name": HUGE}, "name"),
        ({"lease": 1, "name": "e\x00nv"}, "name"),
        ({"lease": 1, "name": ["env"]}, "name"),
        ({"lease": 1, "name": "   "}, "name"),
    ],
)
def test_it_answers_400_naming_the_field_and_writes_nothing(f0c, running, body, field):
    if body.get("lease") == 1:
        body = {**body, "lease": running.pk}
    before = counts()
    answer = client_for(f0c.alice).post(LIST, body, format="json")
    assert answer.status_code == 400, answer.content
    assert field in answer.json()["errors"]
    assert post_raw(client_for(f0c.alice), LIST, NOT_JSON).status_code == 400
    assert counts() == before


def test_it_lists_images_in_a_fixed_number_of_queries(f0, django_assert_num_queries):
    project_image(f0, f0.alpha, "env 0")
    client = client_for(f0.alice)
    with django_assert_num_queries(4):  # finance, roles, count, page
        assert len(client.get(LIST).json()["results"]) == 2
    for n in range(1, 14):
        project_image(f0, f0.alpha, f"env {n}", n=n)
    client = client_for(f0.alice)
    with django_assert_num_queries(4):
        assert len(client.get(LIST).json()["results"]) == 15
