"""The money pages keep their cost at any size: the same number of queries, at most 12,
with a few usage runs or many, in a few projects or many, for the open month (kept lines
as of the last refresh) and a closed one (stored lines)."""

import random
from datetime import timedelta

import pytest
from django.db import connection
from django.test.utils import CaptureQueriesContext
from django.utils import timezone

from billing import spend
from billing.periods import period_start
from billing.services import close_period
from portal.models import Membership
from rental.models import Quota
from tests import factories
from tests.billing.test_rollups import awkward_runs, commit_capacity

MOST_QUERIES = 12


def queries(client, url: str) -> int:
    """A page's queries on its second fetch: what it costs once its caches are warm."""
    client.get(url)
    with CaptureQueriesContext(connection) as captured:
        response = client.get(url)
    assert response.status_code == 200, url
    return len(captured)


def more_projects(f0, count: int, offset: int) -> None:
    for index in range(offset, offset + count):
        project = factories.project(f"extra-{index:03d}")
        Quota.objects.create(project=project, gpu_model=f0.model, guaranteed=0, ceiling=2)
        factories.member(f0.alice, project, "engineer")


def pages(f0, last_month: str) -> dict[str, tuple[object, str]]:
    slug = f0.alpha.slug
    return {
        "statement, open month": (f0.alpha_manager, f"/billing/projects/{slug}/statement/"),
        "statement, closed month": (
            f0.alpha_manager,
            f"/billing/projects/{slug}/statement/?period={last_month}",
        ),
        "spend panel": (f0.alpha_manager, "/billing/panels/spend/"),
        "finance, open month": (f0.finance, "/billing/finance/"),
        "finance, closed month": (f0.finance, f"/billing/finance/?period={last_month}"),
    }


@pytest.fixture
def finance_user(f0):
    f0.finance = factories.user("fiona", finance=True)
    Membership.objects.filter(user=f0.alpha_manager, project=f0.alpha).update(role="manager")
    return f0


def test_money_pages_keep_their_queries_at_any_size(finance_user, client):
    f0 = finance_user
    commit_capacity(f0, mode="hybrid")
    now = timezone.now()
    this_month = period_start(now)
    last_month = period_start(this_month - timedelta(days=1))
    rng = random.Random(3)

    def grow(runs: int, projects: int, offset: int) -> dict[str, int]:
        more_projects(f0, projects, offset)
        awkward_runs(f0, rng, runs, around=last_month + timedelta(days=10))
        awkward_runs(f0, rng, runs, around=now - timedelta(days=1))
        spend.refresh(now=timezone.now())
        counts = {}
        for name, (who, url) in pages(f0, f"{last_month:%Y-%m}").items():
            client.force_login(who)
            counts[name] = queries(client, url)
        return counts

    grow(10, 2, 0)
    close_period(period=last_month, now=now)  # last month: what a closed statement reads
    few = grow(0, 0, 100)
    many = grow(30, 8, 200)
    assert few == many, (few, many)
    over = {name: count for name, count in many.items() if count > MOST_QUERIES}
    assert not over, over
