"""Every free-text field of every write of the API (a string the schema neither enumerates
nor formats, found by walking the published schema) refuses Unicode's bidirectional
controls and other invisible control characters: a 400 naming that field, nothing written.

The walk finds the fields, so a new one fails here until it is listed with a body that
would otherwise be accepted (checked too), and so is seen to refuse them."""

from dataclasses import dataclass
from datetime import timedelta
from pathlib import Path
from typing import Any

import pytest
import yaml
from django.utils import timezone

from billing.models import Budget
from portal.models import Membership
from rental.loans import admission, extension
from rental.models import Quota, Reservation
from tests import factories
from tests.access.world import quota_request_of
from tests.api.catalog_support import client_for, counts
from tests.api.leases_world import running_lease
from tests.bad_numbers import build, written

ROOT = Path(__file__).resolve().parents[2]
SCHEMA = yaml.safe_load((ROOT / "docs/api/openapi.yaml").read_text())
KEY = "ssh-ed25519 AAAAC3NzaC1lZDI1NTE5AAAAIGtra2tra2tra2tra2tra2tra2tra2tra2tra2tra2tr me@laptop"
BAD = {
    "right-to-left override": "\u202eexe.txt",
    "isolate": "a\u2067b\u2069",
    "bell": "ding\x07",
}


def free_text_fields() -> set[tuple[str, str]]:
    """(``METHOD path``, field) for every writable string of a JSON request body that has
    no enum and no format; nested fields as ``outer.inner``, list items as ``name[]``."""
    components = SCHEMA["components"]["schemas"]

    def resolve(schema: dict) -> dict:
        while "$ref" in schema:
            schema = components[schema["$ref"].rsplit("/", 1)[1]]
        return schema

    def walk(schema: dict, prefix: str, found: set[str]) -> None:
        schema = resolve(schema)
        for part in schema.get("allOf", []):
            walk(part, prefix, found)
        for name, prop in (schema.get("properties") or {}).items():
            if prop.get("readOnly"):
                continue
            prop = resolve(prop["allOf"][0]) if "allOf" in prop else resolve(prop)
            # A text that may be blank: its pattern, or "" (drf-spectacular's oneOf).
            prop = resolve(prop["oneOf"][0]) if "oneOf" in prop else prop
            if prop.get("type") == "string" and not prop.get("enum") and not prop.get("format"):
                found.add(prefix + name)
            elif prop.get("type") == "object":
                walk(prop, f"{prefix}{name}.", found)
            elif prop.get("type") == "array":
                item = resolve(prop.get("items", {}))
                if item.get("type") == "string" and not item.get("enum"):
                    found.add(f"{prefix}{name}[]")
                elif item.get("type") == "object":
                    walk(item, f"{prefix}{name}[].", found)

    fields = set()
    for path, operations in SCHEMA["paths"].items():
        for method, operation in operations.items():
            body = isinstance(operation, dict) and operation.get("requestBody")
            schema = body and body["content"].get("application/json", {}).get("schema")
            if schema:
                found: set[str] = set()
                walk(schema, "", found)
                fields.update((f"{method.upper()} {path}", name) for name in found)
    return fields


@dataclass(frozen=True)
class Write:
    who: str
    method: str
    url: str
    body: dict[str, Any]


def writes(w) -> dict[str, Write]:
    """A write per operation, with a body that is accepted as it is."""
    lease = {
        "project": w.alpha.slug,
        "gpu_model": w.model.pk,
        "gpu_count": 1,
        "duration_hours": "2",
        "priority": "experiment",
        "market": "on_demand",
        "purpose": "fine-tune",
    }
    # Credentials are checked with the cloud once saved: a closed local port, no network.
    nowhere = "http://127.0.0.1:9"
    account = {"name": "second", "driver": "aws", "regions": ["us-east-1"], "endpoint_url": nowhere}
    credentials = {
        "access_key_id": "AKIAEXAMPLE",
        "secret_access_key": "s3cret",
        "session_token": "t",
    }
    budget = {"monthly_amount": "750.00", "cap_policy": "refuse_new", "thresholds": []}
    return {
        "POST /api/v1/leases": Write("alice", "post", "/api/v1/leases", lease),
        "POST /api/v1/leases/{id}/approve": Write(
            "alpha_manager", "post", f"/api/v1/leases/{w.pending.pk}/approve", {"comment": "ok"}
        ),
        "POST /api/v1/leases/{id}/reject": Write(
            "alpha_manager", "post", f"/api/v1/leases/{w.pending.pk}/reject", {"comment": "no"}
        ),
        "POST /api/v1/leases/{id}/decide-extension": Write(
            "alpha_manager",
            "post",
            f"/api/v1/leases/{w.running.pk}/decide-extension",
            {"decision": "approve", "comment": "fine"},
        ),
        "POST /api/v1/quota-requests": Write(
            "alice",
            "post",
            "/api/v1/quota-requests",
            {
                "project": w.alpha.slug,
                "gpu_model": w.model.pk,
                "guaranteed": 2,
                "ceiling": 7,
                "reason": "a deadline",
            },
        ),
        "POST /api/v1/quota-requests/{id}/approve": Write(
            "admin",
            "post",
            f"/api/v1/quota-requests/{w.quota_request.pk}/approve",
            {"comment": "ok"},
        ),
        "POST /api/v1/quota-requests/{id}/reject": Write(
            "admin",
            "post",
            f"/api/v1/quota-requests/{w.quota_request.pk}/reject",
            {"comment": "no"},
        ),
        "POST /api/v1/quotas": Write(
            "admin",
            "post",
            "/api/v1/quotas",
            {"project": w.gamma.slug, "gpu_model": w.model.pk, "guaranteed": 0, "ceiling": 5},
        ),
        "POST /api/v1/budgets": Write(
            "gamma_manager", "post", "/api/v1/budgets", {"project": w.gamma.slug, **budget}
        ),
        "POST /api/v1/gpu-hour-allocations": Write(
            "gamma_manager",
            "post",
            "/api/v1/gpu-hour-allocations",
            {"project": w.gamma.slug, "gpu_model": w.model.name, "monthly_hours": "100.00"},
        ),
        "POST /api/v1/disputes/{id}/answer": Write(
            "admin",
            "post",
            f"/api/v1/disputes/{w.dispute.pk}/answer",
            {"answer": "Corrected.", "kind": "credit", "amount": "10.00"},
        ),
        "POST /api/v1/statement-lines/{id}/dispute": Write(
            "alpha_manager",
            "post",
            f"/api/v1/statement-lines/{w.dispute.line_id}/dispute",
            {"comment": "Why so much?"},
        ),
        "POST /api/v1/images": Write(
            "alice", "post", "/api/v1/images", {"lease": w.with_instance.pk, "name": "my-env"}
        ),
        "POST /api/v1/pools/{id}/degraded": Write(
            "admin",
            "post",
            f"/api/v1/pools/{w.pool.pk}/degraded",
            {"degraded": True, "reason": "maintenance"},
        ),
        "POST /api/v1/projects/{slug}/members": Write(
            "alpha_manager",
            "post",
            f"/api/v1/projects/{w.alpha.slug}/members",
            {"username": "bob", "role": "engineer"},
        ),
        "POST /api/v1/projects/{slug}/service-tokens": Write(
            "alpha_manager",
            "post",
            f"/api/v1/projects/{w.alpha.slug}/service-tokens",
            {
                "name": "ci-nightly",
                "scopes": ["read"],
                "expires_at": (timezone.now() + timedelta(days=7)).isoformat(),
            },
        ),
        "POST /api/v1/provider-accounts": Write(
            "admin", "post", "/api/v1/provider-accounts", {**account, **credentials}
        ),
        "PATCH /api/v1/provider-accounts/{id}": Write(
            "admin",
            "patch",
            f"/api/v1/provider-accounts/{w.account.pk}",
            {"name": "renamed", "regions": ["us-east-1"], "endpoint_url": nowhere, **credentials},
        ),
        "POST /api/v1/ssh-keys": Write(
            "alice", "post", "/api/v1/ssh-keys", {"name": "laptop", "public_key": KEY}
        ),
        "POST /api/v1/tokens": Write(
            "alice",
            "post",
            "/api/v1/tokens",
            {"name": "ci", "expires_at": (timezone.now() + timedelta(days=7)).isoformat()},
        ),
        "POST /api/v1/volumes": Write(
            "alice",
            "post",
            "/api/v1/volumes",
            {"project": w.alpha.slug, "name": "scratch", "size_gb": 100, "zone": "us-east-1a"},
        ),
    }


# The agent's heartbeat is written by a program with its own token, not typed by a
# person; its parser holds its words to the same rule (tests/rental/agent/test_heartbeat.py).
NOT_TYPED = {"POST /api/v1/agent/heartbeat"}
LISTED = sorted(
    (operation, field) for operation, field in free_text_fields() if operation not in NOT_TYPED
)


@pytest.fixture(scope="module")
def built(module_db):
    """The world, built once for the module (each test rolls back what it wrote)."""
    with module_db():
        return _world(factories.fixture_f0())


@pytest.fixture
def world(db, built):
    return built


def _world(f0):
    """The bad-number tests' world, plus a lease waiting for approval, an extension and a
    quota change waiting for a decision, and a manager of gamma (which has no budget)."""
    w = build(f0)
    Quota.objects.filter(project=w.alpha).update(max_gpus_per_lease=1, max_hours_per_lease=5)
    w.pending = admission.submit_reservation(
        actor=w.alice,
        project=w.alpha,
        gpu_model=w.model,
        gpu_count=2,
        duration_hours="2",
        priority="experiment",
        market="on_demand",
    )
    assert w.pending.status == Reservation.Status.PENDING_APPROVAL
    extension.extend_reservation(actor=w.alice, reservation=w.running, hours=2)
    w.running.refresh_from_db()
    assert w.running.extension_until is not None
    w.quota_request = quota_request_of(w.alpha, w.alice)
    w.with_instance = running_lease(w)  # alice's, with a running instance to save
    w.gamma_manager = factories.user("gemma")
    factories.member(w.gamma_manager, w.gamma, Membership.Role.MANAGER)
    Budget.objects.filter(project=w.gamma).delete()
    return w


def unchanged() -> tuple[dict, dict]:
    return written(), counts()


def with_value(body: dict[str, Any], field: str, value: Any) -> dict[str, Any]:
    if field.endswith("[]"):
        return {**body, field[:-2]: [value]}
    return {**body, field: value}


def send(w, write: Write, body: dict[str, Any]):
    client = client_for(getattr(w, write.who))
    return getattr(client, write.method)(write.url, body, format="json")


def test_the_walk_finds_the_free_text_fields():
    assert ("POST /api/v1/leases", "purpose") in LISTED
    assert ("POST /api/v1/ssh-keys", "public_key") in LISTED
    assert len(LISTED) > 25


def test_every_operation_with_free_text_has_a_write_here(world):
    assert {operation for operation, _field in LISTED} == set(writes(world))


@pytest.mark.parametrize("operation", sorted({operation for operation, _field in LISTED}))
def test_the_body_is_accepted_as_it_is(world, operation):
    """What the refusals below change is only the one field: the rest would be saved."""
    write = writes(world)[operation]
    before = unchanged()
    answer = send(world, write, write.body)
    assert answer.status_code in (200, 201), answer.content[:500]
    assert unchanged() != before


@pytest.mark.parametrize("kind", BAD)
@pytest.mark.parametrize(("operation", "field"), LISTED)
def test_a_control_character_is_a_400_on_its_field_and_nothing_is_written(
    world, operation, field, kind
):
    write = writes(world)[operation]
    before = unchanged()
    answer = send(world, write, with_value(write.body, field, BAD[kind]))
    if field == "project" and answer.status_code == 404:
        # A project's slug names a project, and one that is not yours (none has such a
        # slug) is a 404 on these endpoints, as everywhere (access.get_project_or_404).
        assert answer.json()["code"] == "not_found"
    else:
        assert answer.status_code == 400, (answer.status_code, answer.content[:300])
        errors = answer.json().get("errors") or {}
        assert field.removesuffix("[]") in errors, answer.json()
    assert unchanged() == before


@pytest.mark.parametrize("value", [5, True, {"text": "x"}])
@pytest.mark.parametrize(("operation", "field"), LISTED)
def test_a_text_field_takes_only_text(world, operation, field, value):
    """The schema says a string: a number is not read as its digits (DRF would)."""
    write = writes(world)[operation]
    before = unchanged()
    answer = send(world, write, with_value(write.body, field, value))
    assert answer.status_code == 400, (answer.status_code, answer.content[:300])
    assert field.removesuffix("[]") in (answer.json().get("errors") or {}), answer.json()
    assert unchanged() == before
