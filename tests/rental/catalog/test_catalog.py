"""manage.py load_catalog: GPU models and AWS offerings from rental/data/catalog.json."""

import json
from datetime import date
from decimal import ROUND_HALF_UP, Decimal
from io import StringIO

import pytest
from django.core.management import CommandError, call_command
from django.db import connection
from django.test.utils import CaptureQueriesContext

from rental.management.commands.load_catalog import CATALOG_PATH
from rental.models import GpuModel, Offering, ProviderAccount
from tests import factories

pytestmark = pytest.mark.django_db

GPU_MODELS = {
    "RTX 4090 24GB",
    "RTX 3090 24GB",
    "A10G 24GB",
    "L4 24GB",
    "T4 16GB",
    "L40S 48GB",
    "A100 40GB",
    "A100 80GB",
    "H100 80GB",
    "H200 141GB",
    "H20 96GB",
    "H800 80GB",
    "Ascend 910B 64GB",
}
GPU_OF_FAMILY = {
    "g4dn": "T4 16GB",
    "g5": "A10G 24GB",
    "g6": "L4 24GB",
    "g6e": "L40S 48GB",
    "p4d": "A100 40GB",
    "p4de": "A100 80GB",
    "p5": "H100 80GB",
    "p5e": "H200 141GB",
}
SIZES = {
    "g4dn": ["xlarge", "2xlarge", "4xlarge", "8xlarge", "12xlarge", "16xlarge", "metal"],
    "g5": [
        "xlarge",
        "2xlarge",
        "4xlarge",
        "8xlarge",
        "12xlarge",
        "16xlarge",
        "24xlarge",
        "48xlarge",
    ],
    "g6": [
        "xlarge",
        "2xlarge",
        "4xlarge",
        "8xlarge",
        "12xlarge",
        "16xlarge",
        "24xlarge",
        "48xlarge",
    ],
    "g6e": [
        "xlarge",
        "2xlarge",
        "4xlarge",
        "8xlarge",
        "12xlarge",
        "16xlarge",
        "24xlarge",
        "48xlarge",
    ],
    "p4d": ["24xlarge"],
    "p4de": ["24xlarge"],
    "p5": ["48xlarge"],
    "p5e": ["48xlarge"],
}


def load(*args: str) -> str:
    out = StringIO()
    call_command("load_catalog", *args, stdout=out, stderr=StringIO())
    return out.getvalue()


def catalog() -> dict:
    return json.loads(CATALOG_PATH.read_text())


def snapshot() -> list[tuple]:
    models = list(GpuModel.objects.order_by("name").values_list())
    offerings = list(Offering.objects.order_by("account", "region", "instance_type").values_list())
    return models + offerings


def test_it_loads_every_gpu_model_with_its_specifications() -> None:
    out = load()

    assert "13 created" in out
    assert set(GpuModel.objects.values_list("name", flat=True)) == GPU_MODELS
    for model in GpuModel.objects.all():
        # The memory in the name is the memory on record.
        assert model.name.endswith(f" {model.memory_gb}GB"), model.name
        assert model.memory_bandwidth_gbps >= 300
        assert model.fp16_tflops >= Decimal("60")
        assert model.bf16_tflops <= model.fp16_tflops
        assert model.notes
    h100 = GpuModel.objects.get(name="H100 80GB")
    assert (h100.vendor, h100.memory_bandwidth_gbps, h100.interconnect) == (
        "nvidia",
        3350,
        "nvlink",
    )
    assert h100.bf16_tflops == Decimal("989.4")
    h20 = GpuModel.objects.get(name="H20 96GB")
    assert h20.bf16_tflops < h100.bf16_tflops / 5
    assert h20.memory_bandwidth_gbps > h100.memory_bandwidth_gbps
    assert "export" in h20.notes
    ascend = GpuModel.objects.get(name="Ascend 910B 64GB")
    assert (ascend.vendor, ascend.interconnect) == ("huawei", "hccs")
    assert GpuModel.objects.get(name="T4 16GB").bf16_tflops == 0  # Turing has no BF16
    assert not Offering.objects.exists()  # no account, no offerings


def test_it_loads_an_offering_for_every_gpu_size_of_the_eight_families() -> None:
    account = factories.account()
    price_date = date.fromisoformat(catalog()["aws_instance_types"][0]["price_date"])

    load()

    offerings = list(Offering.objects.filter(account=account).select_related("gpu_model"))
    loaded = {offering.instance_type for offering in offerings}
    for family, sizes in SIZES.items():
        assert {f"{family}.{size}" for size in sizes} <= loaded
    assert {name.split(".")[0] for name in loaded} == set(GPU_OF_FAMILY)
    for offering in offerings:
        assert offering.gpu_model.name == GPU_OF_FAMILY[offering.instance_type.split(".")[0]]
        assert offering.region == "us-east-1"
        assert offering.currency == "USD"
        assert offering.is_available
        assert offering.price_updated_at == price_date
        assert offering.gpus_per_instance in (1, 4, 8)
        assert offering.vcpus >= 4 * offering.gpus_per_instance
        assert offering.memory_gib >= 16
        assert Decimal("0.1") < offering.on_demand_price_per_hour < Decimal("150")
        assert 0 < offering.spot_price_per_hour < offering.on_demand_price_per_hour

    by_type = {offering.instance_type: offering for offering in offerings}
    p5 = by_type["p5.48xlarge"]
    assert (p5.gpus_per_instance, p5.gpu_model.name, p5.vcpus, p5.memory_gib) == (
        8,
        "H100 80GB",
        192,
        2048,
    )
    assert by_type["p4d.24xlarge"].gpus_per_instance == 8
    assert by_type["g6e.12xlarge"].gpus_per_instance == 4
    assert by_type["g4dn.metal"].gpus_per_instance == 8
    assert by_type["g4dn.xlarge"].on_demand_price_per_hour == Decimal("0.526")
    assert by_type["g5.xlarge"].on_demand_price_per_hour == Decimal("1.006")
    assert p5.rate_per_gpu_hour("on_demand") == Decimal("6.88")
    assert p5.rate_per_gpu_hour("on_demand") > by_type["g5.48xlarge"].rate_per_gpu_hour("on_demand")


def test_it_loads_each_region_of_every_active_aws_account_only() -> None:
    two_regions = factories.account(name="Main")
    two_regions.regions = ["us-east-1", "eu-west-1"]
    two_regions.save()
    factories.account(name="Second")
    retired = factories.account(name="Retired")
    retired.is_active = False
    retired.save()
    types = len(catalog()["aws_instance_types"])

    out = load()

    assert Offering.objects.filter(account=two_regions, region="us-east-1").count() == types
    assert Offering.objects.filter(account=two_regions, region="eu-west-1").count() == types
    assert Offering.objects.filter(account__name="Second").count() == types
    assert not Offering.objects.filter(account=retired).exists()
    assert f"offerings {3 * types} created" in out


def test_it_loads_only_the_account_named() -> None:
    factories.account(name="Main")
    other = factories.account(name="Other")

    load("--account", "Other")

    assert set(Offering.objects.values_list("account__name", flat=True)) == {"Other"}
    assert Offering.objects.filter(account=other).count() == len(catalog()["aws_instance_types"])


def test_it_refuses_an_unknown_or_non_aws_account() -> None:
    ProviderAccount.objects.create(name="Elsewhere", driver="gcp", regions=["europe-west4"])

    with pytest.raises(CommandError, match="No provider account"):
        load("--account", "Nobody")
    with pytest.raises(CommandError, match="AWS instance types only"):
        load("--account", "Elsewhere")

    assert not Offering.objects.exists()


def test_it_changes_nothing_on_a_second_run() -> None:
    factories.account()
    load()
    before = snapshot()

    with CaptureQueriesContext(connection) as queries:
        out = load()

    assert "already up to date" in out
    assert "nothing written" in out
    assert snapshot() == before
    writes = [
        q["sql"] for q in queries if q["sql"].lstrip().upper().startswith(("INSERT", "UPDATE"))
    ]
    assert writes == []


def test_it_puts_back_a_changed_price_but_keeps_an_offering_switched_off() -> None:
    account = factories.account()
    load()
    Offering.objects.filter(instance_type="p5.48xlarge").update(
        on_demand_price_per_hour=Decimal("1.00"), is_available=False
    )
    GpuModel.objects.filter(name="L4 24GB").update(memory_bandwidth_gbps=1)

    out = load()

    p5 = Offering.objects.get(account=account, instance_type="p5.48xlarge")
    assert p5.on_demand_price_per_hour == Decimal("55.04")
    assert p5.is_available is False
    assert GpuModel.objects.get(name="L4 24GB").memory_bandwidth_gbps == 300
    assert "GPU models 0 created, 1 updated, 12 unchanged" in out
    assert "offerings 0 created, 1 updated" in out


def test_the_catalog_file_says_where_its_prices_come_from() -> None:
    data = catalog()

    assert "us-east-1" in data["source"]
    assert data["notes"]
    fractions = data["spot_fraction_of_on_demand"]
    for entry in data["aws_instance_types"]:
        date.fromisoformat(entry["price_date"])
        expected_spot = (
            Decimal(entry["on_demand_per_hour"]) * Decimal(fractions[entry["family"]])
        ).quantize(Decimal("0.0001"), ROUND_HALF_UP)
        assert Decimal(entry["spot_estimate_per_hour"]) == expected_spot, entry["instance_type"]
