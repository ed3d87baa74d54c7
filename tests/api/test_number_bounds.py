"""Every number field of every write of the API, given each kind of bad value (empty,
negative, 10^26, text, NUL, a bidi control, 100,000 characters, and JSON's own: null, a
fraction, a huge number, true): a 400 naming that field in ``errors``, in the person's
language, nothing written, and the endpoint's list still answering. A value the schema
takes but a rule refuses (null under the admin's caps, a negative credit) is a 409 on
its field, with the rule's code and no ``errors``."""

from dataclasses import dataclass
from typing import Any

import pytest

from billing.models import Budget
from portal.models import Membership
from rental.models import Quota
from tests import factories
from tests.api.catalog_support import client_for
from tests.bad_numbers import BAD, build, written

JSON_BAD = {**BAD, "null": None, "fraction": 1.5, "huge number": 10**26, "true": True}
NONE = frozenset()
NULL_IS_NONE = frozenset({"null"})  # null means "no limit", "not sold on spot"…
# A decimal is a JSON string ("1.5"): the number 1.5 and "" are as bad as any other.
DECIMAL = NONE
OPTIONAL_DECIMAL = NULL_IS_NONE
# Every number field of every API write: (endpoint, field) → the bad kinds that are not bad.
FIELDS: dict[tuple[str, str], frozenset[str]] = {
    ("create a lease", "gpu_count"): NONE,
    ("create a lease", "duration_hours"): DECIMAL,
    ("extend a lease", "hours"): DECIMAL,
    ("move a booking", "duration_hours"): DECIMAL,
    ("move a booking", "gpu_count"): NONE,
    ("create a quota", "guaranteed"): NONE,
    ("create a quota", "ceiling"): NONE,
    ("change a quota", "guaranteed"): NONE,
    ("change a quota", "ceiling"): NONE,
    ("change a quota", "weight"): DECIMAL,
    ("change a quota", "max_hours_per_lease"): NULL_IS_NONE,
    ("change a quota", "max_gpus_per_lease"): NULL_IS_NONE,
    ("auto-approve limits", "max_gpus_per_lease"): NONE,
    ("auto-approve limits", "max_hours_per_lease"): NONE,
    ("auto-approve caps", "auto_approve_gpus_cap"): NULL_IS_NONE,
    ("auto-approve caps", "auto_approve_hours_cap"): NULL_IS_NONE,
    ("ask for a quota change", "guaranteed"): NULL_IS_NONE,  # null: no change asked
    ("ask for a quota change", "ceiling"): NULL_IS_NONE,
    ("pool capacity", "capacity"): NONE,
    ("change a pool", "capacity"): NONE,
    ("change a pool", "committed_gpus"): NONE,
    ("change a pool", "committed_monthly_cost"): DECIMAL,
    ("change an offering", "on_demand_price_per_hour"): DECIMAL,
    ("change an offering", "spot_price_per_hour"): OPTIONAL_DECIMAL,
    ("create a volume", "size_gb"): NONE,
    ("watch for GPUs", "count"): NONE,
    ("set a budget", "monthly_amount"): DECIMAL,
    ("set a budget", "percent"): NONE,
    ("replace a budget", "monthly_amount"): DECIMAL,
    ("answer a dispute", "amount"): DECIMAL,
}
# The bad kinds that fit the schema but a rule refuses (409): (endpoint, field) → kind → code.
RULED: dict[tuple[str, str], dict[str, str]] = {
    ("auto-approve limits", "max_gpus_per_lease"): {"null": "over_admin_cap"},
    ("auto-approve limits", "max_hours_per_lease"): {"null": "over_admin_cap"},
    ("answer a dispute", "amount"): {"negative": "credit_not_positive", "null": "amount_required"},
}


@dataclass(frozen=True)
class Write:
    name: str
    who: str
    method: str
    url: str
    body: dict[str, Any]
    listed: str  # the list to read afterwards


def writes(w) -> list[Write]:
    quota = Quota.objects.get(project=w.alpha)
    lease, booking = w.running.pk, w.booking.pk
    threshold = {"percent": 80, "kind": "actual"}
    budget = {"monthly_amount": "750.00", "cap_policy": "refuse_new", "thresholds": [threshold]}
    return [
        Write(
            "create a lease",
            "alice",
            "post",
            "/api/v1/leases",
            {
                "project": w.alpha.slug,
                "gpu_model": w.model.pk,
                "gpu_count": 1,
                "duration_hours": "2",
                "priority": "experiment",
                "market": "on_demand",
            },
            "/api/v1/leases",
        ),
        Write(
            "extend a lease",
            "alice",
            "post",
            f"/api/v1/leases/{lease}/extend",
            {"hours": "1"},
            "/api/v1/leases",
        ),
        Write(
            "move a booking",
            "alice",
            "post",
            f"/api/v1/leases/{booking}/reschedule",
            {"duration_hours": "3", "gpu_count": 1},
            "/api/v1/leases",
        ),
        Write(
            "create a quota",
            "admin",
            "post",
            "/api/v1/quotas",
            {"project": w.gamma.slug, "gpu_model": w.model.pk, "guaranteed": 0, "ceiling": 5},
            "/api/v1/quotas",
        ),
        Write(
            "change a quota",
            "admin",
            "patch",
            f"/api/v1/quotas/{quota.pk}",
            {
                "guaranteed": 1,
                "ceiling": 5,
                "weight": "2",
                "max_hours_per_lease": 8,
                "max_gpus_per_lease": 2,
            },
            "/api/v1/quotas",
        ),
        Write(
            "auto-approve limits",
            "alpha_manager",
            "post",
            f"/api/v1/quotas/{quota.pk}/auto-approve-limits",
            {"max_gpus_per_lease": 2, "max_hours_per_lease": 8},
            "/api/v1/quotas",
        ),
        Write(
            "auto-approve caps",
            "admin",
            "post",
            f"/api/v1/quotas/{quota.pk}/auto-approve-caps",
            {"auto_approve_gpus_cap": 4, "auto_approve_hours_cap": 24},
            "/api/v1/quotas",
        ),
        Write(
            "ask for a quota change",
            "alice",
            "post",
            "/api/v1/quota-requests",
            {
                "project": w.alpha.slug,
                "gpu_model": w.model.pk,
                "guaranteed": 2,
                "ceiling": 7,
                "reason": "more",
            },
            "/api/v1/quota-requests",
        ),
        Write(
            "pool capacity",
            "admin",
            "post",
            f"/api/v1/pools/{w.pool.pk}/capacity",
            {"capacity": 10},
            "/api/v1/pools",
        ),
        Write(
            "change a pool",
            "admin",
            "patch",
            f"/api/v1/pools/{w.pool.pk}",
            {"capacity": 10, "committed_gpus": 0, "committed_monthly_cost": "100.00"},
            "/api/v1/pools",
        ),
        Write(
            "change an offering",
            "admin",
            "patch",
            f"/api/v1/offerings/{w.offering.pk}",
            {"on_demand_price_per_hour": "3.00", "spot_price_per_hour": "1.50"},
            "/api/v1/offerings",
        ),
        Write(
            "create a volume",
            "alice",
            "post",
            "/api/v1/volumes",
            {"project": w.alpha.slug, "name": "scratch", "size_gb": 100, "zone": "us-east-1a"},
            "/api/v1/volumes",
        ),
        Write(
            "watch for GPUs",
            "alice",
            "post",
            "/api/v1/availability-watches",
            {"gpu_model": w.model.pk, "count": 2},
            "/api/v1/availability-watches",
        ),
        Write(
            "set a budget",
            "alpha_manager",
            "post",
            "/api/v1/budgets",
            {"project": w.alpha.slug, **budget},
            "/api/v1/budgets",
        ),
        Write(
            "replace a budget",
            "alpha_manager",
            "put",
            f"/api/v1/budgets/{w.beta_budget.pk}",
            budget,
            "/api/v1/budgets",
        ),
        Write(
            "answer a dispute",
            "admin",
            "post",
            f"/api/v1/disputes/{w.dispute.pk}/answer",
            {"answer": "Corrected.", "kind": "credit", "amount": "10.00"},
            "/api/v1/disputes",
        ),
    ]


@pytest.fixture(scope="module")
def built(module_db):
    """The world, built once for the module (each test rolls back what it wrote)."""
    with module_db():
        return _world(factories.fixture_f0())


@pytest.fixture
def world(db, built):
    return built


def _world(f0):
    w = build(f0)
    # A budget alma may replace: alpha's own is what "set a budget" makes.
    factories.member(w.alpha_manager, w.beta, Membership.Role.MANAGER)
    w.beta_budget = Budget.objects.create(
        project=w.beta, monthly_amount="100.00", thresholds=[{"percent": 50, "kind": "actual"}]
    )
    return w


def find(w, name: str) -> Write:
    return next(write for write in writes(w) if write.name == name)


def with_value(body: dict[str, Any], field: str, value: Any) -> dict[str, Any]:
    if field == "percent":
        return {**body, "thresholds": [{"percent": value, "kind": "actual"}]}
    return {**body, field: value}


def named(answer: dict[str, Any], field: str) -> Any:
    """The errors the answer gives ``field`` (a threshold's under ``thresholds``)."""
    errors = answer.get("errors") or {}
    if field == "percent":
        return errors.get("thresholds")
    return errors.get(field)


def send(w, write: Write, body: dict[str, Any], **headers):
    client = client_for(getattr(w, write.who))
    return getattr(client, write.method)(write.url, body, format="json", **headers)


def test_the_table_names_every_number_field_of_every_write(world):
    assert {name for name, _field in FIELDS} == {write.name for write in writes(world)}


@pytest.mark.parametrize("name", sorted({name for name, _field in FIELDS}))
def test_the_valid_body_is_accepted(world, name):
    """What the refusals below change is only the one field: the rest would be saved."""
    write = find(world, name)
    before = written()
    answer = send(world, write, write.body)
    assert answer.status_code in (200, 201), answer.content
    assert written() != before


@pytest.mark.parametrize("kind", JSON_BAD)
@pytest.mark.parametrize(("name", "field"), list(FIELDS))
def test_a_bad_number_is_a_400_on_its_field_and_nothing_is_written(world, name, field, kind):
    if kind in FIELDS[name, field]:
        pytest.skip(f"{kind} is a valid {field}")
    if kind in RULED.get((name, field), {}):
        pytest.skip(f"{kind} fits the schema of {field}: a rule refuses it (409)")
    write = find(world, name)
    before = written()
    answer = send(world, write, with_value(write.body, field, JSON_BAD[kind]))
    assert answer.status_code == 400, (answer.status_code, answer.content[:300])
    assert named(answer.json(), field), answer.json()
    assert written() == before
    client = client_for(getattr(world, write.who))
    assert client.get(write.listed).status_code == 200


@pytest.mark.parametrize(
    ("name", "field", "kind", "code"),
    [
        (name, field, kind, code)
        for (name, field), kinds in RULED.items()
        for kind, code in kinds.items()
    ],
)
def test_a_number_a_rule_refuses_is_a_409_on_its_field_and_nothing_is_written(
    world, name, field, kind, code
):
    """It fits the schema, so the refusal is the rule's, named by its code."""
    write = find(world, name)
    before = written()
    answer = send(world, write, with_value(write.body, field, JSON_BAD[kind]))
    assert answer.status_code == 409, (answer.status_code, answer.content[:300])
    assert (answer.json()["code"], answer.json()["field"]) == (code, field)
    assert "errors" not in answer.json()
    assert written() == before
    client = client_for(getattr(world, write.who))
    assert client.get(write.listed).status_code == 200


@pytest.mark.parametrize(("name", "field"), list(FIELDS))
def test_the_error_is_in_the_persons_language(world, name, field):
    write = find(world, name)
    answer = send(
        world, write, with_value(write.body, field, "abc"), HTTP_ACCEPT_LANGUAGE="zh-hans"
    )
    said = str(named(answer.json(), field))
    assert any("\u4e00" <= char <= "\u9fff" for char in said), said
