"""``/api/v1/leases``: ask for GPUs, follow leases and act on them through the services
the lease pages call; refusals with their code and figures and nothing written."""

from datetime import timedelta

import pytest
from django.urls import reverse
from django.utils import timezone

from portal.api.filters import BIGGEST_ID, IntegerFilter
from portal.models import AuditEvent
from rental.loans import admission
from rental.models import AvailabilityWatch, Quota, Reservation, SshKey
from tests import factories
from tests.api.leases_world import client_for, row_counts, running_lease

Status = Reservation.Status
KEY = "ssh-ed25519 AAAAC3NzaC1lZDI1NTE5AAAAIOMqqnkVzrm0SdG6UOoqKLsabgH5C9okWi0dh2l9GKJl a@b"

LIST = reverse("api:lease-list")


def detail(lease) -> str:
    return reverse("api:lease-detail", kwargs={"pk": lease.pk})


def act(lease, name: str) -> str:
    return reverse(f"api:lease-{name}", kwargs={"pk": lease.pk})


def ask(f0, **changes) -> dict:
    return {
        "project": "alpha",
        "gpu_model": f0.model.pk,
        "gpu_count": 2,
        "duration_hours": "4",
        "purpose": "fine-tune the ranking model",
        **changes,
    }


def submit(f0, project, gpus, *, priority="experiment", hours=4, **kwargs):
    return admission.submit_reservation(
        actor=kwargs.pop("actor", None) or f0.engineer_of(project),
        project=project,
        gpu_model=f0.model,
        gpu_count=gpus,
        duration_hours=hours,
        priority=priority,
        market=kwargs.pop("market", "on_demand"),
        **kwargs,
    )


def pending(f0, project=None):
    project = project or f0.alpha
    Quota.objects.filter(project=project).update(max_hours_per_lease=8)
    return submit(f0, project, 1, hours=12)


# --- Asking for GPUs ---------------------------------------------------------------------


def test_it_submits_a_lease_and_answers_201_with_it(f0):
    answer = client_for(f0.alice).post(LIST, ask(f0), format="json")
    assert answer.status_code == 201, answer.content
    body = answer.json()
    lease = Reservation.objects.get()
    assert body["id"] == lease.pk
    assert (body["status"], body["tier"], body["project"]) == (
        "provisioning",
        "guaranteed",
        "alpha",
    )
    assert body["requester"] == {"id": f0.alice.pk, "username": "alice"}
    assert body["gpu_model"] == {"id": f0.model.pk, "name": "A100 80GB"}
    assert body["offering"]["instance_type"] == "test.a100x1"
    assert body["image"] == {"id": f0.image.pk, "name": f0.image.name}
    assert len(body["instances"]) == 2 == lease.instances.count()
    assert (lease.requester, lease.gpu_count, lease.purpose) == (
        f0.alice,
        2,
        "fine-tune the ranking model",
    )
    assert lease.end - lease.start == timedelta(hours=4)
    event = AuditEvent.objects.get(verb="lease.submitted")
    assert (event.source, event.actor, event.object_id) == ("api", f0.alice, str(lease.pk))


def test_it_answers_201_when_the_lease_waits_for_a_manager(f0):
    Quota.objects.filter(project=f0.alpha).update(max_hours_per_lease=8)
    answer = client_for(f0.alice).post(LIST, ask(f0, duration_hours="12"), format="json")
    assert answer.status_code == 201, answer.content
    body = answer.json()
    assert (body["status"], body["reason_code"]) == ("pending_approval", "over_auto_approve")
    assert body["reason"]
    assert body["waiting"] == {
        "position": None,
        "queued": 0,
        "hint": "A manager of Alpha must approve it.",
    }
    assert Reservation.objects.get().status == Status.PENDING_APPROVAL


def test_it_answers_201_with_the_queue_place_when_the_pool_is_full(f0):
    submit(f0, f0.beta, 4)
    submit(f0, f0.alpha, 2)
    submit(f0, f0.gamma, 2)
    first = submit(f0, f0.gamma, 2)
    answer = client_for(f0.gary).post(LIST, ask(f0, project="gamma", gpu_count=1), format="json")
    assert answer.status_code == 201
    body = answer.json()
    assert (body["status"], body["reason_code"], body["tier"]) == ("queued", "no_capacity", "burst")
    assert body["waiting"]["position"] == 2 and body["waiting"]["queued"] == 2
    assert "1 GPUs of the pool are free" in body["waiting"]["hint"]
    assert first.pk != body["id"] and Reservation.objects.get(pk=body["id"]).status == Status.QUEUED


def test_it_books_ahead_from_a_start(f0):
    start = (timezone.now() + timedelta(days=1)).replace(microsecond=0)
    answer = client_for(f0.alice).post(
        LIST, ask(f0, start=start.isoformat().replace("+00:00", "Z")), format="json"
    )
    assert answer.status_code == 201, answer.content
    body = answer.json()
    assert (body["status"], body["tier"], body["is_booking"]) == ("scheduled", "reserved", True)
    lease = Reservation.objects.get()
    assert lease.start == start and lease.is_reservation
    assert not lease.instances.exists()


def test_it_installs_only_the_chosen_keys(f0):
    mine = SshKey.objects.create(user=f0.alice, name="laptop", public_key=KEY)
    SshKey.objects.create(user=f0.alice, name="desk", public_key=KEY)
    answer = client_for(f0.alice).post(LIST, ask(f0, ssh_keys=[mine.pk]), format="json")
    assert answer.status_code == 201
    assert answer.json()["ssh_keys"] == ["laptop"]
    assert list(Reservation.objects.get().ssh_keys.all()) == [mine]


def test_it_refuses_production_over_the_guarantee_with_its_figures(f0):
    submit(f0, f0.alpha, 2)
    submit(f0, f0.beta, 2, priority="production")
    submit(f0, f0.beta, 2, priority="production")
    submit(f0, f0.gamma, 2)
    before = row_counts()
    answer = client_for(f0.bob).post(
        LIST, ask(f0, project="beta", priority="production"), format="json"
    )
    assert answer.status_code == 409
    body = answer.json()
    assert (body["code"], body["field"]) == ("production_over_guarantee", "priority")
    assert body["figures"] == {"asked": 2, "guaranteed": 4, "guaranteed_free": 0}
    assert "Production leases run only within the project's guarantee" in body["detail"]
    assert row_counts() == before


def test_it_refuses_more_than_the_ceiling_on_its_field_with_the_figures(f0):
    before = row_counts()
    answer = client_for(f0.alice).post(LIST, ask(f0, gpu_count=7), format="json")
    assert answer.status_code == 409, answer.content
    body = answer.json()
    assert (body["code"], body["field"]) == ("over_ceiling", "gpu_count")
    assert body["figures"] == {"asked": 7, "ceiling": 6}
    assert "errors" not in body
    assert row_counts() == before


def test_it_refuses_a_booking_without_room_with_the_interval(f0):
    start = (timezone.now() + timedelta(days=2)).replace(minute=0, second=0, microsecond=0)
    before = row_counts()
    answer = client_for(f0.bob).post(
        LIST,
        ask(f0, project="beta", gpu_count=8, start=start.isoformat()),
        format="json",
    )
    assert answer.status_code == 409
    body = answer.json()
    assert (body["code"], body["field"]) == ("reservation_conflict", "start")
    assert body["figures"]["needed"] == 10 and body["figures"]["capacity"] == 8
    assert body["figures"]["from"] == start.isoformat()
    assert row_counts() == before


def test_it_refuses_too_many_waiting_requests(f0, settings):
    settings.PORTAL_MAX_PENDING_PER_USER = 1
    pending(f0)
    before = row_counts()
    answer = client_for(f0.alice).post(LIST, ask(f0, duration_hours="12"), format="json")
    assert answer.status_code == 409, answer.content
    assert answer.json()["code"] == "too_many_pending"
    assert answer.json()["figures"] == {"pending": 1, "limit": 1}
    assert row_counts() == before


def over_budget(**kwargs):
    return ("budget_cap", "alpha has spent its budget.", {"spent": "120.00", "budget": "100.00"})


def test_it_refuses_over_the_budget_with_the_checks_figures(f0, settings):
    settings.PORTAL_ADMISSION_CHECKS = ["tests.api.test_leases.over_budget"]
    before = row_counts()
    answer = client_for(f0.alice).post(LIST, ask(f0), format="json")
    assert answer.status_code == 409
    assert answer.json() == {
        "code": "budget_cap",
        "detail": "alpha has spent its budget.",
        "figures": {"spent": "120.00", "budget": "100.00"},
    }
    assert row_counts() == before


def test_it_refuses_a_project_the_caller_does_not_belong_to(f0):
    fiona = factories.user("fiona", finance=True)
    before = row_counts()
    hidden = client_for(f0.alice).post(LIST, ask(f0, project="gamma"), format="json")
    missing = client_for(f0.alice).post(LIST, ask(f0, project="nope"), format="json")
    assert hidden.status_code == missing.status_code == 404, hidden.content
    # Another project's slug reads exactly as one that does not exist.
    assert hidden.json() == missing.json()
    assert (hidden.json()["code"], hidden.json()["field"]) == ("not_found", "project")
    assert "errors" not in hidden.json() and "gamma" not in hidden.content.decode()
    # Finance sees every project but asks for none: the service's rule (403).
    assert client_for(fiona).post(LIST, ask(f0), format="json").status_code == 403
    assert row_counts() == before


@pytest.mark.parametrize(
    ("changes", "field"),
    [
        ({"gpu_count": "two"}, "gpu_count"),
        ({"gpu_count": True}, "gpu_count"),
        ({"gpu_count": 1.5}, "gpu_count"),
        ({"gpu_count": 10**9}, "gpu_count"),
        ({"gpu_count": 10**30}, "gpu_count"),
        ({"gpu_count": 0}, "gpu_count"),
        ({"duration_hours": "abc"}, "duration_hours"),
        ({"duration_hours": "NaN"}, "duration_hours"),
        ({"duration_hours": "1e400"}, "duration_hours"),
        ({"duration_hours": "0"}, "duration_hours"),
        ({"duration_hours": 4}, "duration_hours"),
        ({"purpose": "x" * 100_000}, "purpose"),
        ({"purpose": "train\x00model"}, "purpose"),
        ({"project": "alpha\x00"}, "project"),
        ({"project": ["alpha"]}, "project"),
        ({"gpu_model": "A100"}, "gpu_model"),
        ({"gpu_model": None}, "gpu_model"),
        ({"priority": "urgent"}, "priority"),
        ({"market": "spot\x00"}, "market"),
        ({"start": "tomorrow"}, "start"),
        ({"start": "9999-12-31T23:00:00Z"}, "start"),
        ({"start": "9999-12-31T23:00:00-05:00"}, "start"),
        ({"image": "x"}, "image"),
        ({"ssh_keys": []}, "ssh_keys"),
        ({"ssh_keys": "1"}, "ssh_keys"),
        ({"requeue_on_preemption": "perhaps"}, "requeue_on_preemption"),
    ],
)
def test_it_answers_400_naming_the_field_and_writes_nothing(f0, changes, field):
    before = row_counts()
    answer = client_for(f0.alice).post(LIST, ask(f0, **changes), format="json")
    assert answer.status_code == 400, answer.content
    assert field in answer.json()["errors"], answer.json()
    assert row_counts() == before


@pytest.mark.parametrize(
    ("changes", "field"),
    [
        ({"gpu_model": 10**6}, "gpu_model"),
        ({"gpu_model": 10**30}, "gpu_model"),
        ({"offering": 10**6}, "offering"),
    ],
)
def test_it_answers_404_naming_a_field_that_names_nothing(f0, changes, field):
    """An id in the body that names no row is a 404 on its field; nothing is written."""
    before = row_counts()
    answer = client_for(f0.alice).post(LIST, ask(f0, **changes), format="json")
    assert answer.status_code == 404, answer.content
    assert (answer.json()["code"], answer.json()["field"]) == ("not_found", field)
    assert "errors" not in answer.json()
    assert row_counts() == before


@pytest.mark.parametrize(
    ("change", "code", "field"),
    [
        ({"duration_hours": "100000"}, "over_max_lease", "duration_hours"),
        ({"start": "2020-01-01T00:00:00Z"}, "start_in_past", "start"),
    ],
)
def test_it_refuses_a_well_formed_value_a_rule_refuses_with_its_code(f0, change, code, field):
    """Past the longest lease, a time already gone: the rule's 409 on its field."""
    before = row_counts()
    answer = client_for(f0.alice).post(LIST, ask(f0, **change), format="json")
    assert answer.status_code == 409, answer.content
    body = answer.json()
    assert (body["code"], body["field"]) == (code, field)
    assert "errors" not in body
    assert row_counts() == before


def test_it_refuses_another_persons_ssh_key(f0):
    theirs = SshKey.objects.create(user=f0.bob, name="bobs", public_key=KEY)
    before = row_counts()
    answer = client_for(f0.alice).post(LIST, ask(f0, ssh_keys=[theirs.pk]), format="json")
    assert answer.status_code == 404, answer.content
    assert (answer.json()["code"], answer.json()["field"]) == ("not_found", "ssh_keys")
    assert "bobs" not in answer.content.decode()
    assert row_counts() == before


@pytest.mark.parametrize(
    ("body", "content_type"),
    [
        (b"{not json", "application/json"),
        (b"\xff\xfe", "application/json"),
        (b"[1, 2]", "application/json"),
        (b"null", "application/json"),
        (b"", "application/json"),
    ],
)
def test_it_answers_400_to_a_body_that_is_not_a_json_object(f0, body, content_type):
    before = row_counts()
    answer = client_for(f0.alice).post(LIST, body, content_type=content_type)
    assert answer.status_code == 400
    assert answer.json()["code"] in ("parse_error", "invalid")
    assert row_counts() == before


def test_it_answers_415_to_a_form(f0):
    answer = client_for(f0.alice).post(LIST, "project=alpha", content_type="text/plain")
    assert answer.status_code == 415
    assert not Reservation.objects.exists()


# --- Reading -----------------------------------------------------------------------------


def test_it_lists_only_the_leases_of_visible_projects(f0):
    mine = pending(f0)
    theirs = pending(f0, f0.gamma)
    ids = [row["id"] for row in client_for(f0.alice).get(LIST).json()["results"]]
    assert ids == [mine.pk]
    everyone = [row["id"] for row in client_for(f0.admin).get(LIST).json()["results"]]
    assert sorted(everyone) == sorted([mine.pk, theirs.pk])
    assert client_for(f0.outsider).get(LIST).json()["count"] == 0
    assert client_for(None).get(LIST).status_code == 401


def test_it_hides_another_projects_lease_from_every_endpoint(f0):
    theirs = pending(f0, f0.gamma)
    client = client_for(f0.alice)
    assert client.get(detail(theirs)).status_code == 404
    for name in ("approve", "reject", "cancel", "end", "extend", "decide-extension", "stop"):
        answer = client.post(act(theirs, name), {"comment": "x", "hours": 1}, format="json")
        assert answer.status_code == 404, name
    for name in ("resume", "end-stopped", "watch"):
        assert client.post(act(theirs, name), format="json").status_code == 404, name
    assert Reservation.objects.get(pk=theirs.pk).status == Status.PENDING_APPROVAL
    assert not AvailabilityWatch.objects.exists()


def test_it_filters_and_orders_the_list(f0, t0):
    early = submit(f0, f0.alpha, 1)
    late = submit(f0, f0.alpha, 1, market="spot")
    manager = submit(f0, f0.alpha, 1, actor=f0.alpha_manager)
    beta = submit(f0, f0.beta, 1)
    Reservation.objects.filter(pk=early.pk).update(start=t0, submitted_at=t0)
    client = client_for(f0.admin)

    def ids(query: str) -> list[int]:
        answer = client.get(LIST + query)
        assert answer.status_code == 200, answer.content
        return [row["id"] for row in answer.json()["results"]]

    assert ids("?project=beta") == [beta.pk]
    assert ids("?market=spot") == [late.pk]
    assert ids("?tier=spot") == [late.pk]
    assert set(ids("?status=provisioning&status=queued")) == {
        early.pk,
        late.pk,
        manager.pk,
        beta.pk,
    }
    assert ids("?status=ended") == []
    assert ids(f"?requester={f0.alpha_manager.pk}") == [manager.pk]
    assert ids(f"?gpu_model={f0.model.pk}&project=alpha&ordering=id") == [
        early.pk,
        late.pk,
        manager.pk,
    ]
    assert ids("?start_before=2026-04-07T00:00:00Z") == [early.pk]
    assert early.pk not in ids("?start_after=2026-04-07T00:00:00Z")
    assert ids("?ordering=start")[0] == early.pk
    assert ids("?ordering=-submitted_at")[-1] == early.pk
    mine = client_for(f0.alice).get(LIST + "?mine=true").json()["results"]
    assert {row["id"] for row in mine} == {early.pk, late.pk}
    assert client_for(f0.alpha_manager).get(LIST + "?mine=1").json()["count"] == 1
    paged = client.get(LIST + "?page_size=2&ordering=id").json()
    assert paged["count"] == 4 and len(paged["results"]) == 2 and paged["next"]


@pytest.mark.parametrize(
    "query",
    [
        "?project=%00",
        "?status=nope",
        "?gpu_model=x",
        "?requester=1.5",
        "?start_after=soon",
        "?start_after=0001-01-01T00:00:00%2B01:00",
        "?tier=%00",
        "?mine=null",
        "?mine=yes",
    ],
)
def test_it_answers_400_to_a_bad_filter(f0, query):
    answer = client_for(f0.alice).get(LIST + query)
    assert answer.status_code == 400, answer.content
    assert answer.json()["code"] == "invalid"


def test_it_reads_any_utc_offset_python_reads(f0):
    lease = pending(f0)
    # PostgreSQL refuses offsets beyond ±15:59; the filter turns the time to UTC first.
    answer = client_for(f0.alice).get(LIST + "?end_after=1883-07-23T02:44:55.18-18:45")
    assert answer.status_code == 200 and answer.json()["results"][0]["id"] == lease.pk


def test_it_matches_nothing_with_a_huge_requester_id(f0):
    pending(f0)
    answer = client_for(f0.alice).get(LIST + f"?requester={10**30}")
    assert answer.status_code == 200 and answer.json()["count"] == 0


def test_an_id_past_any_column_asks_the_database_nothing(f0):
    """SQLite (the demo) refuses a number past 64 bits outright (OverflowError, a 500);
    no row has such an id, so the filter matches nothing without asking."""

    class Sqlite:
        def filter(self, *args, **kwargs):
            raise OverflowError("Python int too large to convert to SQLite INTEGER")

        def none(self):
            return "nothing"

    assert IntegerFilter(field_name="gpu_model").filter(Sqlite(), BIGGEST_ID + 1) == "nothing"
    largest = IntegerFilter(field_name="gpu_model").filter(Reservation.objects.all(), BIGGEST_ID)
    assert "WHERE" in str(largest.query)  # the largest id is still asked for
    pending(f0)
    answer = client_for(f0.alice).get(LIST + f"?gpu_model={BIGGEST_ID + 1}")
    assert answer.status_code == 200 and answer.json()["count"] == 0


def test_it_lists_in_a_fixed_number_of_queries(f0, django_assert_num_queries):
    client = client_for(f0.admin)
    running_lease(f0)
    client.get(LIST)  # warm caches (content types, the user's groups)
    # The page's count, the leases with their references, their instances.
    with django_assert_num_queries(3):
        assert client.get(LIST).json()["count"] == 1
    for _ in range(14):
        running_lease(f0, project=f0.beta, gpus=2)
    with django_assert_num_queries(3):
        assert client.get(LIST).json()["count"] == 15
    alice = client_for(f0.alice)
    alice.get(LIST)
    with django_assert_num_queries(3):
        assert alice.get(LIST).json()["count"] == 1


def test_it_shows_connection_details_to_members_and_never_to_finance(f0):
    lease = running_lease(f0)
    fiona = factories.user("fiona", finance=True)
    own = client_for(f0.alice).get(detail(lease)).json()
    connection = own["instances"][0]["connection"]
    assert connection["ssh"] == "ssh ubuntu@203.0.113.10"
    assert connection["public_address"] == "203.0.113.10"
    assert connection["private_address"] == "10.0.0.10"
    seen = client_for(fiona).get(detail(lease))
    assert seen.status_code == 200
    assert seen.json()["instances"][0]["connection"] is None
    assert "203.0.113.10" not in seen.content.decode()
    assert "10.0.0.10" not in seen.content.decode()


def test_it_shows_the_jupyter_tunnel_when_the_image_has_it(f0):
    f0.image.frameworks = "PyTorch 2.5, JupyterLab"
    f0.image.save()
    lease = running_lease(f0)
    connection = (
        client_for(f0.alpha_manager).get(detail(lease)).json()["instances"][0]["connection"]
    )
    assert connection["jupyter_tunnel"] == "ssh -N -L 8888:localhost:8888 ubuntu@203.0.113.10"
    assert connection["jupyter_url"].startswith("http://localhost:8888/lab?token=")
    assert connection["tensorboard_tunnel"] == ""
