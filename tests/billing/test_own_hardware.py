"""Own servers on the statements: the purchase price written off over the months of
amortisation as committed cost (B4), split between projects like any committed cost (B5),
power metered at the own offering's rate; every figure worked out by hand."""

from dataclasses import replace
from datetime import date, timedelta
from decimal import Decimal
from itertools import pairwise

import pytest
from django.urls import reverse

from billing import own_hardware, reports, services
from billing.currency import RateTable
from billing.models import StatementLine
from billing.statements import compute_period
from rental.models import Offering, OwnHost, Pool, ProviderAccount, Quota
from tests.billing.helpers import at, lease, run

APRIL = at(2026, 4, 1)
MAY = at(2026, 5, 1)


def host_terms(price, months, since, gpus):
    return own_hardware.HostTerms(
        name="gpu-box-1",
        purchase_price=Decimal(price),
        currency="USD",
        months=months,
        in_service_since=since,
        gpus=gpus,
    )


def test_the_months_are_the_price_over_the_term_and_the_last_takes_the_rest():
    assert own_hardware.monthly_charges(Decimal("24000.00"), 24) == [Decimal("1000.00")] * 24
    assert own_hardware.monthly_charges(Decimal("1000.00"), 3) == [
        Decimal("333.33"),
        Decimal("333.33"),
        Decimal("333.34"),
    ]


def test_a_term_that_starts_mid_month_is_prorated_per_second_and_sums_to_the_price():
    host = host_terms("1000.00", 3, date(2026, 4, 16), {1: 2})
    months = [at(2026, m, 1) for m in range(3, 10)]  # March to August
    shares = [
        own_hardware.host_share(host, start=start, covered_end=end)
        for start, end in pairwise(months)
    ]
    # March: not in service. April: 15 of the 30 days of Apr 16 – May 16 at 333.33 =
    # 166.665 → 166.67. May: 333.33 by May 16 plus 16 of 31 days at 333.33 (172.0412…),
    # 505.37 accrued minus April's 166.67 = 338.70. June, July (to July 16): the rest.
    assert shares[:3] == [Decimal("0.00"), Decimal("166.67"), Decimal("338.70")]
    assert sum(shares) == Decimal("1000.00")
    assert shares[-1] == Decimal("0.00")  # August: written off


def test_a_host_with_two_gpu_models_splits_its_month_by_gpu_count():
    host = host_terms("900.01", 1, date(2026, 4, 1), {1: 2, 2: 1})
    split = own_hardware.amortisation_by_model(
        [host], start=APRIL, covered_end=MAY, rates=RateTable([])
    )
    # 900.01 × 2/3 = 600.006…, × 1/3 = 300.003…: floors 600.00 and 300.00, the cent left
    # goes to the larger remainder (equal: the larger weight, model 1).
    assert split == {1: Decimal("600.01"), 2: Decimal("300.00")}


@pytest.fixture
def owned(f0):
    """f0's A100 pool split by project guarantee (alpha G 1, beta G 3), with one own
    server: 24,000.00 over 24 months from March 1, two A100s, power 0.10 a GPU-hour."""
    Pool.objects.filter(pk=f0.pool.pk).update(apportionment="by_project")
    Quota.objects.filter(project=f0.alpha).update(guaranteed=1)
    Quota.objects.filter(project=f0.beta).update(guaranteed=3)
    Quota.objects.filter(project=f0.gamma).update(guaranteed=0)
    site = ProviderAccount.objects.create(name="Server room", driver="ssh", regions=["room-1"])
    OwnHost.objects.create(
        account=site,
        name="gpu-box-1",
        address="10.0.0.11",
        purchase_price=Decimal("24000.00"),
        amortisation_months=24,
        in_service_since=date(2026, 3, 1),
        power_price_per_gpu_hour=Decimal("0.10"),
        gpus=[{"index": i, "gpu_model": f0.model.pk} for i in (0, 1)],
    )
    own = Offering.objects.create(
        account=site,
        region="room-1",
        instance_type="own-2x-a100-80gb",
        gpu_model=f0.model,
        gpus_per_instance=2,
        vcpus=32,
        memory_gib=256,
        on_demand_price_per_hour=Decimal("0.20"),
        zones=["gpu-box-1"],
    )
    on_own = lease(f0, f0.alpha, tier="burst", gpus=2)
    on_own.offering = own
    on_own.save()
    run(on_own, start=at(2026, 4, 10), hours=30, gpus=2, rate="0.10", tier="burst")
    return f0


def lines_of(project):
    return sorted(
        (line.kind, line.amount)
        for line in StatementLine.objects.filter(
            statement__project=project, statement__period=APRIL.date()
        )
    )


def test_the_statement_charges_amortisation_by_guarantee_and_power_as_usage(owned):
    services.close_period(period=APRIL, now=MAY + timedelta(hours=48))

    # F = 24,000.00 / 24 = 1,000.00 for April; by project: 1,000.00 × 1/4 and × 3/4.
    # Power: 0.10 a GPU-hour × 2 GPUs × 30 hours = 6.00, metered to alpha.
    assert lines_of(owned.alpha) == [
        ("committed_share", Decimal("250.00")),
        ("usage", Decimal("6.00")),
    ]
    assert lines_of(owned.beta) == [("committed_share", Decimal("750.00"))]
    assert lines_of(owned.gamma) == []
    usage = StatementLine.objects.get(statement__project=owned.alpha, kind="usage")
    assert (usage.quantity, usage.unit_price) == (Decimal("60.000000"), Decimal("0.100000"))
    # Closing again computes the same lines to the last digit.
    assert services.recompute_closed(period=APRIL, now=MAY + timedelta(days=20)) == {}


def test_an_open_month_accrues_the_amortisation_per_second(owned):
    draft = compute_period(period=APRIL, now=at(2026, 4, 16))
    # 15 of April's 30 days: 1,000.00 × 15/30 = 500.00, split 125.00 / 375.00.
    assert draft.pools[owned.model.pk]["own_hardware"] == "500.00"
    shares = {
        project_id: line.amount
        for project_id, lines in draft.lines.items()
        for line in lines
        if line.kind == "committed_share"
    }
    assert shares == {owned.alpha.pk: Decimal("125.00"), owned.beta.pk: Decimal("375.00")}


def test_a_host_priced_in_another_currency_without_a_rate_is_refused_by_name():
    host = own_hardware.HostTerms(
        name="gpu-box-9",
        purchase_price=Decimal("7250.00"),
        currency="CNY",
        months=1,
        in_service_since=date(2026, 4, 1),
        gpus={1: 1},
    )
    with pytest.raises(ValueError, match="gpu-box-9"):
        own_hardware.amortisation_by_model(
            [host], start=APRIL, covered_end=MAY, rates=RateTable([])
        )


def test_an_own_server_without_a_price_adds_nothing(f0):
    site = ProviderAccount.objects.create(name="Lab", driver="ssh", regions=["lab"])
    OwnHost.objects.create(account=site, name="donated", address="10.0.0.12")
    assert own_hardware.own_hosts() == []


def test_rent_or_buy_costs_owning_from_the_own_servers_beside_the_cheapest_cloud(owned):
    [advice] = reports.commitment_advice(gpu_model_ids=[owned.model.pk], now=MAY)
    advice = replace(advice, average_gpus=Decimal("2.00"))
    [(_item, answer)] = reports.rent_or_buy_all([advice])

    # Owning: 24,000.00 / 24 months / 2 GPUs = 500.00 a GPU-month, plus power 0.10 × 730
    # hours = 73.00. Renting: the A100 cloud offering at 2.50 a GPU-hour × 730 hours.
    assert answer.own.amortisation_per_gpu_month == Decimal("500.00")
    assert answer.power_per_gpu_month == Decimal("73.00")
    assert answer.buy_per_month == Decimal("1146.00")  # 2 × (500.00 + 73.00)
    assert answer.rent_per_month == Decimal("3650.00")  # 2 × 730 × 2.50
    assert answer.cheaper == "buy"


def test_the_reports_page_says_what_owning_costs_from_the_own_servers(owned, client):
    client.force_login(owned.alpha_manager)
    page = client.get(reverse("billing:reports", args=[owned.alpha.slug])).content.decode()
    assert "Owning, as your 2 own server GPUs cost:" in page
    assert "500.00" in page and "73.00" in page
