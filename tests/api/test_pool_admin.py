"""What an admin does on the pool page, through the API: ``PATCH /api/v1/pools/{id}``
(C, K, F, cost sharing), ``POST /api/v1/pools/{id}/degraded`` and
``PATCH /api/v1/offerings/{id}`` (prices, availability), by the same services and rules."""

from decimal import Decimal

import pytest
from django.urls import reverse

from portal.models import AuditEvent
from rental.models import Offering, Pool
from tests.api.catalog_support import NOT_JSON, client_for, counts, finance, post_raw

pytestmark = pytest.mark.django_db


def test_an_admin_patches_the_pool_settings(f0):
    url = reverse("api:pool-detail", args=[f0.pool.pk])
    body = {"committed_gpus": 6, "committed_monthly_cost": "8400.00", "residual": "platform"}
    answer = client_for(f0.admin).patch(url, body, format="json")
    assert answer.status_code == 200, answer.content
    data = answer.json()
    assert (data["committed_gpus"], data["committed_monthly_cost"], data["residual"]) == (
        6,
        "8400.00",
        "platform",
    )
    assert data["capacity"] == 8  # not sent, kept
    event = AuditEvent.objects.get(verb="pool.changed")
    assert (event.source, event.after) == (
        "api",
        {"committed_gpus": 6, "committed_monthly_cost": "8400.00", "residual": "platform"},
    )


@pytest.mark.parametrize(
    ("body", "field"),
    [
        ({"capacity": -1}, "capacity"),
        ({"capacity": 10**26}, "capacity"),
        ({"capacity": "many"}, "capacity"),
        ({"committed_monthly_cost": "1e26"}, "committed_monthly_cost"),
        ({"committed_monthly_cost": "-5"}, "committed_monthly_cost"),
        ({"apportionment": "fair"}, "apportionment"),
        ({"placement_order": "random"}, "placement_order"),
        ({"placement_accounts": ["first"]}, "placement_accounts"),
    ],
)
def test_a_bad_pool_setting_is_a_400_naming_its_field(f0, body, field):
    before = counts()
    url = reverse("api:pool-detail", args=[f0.pool.pk])
    answer = client_for(f0.admin).patch(url, body, format="json")
    assert answer.status_code == 400
    assert field in answer.json()["errors"]
    assert counts() == before


def test_an_admin_sets_where_the_pool_places_its_leases(f0):
    url = reverse("api:pool-detail", args=[f0.pool.pk])
    account = f0.offering.account_id
    body = {"placement_order": "cheapest", "placement_accounts": [account]}
    answer = client_for(f0.admin).patch(url, body, format="json")
    assert answer.status_code == 200, answer.content
    assert (answer.json()["placement_order"], answer.json()["placement_accounts"]) == (
        "cheapest",
        [account],
    )
    f0.pool.refresh_from_db()
    assert (f0.pool.placement_order, f0.pool.placement_accounts) == ("cheapest", [account])
    # An account that does not exist: refused naming the field, nothing written.
    before = counts()
    answer = client_for(f0.admin).patch(url, {"placement_accounts": [99999]}, format="json")
    assert answer.status_code in (400, 409) and answer.json()["field"] == "placement_accounts"
    assert counts() == before
    f0.pool.refresh_from_db()
    assert f0.pool.placement_accounts == [account]


@pytest.mark.parametrize(
    ("committed", "code"),
    [
        (4, "guarantees_over_capacity"),  # Σ G is 6 (Q1)
        (9, "committed_over_capacity"),  # above C
    ],
)
def test_committed_gpus_a_rule_refuses_are_a_409_naming_the_rule(f0, committed, code):
    """A whole number of GPUs fits the schema; the pool's rules refuse these."""
    before = counts()
    url = reverse("api:pool-detail", args=[f0.pool.pk])
    answer = client_for(f0.admin).patch(url, {"committed_gpus": committed}, format="json")
    assert answer.status_code == 409, answer.content
    assert (answer.json()["code"], answer.json()["field"]) == (code, "committed_gpus")
    assert "errors" not in answer.json()
    assert counts() == before


def test_only_admins_change_a_pool(f0):
    url = reverse("api:pool-detail", args=[f0.pool.pk])
    for who in (f0.alice, f0.alpha_manager, finance()):
        answer = client_for(who).patch(url, {"capacity": 20}, format="json")
        assert answer.status_code == 403
    assert client_for(f0.outsider).patch(url, {"capacity": 20}, format="json").status_code == 404
    assert client_for(None).patch(url, {"capacity": 20}, format="json").status_code == 401
    assert Pool.objects.get().capacity == 8


def test_an_admin_marks_a_pool_degraded_and_clears_it(f0):
    url = reverse("api:pool-degraded", args=[f0.pool.pk])
    admin = client_for(f0.admin)
    marked = admin.post(url, {"degraded": True, "reason": "region down"}, format="json")
    assert marked.status_code == 200
    assert (marked.json()["state"], marked.json()["degraded_reason"]) == (
        "degraded",
        "region down",
    )
    cleared = admin.post(url, {"degraded": False}, format="json")
    assert (cleared.json()["state"], cleared.json()["degraded_reason"]) == ("ok", "")
    again = admin.post(url, {"degraded": False}, format="json")
    assert (again.status_code, again.json()["code"]) == (409, "not_marked")


@pytest.mark.parametrize(
    "body",
    [{}, {"degraded": True, "reason": "bad\x00"}, {"degraded": "maybe"}],
)
def test_a_mark_that_does_not_fit_the_schema_is_a_400(f0, body):
    before = counts()
    answer = client_for(f0.admin).post(
        reverse("api:pool-degraded", args=[f0.pool.pk]), body, format="json"
    )
    assert answer.status_code == 400
    assert counts() == before


@pytest.mark.parametrize("body", [{"degraded": True}, {"degraded": True, "reason": "  "}])
def test_marking_without_a_reason_is_a_409_reason_required(f0, body):
    """The reason is optional to clear a mark, so its absence is the rule's refusal."""
    before = counts()
    answer = client_for(f0.admin).post(
        reverse("api:pool-degraded", args=[f0.pool.pk]), body, format="json"
    )
    assert answer.status_code == 409, answer.content
    assert (answer.json()["code"], answer.json()["field"]) == ("reason_required", "reason")
    assert "errors" not in answer.json()
    assert counts() == before


def test_an_admin_patches_an_offerings_prices(f0):
    url = reverse("api:offering-detail", args=[f0.offering.pk])
    body = {"on_demand_price_per_hour": "3.10", "spot_price_per_hour": None, "is_available": False}
    answer = client_for(f0.admin).patch(url, body, format="json")
    assert answer.status_code == 200, answer.content
    assert (
        answer.json()["on_demand_price_per_hour"],
        answer.json()["spot_price_per_hour"],
        answer.json()["is_available"],
    ) == ("3.100000", None, False)
    offering = Offering.objects.get()
    assert offering.on_demand_price_per_hour == Decimal("3.10")
    assert AuditEvent.objects.get(verb="offering.changed").source == "api"


@pytest.mark.parametrize(
    ("body", "field"),
    [
        ({"on_demand_price_per_hour": "-1"}, "on_demand_price_per_hour"),
        ({"on_demand_price_per_hour": "1e26"}, "on_demand_price_per_hour"),
        ({"on_demand_price_per_hour": None}, "on_demand_price_per_hour"),
        ({"spot_price_per_hour": "cheap"}, "spot_price_per_hour"),
        ({"is_available": "perhaps"}, "is_available"),
    ],
)
def test_a_bad_price_is_a_400_naming_its_field(f0, body, field):
    before = counts()
    url = reverse("api:offering-detail", args=[f0.offering.pk])
    answer = client_for(f0.admin).patch(url, body, format="json")
    assert answer.status_code == 400
    assert field in answer.json()["errors"]
    assert post_raw(client_for(f0.admin), url, NOT_JSON, method="patch").status_code == 400
    assert counts() == before


def test_only_admins_set_prices(f0):
    url = reverse("api:offering-detail", args=[f0.offering.pk])
    for who in (f0.alice, f0.alpha_manager, finance()):
        answer = client_for(who).patch(url, {"is_available": False}, format="json")
        assert answer.status_code == 403
    assert client_for(f0.outsider).patch(url, {}, format="json").status_code == 404
    assert Offering.objects.get().is_available is True
