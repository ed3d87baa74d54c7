"""``/api/v1/quotas``: quotas of the projects a caller sees; admins set G, L and weight
(``quotas.set_quota``, rule Q1), managers their auto-approve limits within the admin's
caps (``quota_requests.set_auto_approve_limits``)."""

from decimal import Decimal

import pytest
from django.urls import reverse

from portal.models import AuditEvent
from rental.models import Pool, Quota
from tests import factories
from tests.api.catalog_support import HUGE, NOT_JSON, client_for, counts, finance, post_raw

pytestmark = pytest.mark.django_db


def quota(f0, project) -> Quota:
    return Quota.objects.get(project=project, gpu_model=f0.model)


def detail(pk: int) -> str:
    return reverse("api:quota-detail", args=[pk])


def limits(pk: int) -> str:
    return reverse("api:quota-auto-approve-limits", args=[pk])


def test_it_lists_the_quotas_of_the_projects_the_caller_sees(f0):
    answer = client_for(f0.alice).get(reverse("api:quota-list"))
    assert answer.status_code == 200
    assert answer.json()["results"] == [
        {
            "id": quota(f0, f0.alpha).pk,
            "project": "alpha",
            "gpu_model": f0.model.pk,
            "gpu_model_name": "A100 80GB",
            "guaranteed": 2,
            "ceiling": 6,
            "weight": "1.000",
            "max_hours_per_lease": None,
            "max_gpus_per_lease": None,
            "auto_approve_gpus_cap": None,
            "auto_approve_hours_cap": None,
        }
    ]
    everyone = client_for(finance()).get(reverse("api:quota-list")).json()["results"]
    assert [row["project"] for row in everyone] == ["alpha", "beta", "gamma"]
    only = client_for(f0.admin).get(reverse("api:quota-list") + "?project=beta&ordering=-ceiling")
    assert [row["ceiling"] for row in only.json()["results"]] == [8]
    other = factories.gpu_model("H100 80GB")
    assert client_for(f0.admin).get(f"/api/v1/quotas?gpu_model={other.pk}").json()["count"] == 0


def test_it_hides_another_projects_quota(f0):
    gamma = quota(f0, f0.gamma)
    assert client_for(f0.alice).get(detail(gamma.pk)).status_code == 404
    assert client_for(f0.alice).patch(detail(gamma.pk), {"ceiling": 1}).status_code == 404
    assert client_for(f0.alice).post(limits(gamma.pk), {}).status_code == 404
    assert client_for(None).get(detail(gamma.pk)).status_code == 401
    assert client_for(f0.bob).get("/api/v1/quotas?project=alpha").json()["count"] == 0


def test_it_lets_an_admin_change_g_and_l_and_keeps_what_was_not_sent(f0):
    Quota.objects.filter(project=f0.alpha).update(max_hours_per_lease=8, max_gpus_per_lease=2)
    alpha = quota(f0, f0.alpha)
    answer = client_for(f0.admin).patch(
        detail(alpha.pk), {"guaranteed": 4, "weight": "2.5"}, format="json"
    )
    assert answer.status_code == 200, answer.content
    assert (answer.json()["guaranteed"], answer.json()["weight"]) == (4, "2.500")
    alpha.refresh_from_db()
    assert (alpha.guaranteed, alpha.ceiling, alpha.weight) == (4, 6, Decimal("2.5"))
    assert (alpha.max_hours_per_lease, alpha.max_gpus_per_lease) == (8, 2)
    event = AuditEvent.objects.get(verb="quota.set")
    assert event.source == "api" and event.after["guaranteed"] == 4


def test_it_refuses_guarantees_over_the_pool_with_the_rule_and_its_figures(f0):
    alpha = quota(f0, f0.alpha)
    before = counts()
    answer = client_for(f0.admin).patch(detail(alpha.pk), {"guaranteed": 5}, format="json")
    assert answer.status_code == 409
    body = answer.json()
    assert body["code"] == "guarantees_over_capacity"
    assert body["field"] == "guaranteed" and "errors" not in body
    assert body["figures"] == {"total": 9, "bound": 8, "left": 4}
    assert counts() == before and quota(f0, f0.alpha).guaranteed == 2


def test_it_refuses_a_ceiling_below_the_guarantee(f0):
    alpha = quota(f0, f0.alpha)
    answer = client_for(f0.admin).patch(detail(alpha.pk), {"ceiling": 1}, format="json")
    assert answer.status_code == 409
    assert (answer.json()["code"], answer.json()["field"]) == ("ceiling_below_guarantee", "ceiling")
    assert "errors" not in answer.json()
    assert quota(f0, f0.alpha).ceiling == 6


def test_it_refuses_a_manager_changing_g(f0):
    alpha = quota(f0, f0.alpha)
    fiona = finance()
    before = counts()
    for who in (f0.alpha_manager, f0.alice, fiona):
        answer = client_for(who).patch(detail(alpha.pk), {"guaranteed": 3}, format="json")
        assert answer.status_code == 403
        assert answer.json()["code"] == "not_permitted"
    assert counts() == before and quota(f0, f0.alpha).guaranteed == 2


def test_it_lets_an_admin_set_a_new_quota(f0):
    h100 = factories.gpu_model("H100 80GB")
    Pool.objects.create(gpu_model=h100, capacity=4)
    body = {"project": "beta", "gpu_model": h100.pk, "guaranteed": 1, "ceiling": 3}
    answer = client_for(f0.admin).post(reverse("api:quota-list"), body, format="json")
    assert answer.status_code == 201, answer.content
    made = Quota.objects.get(project=f0.beta, gpu_model=h100)
    assert answer.json()["id"] == made.pk
    assert (made.guaranteed, made.ceiling, made.weight) == (1, 3, Decimal("1"))
    again = client_for(f0.admin).post(
        reverse("api:quota-list"), {**body, "ceiling": 4}, format="json"
    )
    assert again.status_code == 200 and again.json()["ceiling"] == 4
    for who in (f0.alpha_manager, finance()):
        refused = client_for(who).post(reverse("api:quota-list"), body, format="json")
        assert refused.status_code == 403
    nowhere = factories.gpu_model("T4 16GB")
    no_pool = client_for(f0.admin).post(
        reverse("api:quota-list"), {**body, "gpu_model": nowhere.pk}, format="json"
    )
    assert no_pool.status_code == 409
    assert (no_pool.json()["code"], no_pool.json()["field"]) == ("no_pool", "gpu_model")
    assert not Quota.objects.filter(gpu_model=nowhere).exists()
    unknown = {**body, "project": "nope"}
    assert client_for(f0.admin).post("/api/v1/quotas", unknown, format="json").status_code == 404


def test_it_lets_a_manager_set_auto_approve_limits_within_the_admins_caps(f0):
    alpha = quota(f0, f0.alpha)
    Quota.objects.filter(pk=alpha.pk).update(auto_approve_gpus_cap=2)
    body = {"max_gpus_per_lease": 2, "max_hours_per_lease": 8}
    answer = client_for(f0.alpha_manager).post(limits(alpha.pk), body, format="json")
    assert answer.status_code == 200, answer.content
    assert (answer.json()["max_gpus_per_lease"], answer.json()["max_hours_per_lease"]) == (2, 8)
    assert AuditEvent.objects.get(verb="quota.auto_approve_set").source == "api"
    over = client_for(f0.alpha_manager).post(
        limits(alpha.pk), {**body, "max_gpus_per_lease": 3}, format="json"
    )
    assert over.status_code == 409 and over.json()["field"] == "max_gpus_per_lease"
    assert "errors" not in over.json()
    assert quota(f0, f0.alpha).max_gpus_per_lease == 2
    engineer = client_for(f0.alice).post(limits(alpha.pk), body, format="json")
    assert engineer.status_code == 403
    cleared = client_for(f0.admin).post(
        limits(alpha.pk), {"max_gpus_per_lease": None, "max_hours_per_lease": None}, format="json"
    )
    assert cleared.status_code == 200 and quota(f0, f0.alpha).max_gpus_per_lease is None


def test_it_lets_an_admin_cap_the_auto_approve_limits(f0):
    alpha = quota(f0, f0.alpha)
    Quota.objects.filter(pk=alpha.pk).update(max_gpus_per_lease=4)
    url = reverse("api:quota-auto-approve-caps", args=[alpha.pk])
    body = {"auto_approve_gpus_cap": 2, "auto_approve_hours_cap": 8}
    assert client_for(f0.alpha_manager).post(url, body, format="json").status_code == 403
    answer = client_for(f0.admin).post(url, body, format="json")
    assert answer.status_code == 200, answer.content
    assert (answer.json()["auto_approve_gpus_cap"], answer.json()["max_gpus_per_lease"]) == (2, 2)
    assert AuditEvent.objects.filter(verb="quota.auto_approve_caps_set", source="api").exists()
    over = client_for(f0.admin).post(url, {**body, "auto_approve_gpus_cap": 7}, format="json")
    assert over.status_code == 409
    said = over.json()
    assert (said["code"], said["field"]) == ("cap_over_ceiling", "auto_approve_gpus_cap")
    assert quota(f0, f0.alpha).auto_approve_gpus_cap == 2


@pytest.mark.parametrize(
    "body",
    [
        {"guaranteed": "two"},
        {"guaranteed": 10**9},
        {"ceiling": -1},
        {"weight": "heavy"},
        {"weight": "1e400"},
        {"max_hours_per_lease": [1]},
        ["guaranteed", 3],
    ],
)
def test_it_answers_400_to_a_bad_change_and_writes_nothing(f0, body):
    alpha = quota(f0, f0.alpha)
    before = counts()
    answer = client_for(f0.admin).patch(detail(alpha.pk), body, format="json")
    assert answer.status_code == 400, answer.content
    assert answer.json()["code"] == "invalid"
    assert counts() == before and quota(f0, f0.alpha).guaranteed == 2


@pytest.mark.parametrize(
    "body",
    [
        {"project": HUGE, "gpu_model": 1, "guaranteed": 1, "ceiling": 1},
        {"project": "al\x00pha", "gpu_model": 1, "guaranteed": 1, "ceiling": 1},
        {"project": "alpha", "gpu_model": 10**12, "guaranteed": 1, "ceiling": 1},
        {"project": "alpha", "gpu_model": {"id": 1}, "guaranteed": 1, "ceiling": 1},
        {"project": "alpha"},
    ],
)
def test_it_answers_400_to_a_bad_new_quota_and_writes_nothing(f0, body):
    before = counts()
    answer = client_for(f0.admin).post(reverse("api:quota-list"), body, format="json")
    assert answer.status_code == 400, answer.content
    assert counts() == before


def test_it_answers_400_to_a_body_that_is_not_json(f0):
    alpha = quota(f0, f0.alpha)
    before = counts()
    client = client_for(f0.admin)
    assert post_raw(client, detail(alpha.pk), NOT_JSON, method="patch").status_code == 400
    assert post_raw(client, limits(alpha.pk), NOT_JSON).status_code == 400
    assert post_raw(client, reverse("api:quota-list"), NOT_JSON).status_code == 400
    assert counts() == before


def test_it_lists_quotas_in_a_fixed_number_of_queries(f0, django_assert_num_queries):
    client = client_for(f0.alice)
    with django_assert_num_queries(4):  # finance, roles, count, page
        assert len(client.get(reverse("api:quota-list")).json()["results"]) == 1
    for n in range(14):
        model = factories.gpu_model(f"Model {n}")
        Quota.objects.create(project=f0.alpha, gpu_model=model, guaranteed=0, ceiling=1)
    client = client_for(f0.alice)
    with django_assert_num_queries(4):
        assert len(client.get(reverse("api:quota-list")).json()["results"]) == 15
