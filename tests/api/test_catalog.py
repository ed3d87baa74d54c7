"""``/api/v1/gpu-models`` and ``/api/v1/offerings``: the catalog, read-only, for members,
admins and finance; prices as decimal strings with their currency."""

from decimal import Decimal

import pytest
from django.urls import reverse

from rental.models import GpuModel, Offering
from tests import factories
from tests.api.catalog_support import client_for, finance

pytestmark = pytest.mark.django_db


def test_it_lists_gpu_models_with_their_figures(f0):
    factories.gpu_model("H100 80GB")
    GpuModel.objects.filter(name="H100 80GB").update(
        memory_bandwidth_gbps=3350, bf16_tflops=Decimal("989.5"), interconnect="pcie"
    )
    answer = client_for(f0.alice).get(reverse("api:gpu-model-list") + "?ordering=name")
    assert answer.status_code == 200
    body = answer.json()
    assert body["count"] == 2
    first, second = body["results"]
    assert first == {
        "id": f0.model.pk,
        "name": "A100 80GB",
        "vendor": "nvidia",
        "memory_gb": 80,
        "memory_bandwidth_gbps": 2039,
        "bf16_tflops": "312.0",
        "fp16_tflops": "312.0",
        "interconnect": "nvlink",
        "notes": "",
    }
    assert (second["name"], second["bf16_tflops"], second["memory_bandwidth_gbps"]) == (
        "H100 80GB",
        "989.5",
        3350,
    )
    only_pcie = client_for(f0.alice).get(reverse("api:gpu-model-list") + "?interconnect=pcie")
    assert [row["name"] for row in only_pcie.json()["results"]] == ["H100 80GB"]
    detail = client_for(f0.admin).get(reverse("api:gpu-model-detail", args=[f0.model.pk]))
    assert detail.json()["name"] == "A100 80GB"


def test_it_shows_the_catalog_to_finance_and_not_to_someone_without_a_project(f0):
    assert client_for(finance()).get(reverse("api:offering-list")).status_code == 200
    for name, args in (("api:gpu-model-list", []), ("api:offering-detail", [f0.offering.pk])):
        assert client_for(f0.outsider).get(reverse(name, args=args)).status_code == 404
        assert client_for(None).get(reverse(name, args=args)).status_code == 401


def test_it_lists_offerings_with_prices_as_strings_in_their_currency(f0):
    answer = client_for(f0.bob).get(reverse("api:offering-detail", args=[f0.offering.pk]))
    assert answer.status_code == 200
    row = answer.json()
    assert row["on_demand_price_per_hour"] == "2.500000"
    assert row["spot_price_per_hour"] == "1.000000"
    assert row["currency"] == "USD"
    assert (row["gpu_model"], row["gpu_model_name"]) == (f0.model.pk, "A100 80GB")
    assert (row["account"], row["account_name"]) == (f0.account.pk, "Test cloud")
    assert (row["instance_type"], row["gpus_per_instance"], row["region"]) == (
        "test.a100x1",
        1,
        "us-east-1",
    )


def test_it_filters_offerings_by_model_region_account_and_availability(f0):
    h100 = factories.gpu_model("H100 80GB")
    other = factories.account(name="Second cloud")
    eight = factories.offering(other, h100, instance_type="p5.48xlarge", gpus=8, on_demand="4")
    eight.region = "us-west-2"
    eight.save()
    gone = factories.offering(f0.account, f0.model, instance_type="old.a100", on_demand="9")
    Offering.objects.filter(pk=gone.pk).update(is_available=False)
    url = reverse("api:offering-list")
    client = client_for(f0.alice)

    def ids(query: str) -> list[int]:
        answer = client.get(url + query)
        assert answer.status_code == 200, answer.content
        return [row["id"] for row in answer.json()["results"]]

    assert ids(f"?gpu_model={h100.pk}") == [eight.pk]
    assert ids("?region=us-west-2") == [eight.pk]
    assert ids(f"?account={other.pk}") == [eight.pk]
    assert sorted(ids("?available=true")) == sorted([f0.offering.pk, eight.pk])
    assert ids("?available=false") == [gone.pk]
    other.is_active = False
    other.save()
    assert ids("?available=true") == [f0.offering.pk]
    assert ids("?ordering=-on_demand_price_per_hour")[0] == eight.pk  # 32.00 an hour
    assert client.get(url + "?gpu_model=abc").status_code == 400


def test_it_lists_the_catalog_in_a_fixed_number_of_queries(f0, django_assert_num_queries):
    url = reverse("api:offering-list")
    client = client_for(f0.alice)
    with django_assert_num_queries(4):  # finance group, roles, count, page
        assert len(client.get(url).json()["results"]) == 1
    for n in range(14):
        factories.offering(f0.account, f0.model, instance_type=f"t{n}.a100", on_demand="3")
    client = client_for(f0.alice)
    with django_assert_num_queries(4):
        assert len(client.get(url).json()["results"]) == 15
    models_url = reverse("api:gpu-model-list")
    client = client_for(f0.alice)
    with django_assert_num_queries(4):
        assert len(client.get(models_url).json()["results"]) == 1
    for n in range(14):
        factories.gpu_model(f"Model {n}")
    client = client_for(f0.alice)
    with django_assert_num_queries(4):
        assert len(client.get(models_url).json()["results"]) == 15


@pytest.mark.parametrize(
    "resource",
    [
        "gpu-models",
        "offerings",
        "pools",
        "quotas",
        "quota-requests",
        "images",
        "ssh-keys",
        "volumes",
        "provider-accounts",
    ],
)
def test_it_answers_404_to_an_id_that_is_not_one(f0, resource):
    for pk in ("99999999999999999999999", "abc", "-1", "1.5", "%00"):
        answer = client_for(f0.admin).get(f"/api/v1/{resource}/{pk}")
        assert answer.status_code in (400, 404), (pk, answer.status_code)
        assert answer.status_code == 404 or pk == "%00"  # NUL: refused before any view
