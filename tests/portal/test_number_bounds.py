"""Every number a person types into a page's form, given each kind of bad value (empty,
negative, 10^26, text, NUL, a bidi control, 100,000 characters): an error on that field
in the person's language, nothing written anywhere, and the page still answers after."""

from dataclasses import dataclass
from datetime import timedelta
from typing import Any

import pytest
from django.forms import BaseForm
from django.urls import reverse
from django.utils import timezone

from rental.models import Quota
from tests import factories
from tests.bad_numbers import BAD, build, written

NONE = frozenset()
EMPTY_IS_NONE = frozenset({"empty"})  # an empty optional field means "none", not bad
# Every number field of every page's form: (form, field) → (the words its error names it
# by where the page shows errors away from the field, the bad kinds that are not bad).
FIELDS: dict[tuple[str, str], tuple[str, frozenset[str]]] = {
    ("lease request", "gpu_count"): ("", NONE),
    ("lease request", "duration_hours"): ("", NONE),
    ("lease estimate", "gpu_count"): ("", NONE),
    ("lease estimate", "duration_hours"): ("", NONE),
    ("extend a lease", "hours"): ("hours", NONE),
    ("move a booking", "duration_hours"): ("Duration", NONE),
    ("move a booking", "gpu_count"): ("GPUs", NONE),
    ("ask for a quota change", "guaranteed"): ("guarantee", EMPTY_IS_NONE),
    ("ask for a quota change", "ceiling"): ("ceiling", EMPTY_IS_NONE),
    ("auto-approve limits", "max_gpus_per_lease"): ("", NONE),
    ("auto-approve limits", "max_hours_per_lease"): ("", NONE),
    ("auto-approve caps", "auto_approve_gpus_cap"): ("", EMPTY_IS_NONE),
    ("auto-approve caps", "auto_approve_hours_cap"): ("", EMPTY_IS_NONE),
    ("data volume", "size_gb"): ("GB", NONE),
    ("pool settings", "capacity"): ("", NONE),
    ("pool settings", "committed_gpus"): ("", NONE),
    ("pool settings", "committed_monthly_cost"): ("", NONE),
    ("offering prices", "on_demand_price_per_hour"): ("", NONE),
    ("offering prices", "spot_price_per_hour"): ("", EMPTY_IS_NONE),
    ("budget", "monthly_amount"): ("Monthly amount", NONE),
    ("budget", "thresholds"): ("threshold", EMPTY_IS_NONE),
    ("dispute answer", "amount"): ("Amount", NONE),
    ("API token", "days"): ("", NONE),
}


@dataclass(frozen=True)
class Form:
    """A page's form: who sends it, where, a valid body, how the page shows a field's
    error, and the page to read afterwards."""

    name: str
    who: str
    url: str
    body: dict[str, Any]
    # "form", "estimate", "field" (any bound form of the page drawn again), "quota",
    # "volumes", "pool", "offering", "tokens"
    shows: str
    page: str


def booking_start() -> str:
    start = (timezone.now() + timedelta(days=7)).replace(hour=9, minute=0, second=0)
    return start.strftime("%Y-%m-%dT%H:%M")


def forms(w) -> list[Form]:
    f0 = w
    quota = Quota.objects.get(project=f0.alpha)
    slug = f0.alpha.slug
    project_page = reverse("rental:project", args=[slug])
    ask = {"project": f0.alpha.pk, "gpu_model": f0.model.pk, "gpu_count": "1"}
    ask |= {"duration_hours": "2", "priority": "experiment", "market": "on_demand"}
    return [
        Form(
            "lease request",
            "alice",
            reverse("rental:lease_new"),
            ask,
            "form",
            reverse("rental:lease_new"),
        ),
        Form(
            "lease estimate",
            "alice",
            reverse("rental:lease_estimate"),
            ask,
            "estimate",
            reverse("rental:lease_new"),
        ),
        Form(
            "extend a lease",
            "alice",
            reverse("rental:lease_extend", args=[f0.running.pk]),
            {"hours": "1"},
            "field",
            reverse("rental:lease", args=[f0.running.pk]),
        ),
        Form(
            "move a booking",
            "alice",
            reverse("rental:lease_reschedule", args=[f0.booking.pk]),
            {"start": booking_start(), "duration_hours": "3", "gpu_count": "1"},
            "field",
            reverse("rental:lease", args=[f0.booking.pk]),
        ),
        Form(
            "ask for a quota change",
            "alice",
            reverse("rental:quota_request_new", args=[slug]),
            {"gpu_model": f0.model.pk, "guaranteed": "2", "ceiling": "7", "reason": "more"},
            "field",
            project_page,
        ),
        Form(
            "auto-approve limits",
            "alpha_manager",
            reverse("rental:quota_auto_approve", args=[slug, quota.pk]),
            {"max_gpus_per_lease": "2", "max_hours_per_lease": "8"},
            "quota",
            project_page,
        ),
        Form(
            "auto-approve caps",
            "admin",
            reverse("rental:quota_auto_approve_caps", args=[slug, quota.pk]),
            {"auto_approve_gpus_cap": "4", "auto_approve_hours_cap": "24"},
            "quota",
            project_page,
        ),
        Form(
            "data volume",
            "alice",
            reverse("rental:project_volumes", args=[slug]),
            {"name": "scratch", "size_gb": "100", "zone": "us-east-1a"},
            "volumes",
            project_page,
        ),
        Form(
            "pool settings",
            "admin",
            reverse("rental:pool_settings", args=[f0.pool.pk]),
            {
                "capacity": "10",
                "committed_gpus": "0",
                "committed_monthly_cost": "100.00",
                "apportionment": "hybrid",
                "residual": "shared",
            },
            "pool",
            reverse("rental:pool", args=[f0.pool.pk]),
        ),
        Form(
            "offering prices",
            "admin",
            reverse("rental:offering_terms", args=[f0.pool.pk, f0.offering.pk]),
            {
                "on_demand_price_per_hour": "3.00",
                "spot_price_per_hour": "1.50",
                "is_available": "on",
            },
            "offering",
            reverse("rental:pool", args=[f0.pool.pk]),
        ),
        Form(
            "budget",
            "alpha_manager",
            reverse("billing:budget_set", args=[slug]),
            {"monthly_amount": "750.00", "thresholds": "80:actual", "cap_policy": "refuse_new"},
            "field",
            project_page,
        ),
        Form(
            "dispute answer",
            "admin",
            reverse("billing:dispute_answer", args=[f0.dispute.pk]),
            {"answer": "Corrected.", "kind": "credit", "amount": "10.00"},
            "field",
            reverse("billing:finance"),
        ),
        Form(
            "API token",
            "alice",
            reverse("tokens"),
            {"name": "ci", "days": "30"},
            "tokens",
            reverse("tokens"),
        ),
    ]


@pytest.fixture(scope="module")
def built(module_db):
    """The world, built once for the module (each test rolls back what it wrote)."""
    with module_db():
        return build(factories.fixture_f0())


@pytest.fixture
def world(db, built):
    return built


def shown(form: Form, field: str, response) -> str:
    """The error the page shows for ``field``, or ""."""
    context = response.context
    if form.shows == "field":
        said = [
            " ".join(value.errors[field])
            for each in context
            for layer in each.dicts
            for value in layer.values()
            if isinstance(value, BaseForm) and value.is_bound and field in value.errors
        ]
        return " ".join(dict.fromkeys(said))
    if not any(
        key in context for key in ("form", "quota_errors", "error", "settings_fields", "errors")
    ):
        return ""  # saved: the page it led to has none of the form's errors
    if form.shows == "form":
        return " ".join(context["form"].errors.get(field, []))
    if form.shows == "estimate":  # a preview: the field's error, or why it cannot be sent
        preview = context["estimate"]
        refused = preview.message if preview.outcome in ("invalid", "refused") else ""
        return " ".join([*context["form"].errors.get(field, []), refused]).strip()
    if form.shows == "quota":
        errors = context["quota_errors"]
        return errors.get("message", "") if errors.get("field") == field else ""
    if form.shows == "volumes":
        return context["error"]
    if form.shows == "pool":
        return next((f.error for f in context["settings_fields"] if f.name == field), "") or ""
    if form.shows == "offering":
        [row] = context["offering_rows"]
        return next((f.error for f in row["fields"] if f.name == field), "") or ""
    if form.shows == "tokens":
        return str(context["errors"].get(field, ""))
    raise AssertionError(form.shows)


def find(world, name: str) -> Form:
    return next(form for form in forms(world) if form.name == name)


def send(client, world, form: Form, body: dict[str, Any], **headers):
    client.force_login(getattr(world, form.who))
    return client.post(form.url, body, follow=True, **headers)


def test_the_table_names_every_number_field_of_every_form(world):
    assert {name for name, _field in FIELDS} == {form.name for form in forms(world)}
    for (name, field), _how in FIELDS.items():
        assert field in find(world, name).body, (name, field)


@pytest.mark.parametrize("name", sorted({name for name, _field in FIELDS}))
def test_the_valid_body_is_accepted(client, world, name):
    """What the refusals below change is only the one field: the rest would be saved."""
    form = find(world, name)
    before = written()
    response = send(client, world, form, form.body)
    assert response.status_code == 200, response.status_code
    for field in [f for n, f in FIELDS if n == name]:
        assert shown(form, field, response) == "", (field, shown(form, field, response))
    if name != "lease estimate":  # the estimate writes nothing, by design
        assert written() != before


@pytest.mark.parametrize("kind", BAD)
@pytest.mark.parametrize(("name", "field"), list(FIELDS))
def test_a_bad_number_is_refused_on_its_field_and_nothing_is_written(
    client, world, name, field, kind
):
    names, not_bad = FIELDS[name, field]
    if kind in not_bad:
        pytest.skip(f"an empty {field} means none")
    form = find(world, name)
    before = written()
    response = send(client, world, form, {**form.body, field: BAD[kind]})
    assert response.status_code in (200, 400), response.status_code
    said = shown(form, field, response)
    assert said, f"no error on {field}"
    if form.shows != "field":  # beside its input, the error need not name it too
        assert names.lower() in said.lower(), said
    assert written() == before
    client.force_login(getattr(world, form.who))
    assert client.get(form.page).status_code == 200


@pytest.mark.parametrize(("name", "field"), list(FIELDS))
def test_the_error_is_in_the_persons_language(client, world, name, field):
    form = find(world, name)
    response = send(
        client, world, form, {**form.body, field: BAD["huge"]}, HTTP_ACCEPT_LANGUAGE="zh-hans"
    )
    said = shown(form, field, response)
    assert any("\u4e00" <= char <= "\u9fff" for char in said), said


# Numbers typed into an address or a select (a page, a week, a month, an id): the page
# or the API's 400, never a 500.
TYPED = ["9999-12-31", "0001-01-01", "1" + "0" * 26, "-1", "abc", "²", "\u202e1", "1" * 100_000]


@pytest.mark.parametrize("value", TYPED)
def test_a_bad_number_in_an_address_is_answered(client, world, value):
    client.force_login(world.admin)
    asked = [
        (reverse("rental:pool", args=[world.pool.pk]), "week"),
        (reverse("audit_log"), "since"),
        (reverse("audit_log"), "until"),
        (reverse("audit_log"), "object_id"),
        (reverse("audit_log"), "page"),
        (reverse("rental:leases"), "page"),
        (reverse("rental:approvals"), "page"),
        (reverse("billing:finance"), "period"),
        (reverse("billing:statement", args=[world.alpha.slug]), "period"),
        (reverse("rental:lease_new"), "project"),
        ("/api/v1/leases", "page"),
        ("/api/v1/leases", "page_size"),
        ("/api/v1/leases", "gpu_model"),
        ("/api/v1/usage", "since"),
        ("/api/v1/audit-events", "object_id"),
        (f"/api/v1/pools/{world.pool.pk}/week", "start"),
        ("/api/v1/statements", "period"),
    ]
    answered = {(url, name): client.get(url, {name: value}).status_code for url, name in asked}
    assert {key: status for key, status in answered.items() if status >= 500} == {}


@pytest.mark.parametrize("value", ["²", "9" * 5000, "1" * 100_000])
def test_a_bad_id_in_a_select_is_a_refusal(client, world, value):
    client.force_login(world.alice)
    before = written()
    asked = client.post(
        reverse("rental:quota_request_new", args=[world.alpha.slug]),
        {"gpu_model": value, "ceiling": "7", "reason": "more"},
    )
    assert asked.status_code == 400
    assert asked.context["quota_request_form"].errors["gpu_model"]
    request = client.post(
        reverse("rental:lease_new"),
        {
            "project": world.alpha.pk,
            "gpu_model": world.model.pk,
            "gpu_count": "1",
            "duration_hours": "2",
            "priority": "experiment",
            "market": "on_demand",
            "data_volume": value,
        },
    )
    assert request.status_code == 400
    assert request.context["form"].errors["data_volume"]
    assert written() == before
