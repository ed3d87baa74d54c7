"""Every number column the Django admin edits, given each kind of bad value (empty,
negative, 10^26, text, NUL, a bidi control, 100,000 characters): an error on that
field in the person's language, nothing written, and the change page still answering."""

import datetime
import json
from decimal import Decimal

import pytest
from django.urls import reverse

from billing.models import Budget
from portal.errors import InvalidInput
from rental.catalog import exchange
from rental.models import AvailabilityWatch, DataVolume, ExchangeRate, Quota, QuotaRequest
from tests import factories
from tests.bad_numbers import BAD, build, written

NONE = frozenset()
OPTIONAL = frozenset({"empty"})  # an empty optional field means "none", not bad
# (admin model, field) → the bad kinds that are not bad for it.
FIELDS: dict[tuple[str, str], frozenset[str]] = {
    ("billing.budget", "monthly_amount"): NONE,
    ("billing.budget", "thresholds"): NONE,
    ("rental.quota", "guaranteed"): NONE,
    ("rental.quota", "ceiling"): NONE,
    ("rental.quota", "weight"): NONE,
    ("rental.quota", "max_hours_per_lease"): OPTIONAL,
    ("rental.quota", "max_gpus_per_lease"): OPTIONAL,
    ("rental.pool", "capacity"): NONE,
    ("rental.pool", "committed_gpus"): NONE,
    ("rental.pool", "committed_monthly_cost"): NONE,
    ("rental.offering", "gpus_per_instance"): NONE,
    ("rental.offering", "vcpus"): NONE,
    ("rental.offering", "memory_gib"): NONE,
    ("rental.offering", "on_demand_price_per_hour"): NONE,
    ("rental.offering", "spot_price_per_hour"): OPTIONAL,
    ("rental.offering", "storage_price_per_gb_month"): NONE,
    ("rental.offering", "root_disk_gb"): NONE,
    ("rental.offering", "zones"): frozenset({"empty"}),  # "," is no zone: the cloud chooses
    ("rental.gpumodel", "memory_gb"): NONE,
    ("rental.gpumodel", "memory_bandwidth_gbps"): NONE,
    ("rental.gpumodel", "bf16_tflops"): NONE,
    ("rental.gpumodel", "fp16_tflops"): NONE,
    ("rental.datavolume", "size_gb"): NONE,
    ("rental.availabilitywatch", "count"): NONE,
    ("rental.quotarequest", "guaranteed"): OPTIONAL,
    ("rental.quotarequest", "ceiling"): OPTIONAL,
}
# A JSON column's bad values: text that is not its kind of JSON (thresholds), or not a
# list of zone names (zones, typed comma-separated).
ZONES_BAD = {
    "empty": ",",
    "negative": "-1",
    "huge": "1" + "0" * 26 + "!",
    "text": "us east 1a",
    "nul": "us-east-1a\x00",
    "bidi": "\u202eus-east-1a",
    "long": "a" * 100_000,
}
JSON_BAD = {
    **BAD,
    "empty": "",
    "negative": '[{"percent": -1, "kind": "actual"}]',
    "huge": '[{"percent": 1e26, "kind": "actual"}]',
    "text": '"abc"',
    "nul": '["a\\u0000b"]',
    "bidi": '["\u202eus-east-1a"]',
    "long": json.dumps(["x" * 100_000]),
}


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
    Budget.objects.create(
        project=w.alpha,
        monthly_amount=Decimal("100.00"),
        thresholds=[{"percent": 50, "kind": "actual"}],
    )
    DataVolume.objects.create(
        project=w.alpha,
        account=w.account,
        name="data",
        region="us-east-1",
        zone="us-east-1a",
        size_gb=100,
        volume_id="vol-1",
        state=DataVolume.State.AVAILABLE,
    )
    AvailabilityWatch.objects.create(user=w.alice, gpu_model=w.model, count=2)
    QuotaRequest.objects.create(
        project=w.alpha, gpu_model=w.model, requested_by=w.alice, ceiling=7, reason="more"
    )
    return w


def change_url(w, label: str) -> str:
    app, model = label.split(".")
    rows = {
        "billing.budget": lambda: Budget.objects.get(project=w.alpha),
        "rental.quota": lambda: Quota.objects.get(project=w.alpha),
        "rental.pool": lambda: w.pool,
        "rental.offering": lambda: w.offering,
        "rental.gpumodel": lambda: w.model,
        "rental.datavolume": lambda: DataVolume.objects.get(),
        "rental.availabilitywatch": lambda: AvailabilityWatch.objects.get(),
        "rental.quotarequest": lambda: QuotaRequest.objects.get(),
    }
    return reverse(f"admin:{app}_{model}_change", args=[rows[label]().pk])


def as_posted(form) -> dict:
    """What the browser would send back for the change form as it opened."""
    data = {}
    for name in form.fields:
        value = form[name].value()
        if isinstance(value, bool):
            if value:
                data[name] = "on"
            continue
        if isinstance(value, datetime.datetime):
            data[f"{name}_0"], data[f"{name}_1"] = value.date().isoformat(), value.time()
        elif isinstance(value, list | tuple):
            data[name] = [str(item) for item in value]
        else:
            data[name] = "" if value is None else str(value)
    return data


def opened(client, w, label: str):
    client.force_login(w.admin)
    page = client.get(change_url(w, label))
    assert page.status_code == 200
    return as_posted(page.context["adminform"].form)


def test_the_table_names_every_admin_with_number_fields(world, client):
    for label in {label for label, _field in FIELDS}:
        body = opened(client, world, label)
        for name in [f for lbl, f in FIELDS if lbl == label]:
            assert name in body, (label, name)


@pytest.mark.parametrize("label", sorted({label for label, _field in FIELDS}))
def test_the_form_as_opened_saves(world, client, label):
    """What the refusals below change is only the one field: the rest saves as it is."""
    body = opened(client, world, label)
    answer = client.post(change_url(world, label), body)
    assert answer.status_code == 302, answer.context["adminform"].form.errors


@pytest.mark.parametrize("kind", BAD)
@pytest.mark.parametrize(("label", "field"), list(FIELDS))
def test_a_bad_number_is_refused_on_its_field_and_nothing_is_written(
    world, client, label, field, kind
):
    if kind in FIELDS[label, field]:
        pytest.skip(f"an empty {field} means none")
    body = opened(client, world, label)
    bad = {"thresholds": JSON_BAD, "zones": ZONES_BAD}.get(field, BAD)[kind]
    before = written()
    answer = client.post(change_url(world, label), {**body, field: bad})
    assert answer.status_code == 200, answer.status_code  # the form again, not a redirect
    errors = answer.context["adminform"].form.errors
    assert errors.get(field), errors
    assert written() == before
    assert client.get(change_url(world, label)).status_code == 200


@pytest.mark.parametrize(("label", "field"), list(FIELDS))
def test_the_error_is_in_the_persons_language(world, client, label, field):
    body = opened(client, world, label)
    bad = {"thresholds": JSON_BAD, "zones": ZONES_BAD}.get(field, BAD)["huge"]
    answer = client.post(
        change_url(world, label), {**body, field: bad}, HTTP_ACCEPT_LANGUAGE="zh-hans"
    )
    said = " ".join(answer.context["adminform"].form.errors.get(field, []))
    assert any("\u4e00" <= char <= "\u9fff" for char in said), said


@pytest.mark.parametrize("kind", [*BAD, "zero"])
def test_a_bad_exchange_rate_is_refused_on_its_field_and_nothing_is_written(world, client, kind):
    client.force_login(world.admin)
    before = ExchangeRate.objects.count()
    answer = client.post(
        reverse("admin:rental_exchangerate_add"),
        {
            "currency": "CNY",
            "units_per_billing_unit": "0" if kind == "zero" else BAD[kind],
            "valid_from_0": "2026-01-01",
            "valid_from_1": "00:00:00",
            "source": "bank",
        },
    )
    assert answer.status_code == 200
    assert answer.context["adminform"].form.errors.get("units_per_billing_unit")
    assert ExchangeRate.objects.count() == before


@pytest.mark.parametrize("typed", ["1e30", "1" + "0" * 26, "0.000000001", "-7.25"])
def test_a_rates_file_value_out_of_the_column_is_refused_not_a_crash(typed):
    with pytest.raises(InvalidInput) as refused:
        exchange.parse_rate(typed)
    assert refused.value.field == "units_per_billing_unit"
