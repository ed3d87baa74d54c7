"""``/api/v1/availability-watches``: a person's own watches; nobody else's."""

from django.urls import reverse

from portal.models import AuditEvent
from rental.models import AvailabilityWatch
from tests import factories
from tests.api.leases_world import client_for, row_counts

LIST = reverse("api:availability-watch-list")


def detail(watch) -> str:
    return reverse("api:availability-watch-detail", kwargs={"pk": watch.pk})


def test_it_creates_a_watch_for_the_caller(f0):
    answer = client_for(f0.alice).post(LIST, {"gpu_model": f0.model.pk, "count": 4}, format="json")
    assert answer.status_code == 201, answer.content
    watch = AvailabilityWatch.objects.get()
    assert (watch.user, watch.gpu_model, watch.count, watch.notified_at) == (
        f0.alice,
        f0.model,
        4,
        None,
    )
    body = answer.json()
    assert (body["id"], body["gpu_model"], body["gpu_model_name"], body["count"]) == (
        watch.pk,
        f0.model.pk,
        "A100 80GB",
        4,
    )
    again = client_for(f0.alice).post(LIST, {"gpu_model": f0.model.pk, "count": 4}, format="json")
    assert again.status_code == 201 and again.json()["id"] == watch.pk
    assert AvailabilityWatch.objects.count() == 1


def test_it_lists_only_the_callers_watches(f0):
    mine = AvailabilityWatch.objects.create(user=f0.alice, gpu_model=f0.model, count=2)
    theirs = AvailabilityWatch.objects.create(user=f0.gary, gpu_model=f0.model, count=3)
    assert [row["id"] for row in client_for(f0.alice).get(LIST).json()["results"]] == [mine.pk]
    assert client_for(f0.alice).get(detail(theirs)).status_code == 404
    assert client_for(f0.admin).get(detail(theirs)).status_code == 404
    assert client_for(f0.admin).get(LIST).json()["count"] == 0


def test_it_deletes_only_the_callers_own_watch(f0):
    mine = AvailabilityWatch.objects.create(user=f0.alice, gpu_model=f0.model, count=2)
    theirs = AvailabilityWatch.objects.create(user=f0.gary, gpu_model=f0.model, count=3)
    assert client_for(f0.alice).delete(detail(theirs)).status_code == 404
    assert client_for(f0.admin).delete(detail(theirs)).status_code == 404
    assert client_for(f0.alice).delete(detail(mine)).status_code == 204
    assert list(AvailabilityWatch.objects.all()) == [theirs]
    event = AuditEvent.objects.get(verb="watch.deleted")
    assert (event.actor, event.source, event.object_id) == (f0.alice, "api", str(mine.pk))


def test_only_project_members_watch(f0):
    fiona = factories.user("fiona", finance=True)
    answer = client_for(fiona).post(LIST, {"gpu_model": f0.model.pk, "count": 1}, format="json")
    assert answer.status_code == 403
    assert client_for(None).post(LIST, {}, format="json").status_code == 401
    assert not AvailabilityWatch.objects.exists()


def test_it_answers_400_to_bad_input_and_writes_nothing(f0):
    before = row_counts()
    client = client_for(f0.alice)
    for body, field in (
        ({"gpu_model": f0.model.pk, "count": 10**9}, "count"),
        ({"gpu_model": f0.model.pk, "count": 0}, "count"),
        ({"gpu_model": f0.model.pk, "count": "many"}, "count"),
        ({"gpu_model": "A100\x00", "count": 1}, "gpu_model"),
        ({"count": 1}, "gpu_model"),
    ):
        answer = client.post(LIST, body, format="json")
        assert answer.status_code == 400 and field in answer.json()["errors"], body
    assert client.post(LIST, b"{", content_type="application/json").status_code == 400
    assert row_counts() == before


def test_it_answers_404_to_a_gpu_model_that_does_not_exist_and_writes_nothing(f0):
    """A whole number of the right shape that names no GPU model: a 404 on its field."""
    before = row_counts()
    answer = client_for(f0.alice).post(LIST, {"gpu_model": 10**30, "count": 1}, format="json")
    assert answer.status_code == 404, answer.content
    assert (answer.json()["code"], answer.json()["field"]) == ("not_found", "gpu_model")
    assert "errors" not in answer.json()
    assert row_counts() == before


def test_it_lists_in_a_fixed_number_of_queries(f0, django_assert_num_queries):
    client = client_for(f0.alice)
    AvailabilityWatch.objects.create(user=f0.alice, gpu_model=f0.model, count=1)
    client.get(LIST)
    with django_assert_num_queries(2):
        assert client.get(LIST).json()["count"] == 1
    for count in range(2, 16):
        AvailabilityWatch.objects.create(user=f0.alice, gpu_model=f0.model, count=count)
    with django_assert_num_queries(2):
        assert client.get(LIST).json()["count"] == 15
