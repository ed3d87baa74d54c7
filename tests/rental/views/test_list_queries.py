"""List pages keep a fixed number of queries whatever the number of rows."""

import pytest
from django.db import connection
from django.test.utils import CaptureQueriesContext
from django.urls import reverse

from portal.models import Membership
from rental.loans import admission
from rental.models import Quota
from tests import factories


def count_queries(client, url: str) -> int:
    with CaptureQueriesContext(connection) as queries:
        response = client.get(url)
    assert response.status_code == 200, url
    return len(queries)


def add_leases(f0, how_many: int) -> None:
    for _ in range(how_many):
        admission.submit_reservation(
            actor=f0.alice,
            project=f0.alpha,
            gpu_model=f0.model,
            gpu_count=1,
            duration_hours=12,
            priority="learning",
            market="on_demand",
        )


@pytest.mark.parametrize(
    "name",
    [
        "rental:leases",
        "rental:lease_list_partial",
        "rental:approvals",
        "rental:projects",
        "rental:panel_leases",
        "billing:panel_spend",
    ],
)
def test_it_keeps_list_queries_flat(f0, client, name, settings):
    settings.PORTAL_MAX_PENDING_PER_USER = 1000  # one requester files every waiting lease
    Quota.objects.filter(project=f0.alpha).update(max_hours_per_lease=8)  # all wait
    Membership.objects.filter(user=f0.alpha_manager).update(role="manager")
    factories.member(f0.alpha_manager, f0.beta, "engineer")
    client.force_login(f0.alpha_manager)
    add_leases(f0, 2)
    few = count_queries(client, reverse(name))
    add_leases(f0, 12)
    many = count_queries(client, reverse(name))
    assert few == many, f"{name}: {few} queries with 2 leases, {many} with 14"
