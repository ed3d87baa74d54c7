"""What the API's lists and bodies take agrees with its schema: pages and ids are whole
numbers from 1 (the schema says ``minimum: 1``), an id that names no row matches nothing,
flags are true or false, and a body nested past 32 levels is a clear 400 (a project
document, which any text may be, a 409), never a 500."""

import importlib
import pkgutil
from pathlib import Path

import django_filters
import pytest
import yaml
from rest_framework.test import APIClient

from portal.api.filters import PortalFilterSet
from rental.models import AvailabilityWatch, Reservation

ROOT = Path(__file__).resolve().parents[2]
SCHEMA = yaml.safe_load((ROOT / "docs/api/openapi.yaml").read_text())


def client_for(user) -> APIClient:
    client = APIClient()
    client.force_authenticate(user)
    return client


def query_parameters():
    for path, operations in SCHEMA["paths"].items():
        for method, operation in operations.items():
            if isinstance(operation, dict):
                for parameter in operation.get("parameters", []):
                    if parameter["in"] == "query":
                        yield f"{method.upper()} {path}", parameter


def test_every_filterset_of_the_api_filters_ids_and_flags_strictly():
    for app in ("portal.api", "rental.api", "billing.api"):
        package = importlib.import_module(app)
        for found in pkgutil.iter_modules(package.__path__, f"{app}."):
            importlib.import_module(found.name)
    ours = [
        filterset
        for filterset in all_subclasses(django_filters.FilterSet)
        if filterset.__module__.split(".")[0] in ("portal", "rental", "billing")
        and filterset is not PortalFilterSet
    ]
    assert len(ours) >= 15
    assert [f.__qualname__ for f in ours if not issubclass(f, PortalFilterSet)] == []


def all_subclasses(cls: type) -> set[type]:
    found = set(cls.__subclasses__())
    for sub in list(found):
        found |= all_subclasses(sub)
    return found


def test_the_schema_says_pages_and_ids_start_at_one():
    whole = [
        (where, parameter["name"], parameter["schema"].get("minimum"))
        for where, parameter in query_parameters()
        if parameter["schema"].get("type") in ("integer", "number")
    ]
    assert len(whole) > 40  # every list has page and page_size, and some have ids
    assert [item for item in whole if item[2] != 1] == []
    assert {name for _where, name, _min in whole} >= {
        "page",
        "page_size",
        "gpu_model",
        "account",
        "requester",
        "lease",
        "statement",
    }
    assert all(
        parameter["schema"]["type"] == "integer"
        for _where, parameter in query_parameters()
        if parameter["name"] in ("statement", "gpu_model")
    )


@pytest.mark.parametrize("bad", ["0", "-1", "1.5", "abc", "²"])
@pytest.mark.parametrize("name", ["page", "page_size"])
def test_a_page_or_size_below_one_or_not_whole_is_a_400_naming_it(f0, name, bad):
    response = client_for(f0.alice).get(f"/api/v1/leases?{name}={bad}")
    assert response.status_code == 400, response.content
    assert list(response.json()["errors"]) == [name]


def test_a_page_past_the_end_is_a_404_and_the_first_page_is_there(f0):
    client = client_for(f0.alice)
    assert client.get("/api/v1/leases?page=1").status_code == 200
    assert client.get("/api/v1/leases?page=2").status_code == 404
    assert client.get("/api/v1/leases?page=last").status_code == 200


def test_an_id_filter_takes_ids_from_one_and_an_unknown_one_matches_nothing(f0):
    AvailabilityWatch.objects.create(user=f0.alice, gpu_model=f0.model, count=2)
    client = client_for(f0.alice)
    url = "/api/v1/availability-watches"
    mine = client.get(f"{url}?gpu_model={f0.model.pk}")
    assert mine.status_code == 200 and mine.json()["count"] == 1
    unknown = client.get(f"{url}?gpu_model={f0.model.pk + 1000}")
    assert unknown.status_code == 200 and unknown.json()["count"] == 0
    for bad in ("0", "-4", "x", "1.5"):
        response = client.get(f"{url}?gpu_model={bad}")
        assert response.status_code == 400, (bad, response.content)
        assert list(response.json()["errors"]) == ["gpu_model"]
    for url in ("/api/v1/leases", "/api/v1/usage", "/api/v1/pools", "/api/v1/quotas"):
        assert client.get(f"{url}?gpu_model=987654").status_code == 200, url
        assert client.get(f"{url}?gpu_model=0").status_code == 400, url


@pytest.mark.parametrize(
    ("url", "bad"),
    [
        ("/api/v1/tokens?revoked=null", "revoked"),
        ("/api/v1/projects?is_active=maybe", "is_active"),
        ("/api/v1/offerings?available=yes", "available"),
    ],
)
def test_a_flag_is_true_or_false_and_nothing_else(f0, url, bad):
    response = client_for(f0.admin).get(url)
    assert response.status_code == 400, response.content
    assert list(response.json()["errors"]) == [bad]


def nested(depth: int) -> str:
    return "[" * depth + "]" * depth


@pytest.mark.parametrize("depth", [33, 10_000, 100_000])
def test_a_body_nested_too_deep_is_a_clear_400_and_nothing_is_written(f0, depth):
    body = '{"project": "alpha", "purpose": ' + nested(depth) + "}"
    response = client_for(f0.alice).post("/api/v1/leases", body, content_type="application/json")
    assert response.status_code == 400, response.content[:300]
    answer = response.json()
    assert answer["code"] == "too_deep"
    assert answer["detail"] == "The JSON body is nested too deeply (more than 32 levels)."
    assert answer["errors"] == {"non_field_errors": [answer["detail"]]}
    assert not Reservation.objects.exists()


def test_a_body_nested_within_the_limit_is_read_and_judged_on_its_fields(f0):
    body = '{"project": "alpha", "purpose": ' + nested(30) + "}"
    response = client_for(f0.alice).post("/api/v1/leases", body, content_type="application/json")
    assert response.status_code == 400
    assert response.json()["code"] == "invalid"
    assert not Reservation.objects.exists()


def test_a_configuration_nested_too_deep_is_a_409_naming_the_document(f0):
    """Any text is a document; one nested too deep is refused by the config's rules."""
    client = client_for(f0.alpha_manager)
    for depth in (40, 10_000):
        response = client.generic(
            "POST",
            "/api/v1/projects/alpha/config?dry_run=1",
            "project: alpha\nname: " + nested(depth) + "\n",
            content_type="application/yaml",
        )
        assert response.status_code == 409, response.content[:300]
        assert response.json() == {
            "code": "invalid_config",
            "detail": "document: nests more than 32 levels deep",
            "field": "document",
        }
