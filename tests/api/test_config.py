"""``/api/v1/projects/{slug}/config``: export as YAML or JSON, dry run and apply."""

from decimal import Decimal

import pytest
import yaml
from django.apps import apps
from django.urls import reverse
from rest_framework.test import APIClient

from billing.models import Budget
from portal.models import Membership
from rental.models import Pool, Quota
from tests import factories as f

pytestmark = pytest.mark.django_db


@pytest.fixture
def world():
    users = {
        "admin": f.user("root", staff=True),
        "manager": f.user("mia"),
        "engineer": f.user("eli"),
        "outsider": f.user("oz"),
        "finance": f.user("fin", finance=True),
    }
    alpha = f.project("alpha")
    f.member(users["manager"], alpha, Membership.Role.MANAGER)
    f.member(users["engineer"], alpha)
    model = f.gpu_model("A100 80GB")
    Pool.objects.create(gpu_model=model, capacity=8)
    Quota.objects.create(project=alpha, gpu_model=model, guaranteed=2, ceiling=4)
    Budget.objects.create(project=alpha, monthly_amount=Decimal("100.00"), thresholds=[])
    return users


def client_for(user) -> APIClient:
    client = APIClient()
    if user is not None:
        client.force_authenticate(user)
    return client


def url(slug="alpha") -> str:
    return reverse("api:project-config", kwargs={"slug": slug})


def _counts() -> dict[str, int]:
    return {m._meta.label: m.objects.count() for m in apps.get_models()}


def test_it_exports_yaml_and_json(world):
    answer = client_for(world["engineer"]).get(url())
    assert answer.status_code == 200
    assert answer["Content-Type"].startswith("application/yaml")
    doc = yaml.safe_load(answer.content)
    assert doc["quotas"][0]["guaranteed"] == 2
    answer = client_for(world["engineer"]).get(url() + "?format=json")
    assert answer.status_code == 200 and answer.json()["budget"]["monthly_amount"] == "100.00"


def test_it_hides_the_project_from_an_outsider(world):
    assert client_for(world["outsider"]).get(url()).status_code == 404
    body = client_for(world["admin"]).get(url()).content
    answer = client_for(world["outsider"]).post(url(), body, content_type="application/yaml")
    assert answer.status_code == 404
    assert client_for(None).get(url()).status_code in (401, 403)


def test_it_answers_a_dry_run_with_the_diff_and_writes_nothing(world):
    body = client_for(world["admin"]).get(url()).content.replace(b"ceiling: 4", b"ceiling: 6")
    before = _counts()
    answer = client_for(world["manager"]).post(
        url() + "?dry_run=1", body, content_type="application/yaml"
    )
    assert answer.status_code == 403  # a ceiling is an admin's
    answer = client_for(world["admin"]).post(
        url() + "?dry_run=1", body, content_type="application/yaml"
    )
    assert answer.status_code == 200, answer.content
    assert answer.json()["dry_run"] is True
    assert any("4 → 6" in change for change in answer.json()["changes"])
    assert _counts() == before
    assert Quota.objects.get().ceiling == 4


def test_it_applies_as_an_admin(world):
    body = client_for(world["admin"]).get(url()).content.replace(b"ceiling: 4", b"ceiling: 6")
    answer = client_for(world["admin"]).post(url(), body, content_type="application/yaml")
    assert answer.status_code == 200 and answer.json()["applied"] is True
    assert Quota.objects.get().ceiling == 6


def test_it_refuses_an_engineer(world):
    body = client_for(world["admin"]).get(url()).content
    answer = client_for(world["engineer"]).post(url(), body, content_type="application/yaml")
    assert answer.status_code == 403
    assert Quota.objects.get().ceiling == 4


def test_it_refuses_guarantees_over_the_pool_with_the_rule_and_figures(world):
    body = client_for(world["admin"]).get(url()).content
    body = body.replace(b"guaranteed: 2", b"guaranteed: 9").replace(b"ceiling: 4", b"ceiling: 9")
    answer = client_for(world["admin"]).post(url(), body, content_type="application/yaml")
    assert answer.status_code == 409, answer.content
    assert answer.json()["code"] == "guarantees_over_capacity"
    assert answer.json()["figures"] == {"total": 9, "bound": 8, "left": 8}
    assert "errors" not in answer.json()
    assert Quota.objects.get().guaranteed == 2


@pytest.mark.parametrize(
    ("body", "field"),
    [
        (
            b"project: alpha\nquotas:\n- gpu_model: A100 80GB\n  guaranteed: 3\n  ceiling: 1\n",
            "quotas[0].ceiling",
        ),
        (b"project: alpha\nsurprise: 1\n", "surprise"),
        (b"project: alpha\nquotas: [\n", "document"),
        (b"project: beta\n", "project"),
        (b"project: alpha\x00\n", "document"),
        (b"- just\n- a list\n", "document"),
        # Beyond what the columns hold (weight: 8 digits, 3 decimals; amounts: 14, 2).
        (
            b"project: alpha\nquotas:\n- gpu_model: A100 80GB\n  guaranteed: 1\n"
            b"  ceiling: 2\n  weight: 100000\n",
            "quotas[0].weight",
        ),
        (b"project: alpha\nbudget:\n  monthly_amount: 1000000000000\n", "budget.monthly_amount"),
        # Below 10^12 as written, 10^12 once rounded to cents.
        (
            b"project: alpha\nbudget:\n  monthly_amount: '999999999999.995'\n",
            "budget.monthly_amount",
        ),
    ],
)
def test_it_answers_409_naming_the_path_of_a_bad_document(world, body, field):
    """Any text is a document; one its rules refuse is a 409 naming the YAML path."""
    before = _counts()
    answer = client_for(world["admin"]).post(url(), body, content_type="application/yaml")
    assert answer.status_code == 409, answer.content
    assert answer.json()["code"] == "invalid_config"
    assert answer.json()["field"] == field
    assert "errors" not in answer.json()
    assert _counts() == before


def test_it_answers_400_to_a_body_that_is_not_utf8(world):
    answer = client_for(world["admin"]).post(url(), b"\xff\xfe", content_type="application/yaml")
    assert answer.status_code == 400


def test_it_answers_415_to_json(world):
    answer = client_for(world["admin"]).post(url(), {"project": "alpha"}, format="json")
    assert answer.status_code == 415


def test_it_answers_409_to_an_empty_body_from_a_manager(world):
    """No body is an empty document, which the configuration's rules refuse."""
    before = _counts()
    answer = client_for(world["manager"]).post(url())
    assert answer.status_code == 409, answer.content
    assert answer.json()["code"] == "invalid_config"
    assert "errors" not in answer.json()
    assert Quota.objects.get().ceiling == 4
    assert _counts() == before
