"""``/api/v1/budgets``: members and finance read a project's budget and thresholds; its
managers and admins set it through billing.budgets.set_budget."""

from decimal import Decimal

import pytest
from rest_framework.test import APIClient

from billing import budgets
from billing.models import Budget
from portal.models import AuditEvent
from tests import factories

URL = "/api/v1/budgets"
BODY = {
    "project": "alpha",
    "monthly_amount": "5000.00",
    "cap_policy": "stop_burst",
    "thresholds": [{"percent": 100, "kind": "forecast"}, {"percent": 50, "kind": "actual"}],
}


def as_user(user) -> APIClient:
    client = APIClient()
    client.force_login(user)
    return client


def set_budget(f0, project, amount: str = "1000.00") -> Budget:
    return budgets.set_budget(
        project=project,
        actor=f0.admin,
        monthly_amount=amount,
        thresholds=[{"percent": 80, "kind": "actual"}],
    )


def test_a_manager_sets_the_budget_and_members_read_it(f0):
    response = as_user(f0.alpha_manager).post(URL, BODY, format="json")
    assert response.status_code == 201
    budget = Budget.objects.get(project=f0.alpha)
    assert budget.monthly_amount == Decimal("5000.00")
    assert budget.cap_policy == "stop_burst"
    assert budget.thresholds == [
        {"percent": 50, "kind": "actual"},
        {"percent": 100, "kind": "forecast"},
    ]
    assert response.json() == {
        "id": budget.pk,
        "project": "alpha",
        "monthly_amount": "5000.00",
        "cap_policy": "stop_burst",
        "thresholds": budget.thresholds,
    }
    assert AuditEvent.objects.get(verb="budget.set").source == "api"
    read = as_user(f0.alice).get(f"{URL}/{budget.pk}")
    assert read.status_code == 200 and read.json() == response.json()


def test_setting_again_replaces_it(f0):
    budget = set_budget(f0, f0.alpha)
    again = as_user(f0.alpha_manager).post(URL, {**BODY, "monthly_amount": "10"}, format="json")
    assert again.status_code == 200
    put = as_user(f0.alpha_manager).put(
        f"{URL}/{budget.pk}", {"monthly_amount": "20.50", "thresholds": []}, format="json"
    )
    assert put.status_code == 200
    budget.refresh_from_db()
    assert budget.monthly_amount == Decimal("20.50")
    assert budget.thresholds == [] and budget.cap_policy == "refuse_new"
    assert Budget.objects.count() == 1


def test_engineers_and_finance_read_but_do_not_set(f0):
    budget = set_budget(f0, f0.alpha)
    fiona = factories.user("fiona", finance=True)
    assert [b["project"] for b in as_user(f0.alice).get(URL).json()["results"]] == ["alpha"]
    assert as_user(fiona).get(f"{URL}/{budget.pk}").status_code == 200
    for user in (f0.alice, fiona):
        client = as_user(user)
        assert client.post(URL, BODY, format="json").status_code == 404
        assert client.put(f"{URL}/{budget.pk}", BODY, format="json").status_code == 404
    budget.refresh_from_db()
    assert budget.monthly_amount == Decimal("1000.00")
    assert not AuditEvent.objects.filter(source="api").exists()


def test_an_outsider_gets_404(f0):
    gamma = set_budget(f0, f0.gamma)
    for user in (f0.alice, f0.alpha_manager, f0.bob):
        client = as_user(user)
        assert client.get(f"{URL}/{gamma.pk}").status_code == 404
        assert client.put(f"{URL}/{gamma.pk}", BODY, format="json").status_code == 404
        assert client.post(URL, {**BODY, "project": "gamma"}, format="json").status_code == 404
    gamma.refresh_from_db()
    assert gamma.monthly_amount == Decimal("1000.00")


def test_it_filters_budgets_by_project(f0):
    set_budget(f0, f0.alpha)
    set_budget(f0, f0.beta)
    client = as_user(f0.admin)
    assert [b["project"] for b in client.get(URL).json()["results"]] == ["alpha", "beta"]
    assert [b["project"] for b in client.get(f"{URL}?project=beta").json()["results"]] == ["beta"]


@pytest.mark.parametrize(
    ("change", "field"),
    [
        ({"monthly_amount": "-1"}, "monthly_amount"),
        ({"monthly_amount": "1.001"}, "monthly_amount"),
        ({"monthly_amount": "1e40"}, "monthly_amount"),
        ({"monthly_amount": "lots"}, "monthly_amount"),
        ({"cap_policy": "panic"}, "cap_policy"),
        ({"thresholds": [{"percent": 0, "kind": "actual"}]}, "thresholds"),
        ({"thresholds": [{"percent": 50, "kind": "hope"}]}, "thresholds"),
        ({"thresholds": "50"}, "thresholds"),
        ({"thresholds": [{"percent": 10**12, "kind": "actual"}]}, "thresholds"),
        ({"thresholds": [{"percent": p, "kind": "actual"} for p in range(1, 30)]}, "thresholds"),
        ({"project": "a" * 60}, "project"),
    ],
)
def test_it_refuses_bad_input_with_the_field_and_writes_nothing(f0, change, field):
    response = as_user(f0.alpha_manager).post(URL, {**BODY, **change}, format="json")
    assert response.status_code == 400, response.json()
    assert field in response.json()["errors"]
    assert not Budget.objects.exists()
    assert not AuditEvent.objects.exists()


def test_a_threshold_listed_twice_is_a_409_and_writes_nothing(f0):
    """Each threshold fits the schema; the same one twice is a rule over the list."""
    twice = {**BODY, "thresholds": [{"percent": 50, "kind": "actual"}] * 2}
    response = as_user(f0.alpha_manager).post(URL, twice, format="json")
    assert response.status_code == 409, response.json()
    body = response.json()
    assert (body["code"], body["field"]) == ("duplicate_threshold", "thresholds")
    assert "errors" not in body
    assert not Budget.objects.exists()
    assert not AuditEvent.objects.exists()


@pytest.mark.parametrize("count", [2, 15])
def test_the_list_is_a_fixed_number_of_queries(f0, count, django_assert_num_queries):
    for index in range(count):
        set_budget(f0, factories.project(f"p{index:02}"))
    client = as_user(f0.admin)
    client.get(URL)
    with django_assert_num_queries(4):
        response = client.get(f"{URL}?page_size=200")
    assert response.json()["count"] == count


def test_a_body_that_is_not_json_is_400_and_writes_nothing(f0):
    client = as_user(f0.alpha_manager)
    assert client.post(URL, "{oops", content_type="application/json").status_code == 400
    assert client.post(URL, [1, 2], format="json").status_code == 400
    wrong_types = {**BODY, "monthly_amount": ["5"], "thresholds": {"percent": 5}}
    response = client.post(URL, wrong_types, format="json")
    assert response.status_code == 400
    assert {"monthly_amount", "thresholds"} <= set(response.json()["errors"])
    assert not Budget.objects.exists()
