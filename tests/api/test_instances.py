"""``/api/v1/instances``: scoped through their lease's project, connection details only
for who may connect (never finance), and the lease page's two instance buttons."""

from django.urls import reverse
from django.utils import timezone

from portal.models import AuditEvent
from rental.models import Instance, Reservation
from tests import factories
from tests.api.leases_world import client_for, row_counts, running_lease

LIST = reverse("api:instance-list")


def detail(instance) -> str:
    return reverse("api:instance-detail", kwargs={"pk": instance.pk})


def act(instance, name: str) -> str:
    return reverse(f"api:instance-{name}", kwargs={"pk": instance.pk})


def test_it_lists_the_instances_of_visible_leases_only(f0):
    mine = running_lease(f0, gpus=2)
    theirs = running_lease(f0, project=f0.gamma)
    answer = client_for(f0.alice).get(LIST)
    assert answer.status_code == 200
    rows = answer.json()["results"]
    assert {row["lease"] for row in rows} == {mine.pk}
    assert len(rows) == 2
    row = rows[0]
    assert (row["project"], row["state"], row["instance_type"]) == (
        "alpha",
        "running",
        "test.a100x1",
    )
    assert row["rate_per_hour"] == "2.500000"
    assert row["connection"]["ssh"] == "ssh ubuntu@203.0.113.10"
    other = theirs.instances.get()
    assert client_for(f0.alice).get(detail(other)).status_code == 404
    assert client_for(f0.admin).get(detail(other)).status_code == 200
    assert client_for(f0.outsider).get(LIST).json()["count"] == 0


def test_finance_sees_instances_but_never_where_they_are(f0):
    running_lease(f0, gpus=2, address="198.51.100.7")
    fiona = factories.user("fiona", finance=True)
    answer = client_for(fiona).get(LIST)
    assert answer.status_code == 200 and answer.json()["count"] == 2
    assert all(row["connection"] is None for row in answer.json()["results"])
    text = answer.content.decode()
    assert "198.51.100.7" not in text and "10.0.0.10" not in text and "ssh " not in text


def test_it_filters_by_lease_state_and_project(f0):
    first = running_lease(f0)
    second = running_lease(f0, project=f0.beta)
    Instance.objects.filter(reservation=second).update(state=Instance.State.STOPPED)
    client = client_for(f0.admin)

    def leases(query: str) -> list[int]:
        answer = client.get(LIST + query)
        assert answer.status_code == 200, answer.content
        return [row["lease"] for row in answer.json()["results"]]

    assert leases(f"?lease={first.pk}") == [first.pk]
    assert leases("?state=stopped") == [second.pk]
    assert leases("?project=alpha") == [first.pk]
    assert leases(f"?lease={10**30}") == []
    for bad in ("?state=gone", "?lease=x", "?project=%00"):
        assert client.get(LIST + bad).status_code == 400, bad


def test_it_lists_in_a_fixed_number_of_queries(f0, django_assert_num_queries):
    client = client_for(f0.alice)
    running_lease(f0)
    client.get(LIST)
    with django_assert_num_queries(2):  # the page's count, the instances with their leases
        assert client.get(LIST).json()["count"] == 1
    for _ in range(7):
        running_lease(f0, gpus=2)
    with django_assert_num_queries(2):
        assert client.get(LIST).json()["count"] == 15


def test_the_requester_answers_an_idle_warning(f0):
    lease = running_lease(f0)
    instance = lease.instances.get()
    warned = timezone.now().replace(microsecond=0)
    Instance.objects.filter(pk=instance.pk).update(idle_warned_at=warned)
    assert client_for(f0.alice).get(detail(instance)).json()["idle_warning"] is True
    manager = client_for(f0.alpha_manager).post(act(instance, "still-using"), format="json")
    assert manager.status_code == 403
    answer = client_for(f0.alice).post(act(instance, "still-using"), format="json")
    assert answer.status_code == 200
    assert answer.json()["idle_warning"] is False
    instance.refresh_from_db()
    assert instance.idle_reset_at >= warned
    assert AuditEvent.objects.get(verb="instance.idle_reset").source == "api"
    again = client_for(f0.alice).post(act(instance, "still-using"), format="json")
    assert again.status_code == 409


def test_it_replaces_an_unhealthy_instance(f0):
    lease = running_lease(f0)
    instance = lease.instances.get()
    healthy = client_for(f0.alice).post(act(instance, "replace"), format="json")
    assert healthy.status_code == 409 and healthy.json()["code"] == "invalid_transition"
    Instance.objects.filter(pk=instance.pk).update(
        health=Instance.Health.UNHEALTHY, health_message="GPU 0 fell off the bus"
    )
    fiona = factories.user("fiona", finance=True)
    assert client_for(fiona).post(act(instance, "replace"), format="json").status_code == 403
    outsider = client_for(f0.gary).post(act(instance, "replace"), format="json")
    assert outsider.status_code == 404
    answer = client_for(f0.alice).post(act(instance, "replace"), format="json")
    assert answer.status_code == 201, answer.content
    new = Instance.objects.get(pk=answer.json()["id"])
    assert new.pk != instance.pk and new.reservation == lease
    assert answer.json()["state"] == "requested"
    assert Instance.objects.get(pk=instance.pk).state == Instance.State.STOPPING
    assert Reservation.objects.get(pk=lease.pk).status == Reservation.Status.PROVISIONING
    assert AuditEvent.objects.get(verb="instance.replaced").source == "api"


def test_an_action_on_another_projects_instance_is_a_404_and_changes_nothing(f0):
    theirs = running_lease(f0, project=f0.gamma).instances.get()
    Instance.objects.filter(pk=theirs.pk).update(
        health=Instance.Health.UNHEALTHY, idle_warned_at=timezone.now()
    )
    before = row_counts()
    for name in ("still-using", "replace"):
        assert client_for(f0.alice).post(act(theirs, name), format="json").status_code == 404
    assert row_counts() == before
