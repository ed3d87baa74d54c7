"""``/api/v1/pools``: what the pool pages show (C, K, Σ G, GPUs by tier, held, queued,
degraded), the week of bookings, and admins setting C through ``pools.set_capacity``."""

from datetime import timedelta

import pytest
from django.urls import reverse
from django.utils import timezone

from portal.models import AuditEvent
from rental.loans import admission
from rental.models import Pool
from tests import factories
from tests.api.catalog_support import NOT_JSON, client_for, counts, finance, post_raw

pytestmark = pytest.mark.django_db


def submit(f0, project, gpus, now, **options):
    return admission.submit_reservation(
        actor=f0.engineer_of(project),
        project=project,
        gpu_model=f0.model,
        gpu_count=gpus,
        duration_hours=options.pop("hours", 4),
        priority="experiment",
        market=options.pop("market", "on_demand"),
        now=now,
        **options,
    )


@pytest.fixture
def busy(f0, t0):
    """F0's pool full: alpha 2 guaranteed + 1 spot, beta 3 guaranteed, gamma 2 burst and
    2 more queued; gamma books 2 GPUs tomorrow 10:00–18:00."""
    submit(f0, f0.alpha, 2, t0)
    submit(f0, f0.beta, 3, t0)
    submit(f0, f0.gamma, 2, t0)
    submit(f0, f0.alpha, 1, t0, market="spot")
    assert submit(f0, f0.gamma, 2, t0).status == "queued"
    booking = submit(f0, f0.gamma, 2, t0, start=t0 + timedelta(days=1), hours=8)
    assert booking.status == "scheduled"
    return f0


def test_it_shows_a_pool_as_its_page_does(busy):
    answer = client_for(busy.alice).get(reverse("api:pool-detail", args=[busy.pool.pk]))
    assert answer.status_code == 200
    assert answer.json() == {
        "id": busy.pool.pk,
        "gpu_model": busy.model.pk,
        "gpu_model_name": "A100 80GB",
        "capacity": 8,
        "committed_gpus": 0,
        "guaranteed_total": 6,
        "running": 8,
        "running_by_tier": {"guaranteed": 5, "burst": 2, "reserved": 0, "spot": 1},
        "under_notice": 0,
        "held_for_reservations": 0,
        "scheduled": 2,
        "queued": 2,
        "state": "ok",
        "committed_monthly_cost": "0.00",
        "apportionment": "hybrid",
        "residual": "shared",
        "degraded_reason": "",
        "fair_share": False,
        "fair_share_half_life_hours": "168.00",
        "placement_order": "own_first",
        "placement_accounts": [],
    }
    listed = client_for(finance()).get(reverse("api:pool-list")).json()
    assert listed["count"] == 1 and listed["results"][0] == answer.json()


def test_it_answers_the_week_of_bookings_hour_by_hour(busy, t0):
    url = reverse("api:pool-week", args=[busy.pool.pk])
    answer = client_for(busy.bob).get(url + "?since=2026-04-07")
    assert answer.status_code == 200
    week = answer.json()
    assert (week["pool"], week["capacity"], week["since"]) == (
        busy.pool.pk,
        8,
        "2026-04-07T00:00:00Z",
    )
    assert len(week["steps"]) == 7 * 24
    assert week["steps"][0] == {
        "start": "2026-04-07T00:00:00Z",
        "guaranteed": 6,
        "reserved": 0,
        "free": 2,
        "over": False,
    }
    booked = [step["start"] for step in week["steps"] if step["reserved"]]
    assert booked == [f"2026-04-07T{hour:02d}:00:00Z" for hour in range(10, 18)]
    assert week["steps"][10]["free"] == 0


def test_it_starts_the_week_on_this_monday_by_default(busy):
    since = client_for(busy.alice).get(reverse("api:pool-week", args=[busy.pool.pk])).json()
    today = timezone.now().date()
    monday = today - timedelta(days=today.weekday())
    assert since["since"] == f"{monday.isoformat()}T00:00:00Z"


@pytest.mark.parametrize(
    "since",
    [
        "",
        "tomorrow",
        "2026-13-01",
        "x" * 500,
        "2026-04-07\x00",
        "0001-01-01T00:00+01:00",
        "2026-04-07T03:00:00",
        "2026-04-07T12:30:00+02:00",
        "2026-4-7",
        "20260407",
    ],
)
def test_it_answers_400_to_a_bad_week(f0, since):
    """The week starts on a date: a time, or an empty value, is not one."""
    answer = client_for(f0.alice).get(reverse("api:pool-week", args=[f0.pool.pk]), {"since": since})
    assert answer.status_code == 400
    if "\x00" not in since:  # refused before any view (portal.middleware)
        assert "since" in answer.json()["errors"]


def test_it_hides_pools_from_someone_without_a_project(f0):
    for url in (
        reverse("api:pool-list"),
        reverse("api:pool-detail", args=[f0.pool.pk]),
        reverse("api:pool-week", args=[f0.pool.pk]),
    ):
        assert client_for(f0.outsider).get(url).status_code == 404
        assert client_for(None).get(url).status_code == 401
    assert client_for(f0.alice).get(reverse("api:pool-detail", args=[999])).status_code == 404


def test_it_lets_an_admin_set_the_capacity_and_marks_the_pool_degraded(f0):
    url = reverse("api:pool-capacity", args=[f0.pool.pk])
    answer = client_for(f0.admin).post(url, {"capacity": 5}, format="json")
    assert answer.status_code == 200, answer.content
    assert (answer.json()["capacity"], answer.json()["state"]) == (5, "degraded")
    pool = Pool.objects.get()
    assert (pool.capacity, pool.state) == (5, "degraded")
    event = AuditEvent.objects.get(verb="pool.changed")
    assert (event.source, event.before, event.after) == ("api", {"capacity": 8}, {"capacity": 5})
    back = client_for(f0.admin).post(url, {"capacity": 12}, format="json").json()
    assert (back["capacity"], back["state"]) == (12, "ok")


def test_it_refuses_the_capacity_to_everyone_but_admins(f0):
    url = reverse("api:pool-capacity", args=[f0.pool.pk])
    for who in (f0.alice, f0.alpha_manager, finance()):
        answer = client_for(who).post(url, {"capacity": 20}, format="json")
        assert answer.status_code == 403
        assert answer.json()["code"] == "not_permitted"
    assert client_for(f0.outsider).post(url, {"capacity": 20}, format="json").status_code == 404
    assert Pool.objects.get().capacity == 8


@pytest.mark.parametrize(
    "body",
    [{"capacity": "many"}, {"capacity": 10**9 + 1}, {"capacity": -1}, {"capacity": None}, {}, []],
)
def test_it_answers_400_to_a_bad_capacity_and_writes_nothing(f0, body):
    before = counts()
    url = reverse("api:pool-capacity", args=[f0.pool.pk])
    answer = client_for(f0.admin).post(url, body, format="json")
    assert answer.status_code == 400
    assert answer.json()["code"] == "invalid"
    assert counts() == before and Pool.objects.get().capacity == 8


def test_it_refuses_a_capacity_below_the_committed_gpus(f0):
    Pool.objects.filter(pk=f0.pool.pk).update(committed_gpus=6)
    url = reverse("api:pool-capacity", args=[f0.pool.pk])
    answer = client_for(f0.admin).post(url, {"capacity": 4}, format="json")
    assert answer.status_code == 409, answer.content
    body = answer.json()
    assert (body["code"], body["field"]) == ("committed_over_capacity", "capacity")
    assert "errors" not in body
    assert post_raw(client_for(f0.admin), url, NOT_JSON).status_code == 400
    assert Pool.objects.get().capacity == 8
    assert not AuditEvent.objects.filter(verb="pool.changed").exists()


def test_it_lists_pools_in_a_fixed_number_of_queries(f0, t0, django_assert_num_queries):
    submit(f0, f0.alpha, 1, t0)
    url = reverse("api:pool-list")
    client = client_for(f0.alice)
    with django_assert_num_queries(6):  # finance, roles, count, pools, leases, quotas
        assert len(client.get(url).json()["results"]) == 1
    for n in range(14):
        model = factories.gpu_model(f"Model {n}")
        Pool.objects.create(gpu_model=model, capacity=n + 1)
    client = client_for(f0.alice)
    with django_assert_num_queries(6):
        rows = client.get(url + "?ordering=capacity").json()["results"]
    assert len(rows) == 15
    assert [row["capacity"] for row in rows] == sorted(row["capacity"] for row in rows)
    assert next(row for row in rows if row["id"] == f0.pool.pk)["running"] == 1


@pytest.mark.parametrize(
    ("since", "first", "last"),
    [
        ("0001-01-01", "0001-01-01T00:00:00Z", "0001-01-07T23:00:00Z"),
        ("9999-12-22", "9999-12-22T00:00:00Z", "9999-12-28T23:00:00Z"),
        # Any day of the last week of year 9999 gives that last week.
        ("9999-12-23", "9999-12-23T00:00:00Z", "9999-12-29T23:00:00Z"),
        ("9999-12-31", "9999-12-23T00:00:00Z", "9999-12-29T23:00:00Z"),
    ],
)
def test_any_date_gives_a_whole_week_from_midnight_utc(f0, since, first, last):
    url = reverse("api:pool-week", args=[f0.pool.pk])
    answer = client_for(f0.alice).get(url, {"since": since})
    assert answer.status_code == 200, answer.content
    week = answer.json()
    assert week["since"] == first
    assert len(week["steps"]) == 7 * 24
    assert (week["steps"][0]["start"], week["steps"][-1]["start"]) == (first, last)
