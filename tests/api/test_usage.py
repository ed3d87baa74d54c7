"""``/api/v1/usage``: usage runs of visible projects (finance and admins: all), with
measured GPU-seconds and the rate; filters by project, lease, model, market, tier, month
and time range."""

from datetime import UTC, datetime
from decimal import Decimal

import pytest
from django.urls import reverse

from rental.models import UsageRecord
from tests import factories
from tests.api.leases_world import client_for, running_lease

LIST = reverse("api:usage-list")


def at(day: int, hour: int = 0, month: int = 4) -> datetime:
    return datetime(2026, month, day, hour, tzinfo=UTC)


@pytest.fixture
def runs(f0):
    """alpha: a closed run of 2 GPUs over 3 h in April; beta: a spot run across the end
    of April into May; gamma: an open run."""
    alpha = running_lease(f0, gpus=1)
    beta = running_lease(f0, project=f0.beta, market="spot")
    gamma = running_lease(f0, project=f0.gamma)
    UsageRecord.objects.filter(project=f0.alpha).update(
        start=at(6, 10), end=at(6, 13), gpu_count=2, rate=Decimal("2.500000")
    )
    UsageRecord.objects.filter(project=f0.beta).update(
        start=at(30, 22), end=at(1, 2, month=5), tier="spot", rate=Decimal("1.000000")
    )
    return {
        "alpha": alpha.instances.get().usage.get(),
        "beta": beta.instances.get().usage.get(),
        "gamma": gamma.instances.get().usage.get(),
    }


def ids(client, query: str = "") -> list[int]:
    answer = client.get(LIST + query)
    assert answer.status_code == 200, answer.content
    return [row["id"] for row in answer.json()["results"]]


def test_it_answers_gpu_seconds_and_the_rate(f0, runs):
    answer = client_for(f0.alice).get(LIST)
    assert answer.status_code == 200
    (row,) = answer.json()["results"]
    lease = runs["alpha"].instance.reservation_id
    assert row == {
        "id": runs["alpha"].pk,
        "project": "alpha",
        "lease": lease,
        "instance": runs["alpha"].instance_id,
        "gpu_model": {"id": f0.model.pk, "name": "A100 80GB"},
        "tier": "guaranteed",
        "market": "on_demand",
        "gpu_count": 2,
        "start": "2026-04-06T10:00:00Z",
        "end": "2026-04-06T13:00:00Z",
        "seconds": 3 * 3600,
        "gpu_seconds": 2 * 3 * 3600,
        "rate": "2.500000",
        "currency": "USD",
        "exchange_rate": "1.00000000",
        "end_reason": "",
    }


def test_an_open_run_counts_to_now(f0, runs):
    row = client_for(f0.gary).get(LIST).json()["results"][0]
    assert row["end"] is None
    assert 3500 <= row["seconds"] <= 3700 and row["gpu_seconds"] == row["seconds"]


def test_members_see_their_projects_and_finance_and_admins_see_all(f0, runs):
    everything = sorted(run.pk for run in runs.values())
    fiona = factories.user("fiona", finance=True)
    assert sorted(ids(client_for(fiona))) == everything
    assert sorted(ids(client_for(f0.admin))) == everything
    assert ids(client_for(f0.bob)) == [runs["beta"].pk]
    assert ids(client_for(f0.outsider)) == []
    hidden = reverse("api:usage-detail", kwargs={"pk": runs["gamma"].pk})
    assert client_for(f0.alice).get(hidden).status_code == 404
    assert client_for(fiona).get(hidden).status_code == 200
    assert client_for(None).get(LIST).status_code == 401


def test_it_filters_by_month_range_and_fields(f0, runs):
    client = client_for(f0.admin)
    lease = runs["alpha"].instance.reservation_id
    assert ids(client, "?project=beta") == [runs["beta"].pk]
    assert ids(client, f"?lease={lease}") == [runs["alpha"].pk]
    assert ids(client, "?market=spot") == [runs["beta"].pk]
    assert ids(client, "?tier=spot") == [runs["beta"].pk]
    assert ids(client, f"?gpu_model={f0.model.pk}&project=alpha") == [runs["alpha"].pk]
    # Runs that overlap the month: beta's crosses into May; gamma's is open (now).
    assert ids(client, "?period=2026-04") == [runs["alpha"].pk, runs["beta"].pk]
    assert runs["beta"].pk in ids(client, "?period=2026-05")
    assert runs["alpha"].pk not in ids(client, "?period=2026-05")
    assert ids(client, "?period=2026-03") == []
    assert ids(client, "?since=2026-04-06T13:00:00Z&until=2026-05-01T00:00:00Z") == [
        runs["beta"].pk
    ]
    assert ids(client, "?until=2026-04-06T10:00:01Z") == [runs["alpha"].pk]
    assert ids(client, "?ordering=-start")[-1] == runs["alpha"].pk


@pytest.mark.parametrize(
    "query",
    [
        "?period=2026-13",
        "?period=April",
        "?period=%00",
        "?since=yesterday",
        "?project=%00",
        "?tier=nope",
        "?lease=one",
    ],
)
def test_it_answers_400_to_a_bad_filter(f0, runs, query):
    answer = client_for(f0.admin).get(LIST + query)
    assert answer.status_code == 400, answer.content
    assert answer.json()["code"] == "invalid"


def test_it_is_read_only(f0, runs):
    client = client_for(f0.admin)
    assert client.post(LIST, {}, format="json").status_code == 405
    detail = reverse("api:usage-detail", kwargs={"pk": runs["alpha"].pk})
    assert client.delete(detail).status_code == 405
    assert UsageRecord.objects.count() == 3


def test_it_lists_in_a_fixed_number_of_queries(f0, django_assert_num_queries):
    fiona = factories.user("fiona", finance=True)
    client = client_for(fiona)
    running_lease(f0)
    client.get(LIST)
    with django_assert_num_queries(2):  # the page's count, the runs with their references
        assert client.get(LIST).json()["count"] == 1
    for _ in range(7):
        running_lease(f0, project=f0.beta, gpus=2)
    with django_assert_num_queries(2):
        assert client.get(LIST).json()["count"] == 15
