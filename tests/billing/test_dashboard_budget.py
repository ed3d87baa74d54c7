"""The dashboard's spend panel shows, for each project the user can see, spend against
budget with the forecast: the project page's chart, in a fixed number of queries."""

from datetime import timedelta
from decimal import Decimal

from django.db import connection
from django.test.utils import CaptureQueriesContext
from django.urls import reverse
from django.utils import timezone

from billing.models import Budget
from portal.models import Membership
from tests import factories
from tests.billing.helpers import lease, run


def panel(client) -> tuple[str, int]:
    with CaptureQueriesContext(connection) as queries:
        response = client.get(reverse("billing:panel_spend"))
    assert response.status_code == 200
    return response.content.decode(), len(queries)


def budgeted_project(f0, slug: str, user, amount: str):
    project = factories.project(slug)
    factories.member(user, project, Membership.Role.ENGINEER)
    Budget.objects.create(project=project, monthly_amount=Decimal(amount), thresholds=[])
    return project


def test_it_charts_each_visible_budget_in_a_fixed_number_of_queries(f0, client):
    now = timezone.now()
    Budget.objects.create(project=f0.alpha, monthly_amount=Decimal("10.00"), thresholds=[])
    Budget.objects.create(project=f0.gamma, monthly_amount=Decimal("99.00"), thresholds=[])
    running = lease(f0, f0.alpha, tier="burst", status="active")
    run(running, start=now - timedelta(hours=5), seconds=None)  # $12.50 so far: over budget
    client.force_login(f0.alice)  # an engineer of alpha only
    body, few = panel(client)
    assert 'id="budget-chart-alpha"' in body
    assert 'id="budget-capped-alpha"' in body  # 12.50 ≥ 10.00
    assert "budget-chart-gamma" not in body  # not alice's project
    for index in range(4):
        budgeted_project(f0, f"extra{index}", f0.alice, "500.00")
    body, many = panel(client)
    assert all(f'id="budget-chart-extra{index}"' in body for index in range(4))
    assert "budget-capped-extra0" not in body
    assert few == many, f"{few} queries with 1 budget, {many} with 5"
