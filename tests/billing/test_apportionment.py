"""Apportionment of a pool's cost (B4, B5, B7), SCENARIOS.md 12 and other numbers.

Statements are computed from real usage rows through ``compute_period``; every mode
must sum to F + M (+ reservation charges) to the cent.
"""

from decimal import Decimal

import pytest

from billing.models import UpfrontPayment
from billing.selectors import draft_statement
from billing.statements import amortized_share, compute_period
from rental.models import Pool, Quota
from tests.billing.helpers import at, lease, run

APRIL = at(2026, 4, 1)
MAY = at(2026, 5, 1)


def totals(computed, f0) -> dict[str, Decimal]:
    slugs = {f0.alpha.pk: "alpha", f0.beta.pk: "beta", f0.gamma.pk: "gamma", None: "platform"}
    return {
        slugs[project_id]: sum((line.amount for line in lines), Decimal("0.00"))
        for project_id, lines in computed.lines.items()
    }


@pytest.fixture
def scenario12(f0):
    """April (720 h); K = 6 of C = 8 committed at F = $5,400.00; on-demand $2.50.
    alpha 1,000 GPU-h (200 burst), beta 2,000 (none burst), gamma 300 (all burst)."""
    Pool.objects.filter(pk=f0.pool.pk).update(
        committed_gpus=6, committed_monthly_cost=Decimal("5400.00")
    )
    alpha_g = lease(f0, f0.alpha, tier="guaranteed", gpus=2)
    alpha_b = lease(f0, f0.alpha, tier="burst")
    beta_g = lease(f0, f0.beta, tier="guaranteed", gpus=4)
    gamma_b = lease(f0, f0.gamma, tier="burst")
    run(alpha_g, start=APRIL, hours=400, gpus=2)
    run(alpha_b, start=APRIL, hours=200)
    run(beta_g, start=APRIL, hours=500, gpus=4)
    run(gamma_b, start=APRIL, hours=300)
    return f0


def set_mode(f0, mode, residual="shared"):
    Pool.objects.filter(pk=f0.pool.pk).update(apportionment=mode, residual=residual)


def test_it_apportions_hybrid_as_scenario_12(scenario12):
    computed = compute_period(period=APRIL, now=MAY)
    assert totals(computed, scenario12) == {
        "alpha": Decimal("2300.00"),
        "beta": Decimal("3600.00"),
        "gamma": Decimal("750.00"),
    }
    alpha = {
        (line.kind, line.tier): line.amount for line in computed.for_project(scenario12.alpha.pk)
    }
    assert alpha == {
        ("committed_share", ""): Decimal("1800.00"),
        ("usage", "guaranteed"): Decimal("0.00"),
        ("usage", "burst"): Decimal("500.00"),
    }
    assert computed.total() == Decimal("6650.00")


def test_it_apportions_by_usage_as_scenario_12(scenario12):
    set_mode(scenario12, "by_usage")
    computed = compute_period(period=APRIL, now=MAY)
    assert totals(computed, scenario12) == {
        "alpha": Decimal("2015.15"),
        "beta": Decimal("4030.30"),
        "gamma": Decimal("604.55"),
    }
    assert computed.total() == Decimal("6650.00")


def test_it_apportions_by_project_guarantee(scenario12):
    set_mode(scenario12, "by_project")
    computed = compute_period(period=APRIL, now=MAY)
    # F split 2 : 4 over ΣG = 6; each pays its own metered burst.
    assert totals(computed, scenario12) == {
        "alpha": Decimal("2300.00"),
        "beta": Decimal("3600.00"),
        "gamma": Decimal("750.00"),
    }
    assert computed.total() == Decimal("6650.00")


def test_it_splits_the_unassigned_commitment_by_burst_use(scenario12):
    """K = 7, ΣG = 6, F = $1,000.00: shares 285.71 / 571.43 and a residual of 142.86 split
    by burst GPU-seconds 200 : 300 → 57.14 / 85.72."""
    Pool.objects.filter(pk=scenario12.pool.pk).update(
        committed_gpus=7, committed_monthly_cost=Decimal("1000.00")
    )
    computed = compute_period(period=APRIL, now=MAY)
    kinds = {
        (project_id, line.kind): line.amount
        for project_id, lines in computed.lines.items()
        for line in lines
        if line.kind in ("committed_share", "shared_residual")
    }
    assert kinds == {
        (scenario12.alpha.pk, "committed_share"): Decimal("285.71"),
        (scenario12.beta.pk, "committed_share"): Decimal("571.43"),
        (scenario12.alpha.pk, "shared_residual"): Decimal("57.14"),
        (scenario12.gamma.pk, "shared_residual"): Decimal("85.72"),
    }
    assert computed.total() == Decimal("1000.00") + Decimal("1250.00")


def test_it_books_the_unassigned_commitment_to_the_platform_by_policy(scenario12):
    Pool.objects.filter(pk=scenario12.pool.pk).update(
        committed_gpus=7, committed_monthly_cost=Decimal("1000.00"), residual="platform"
    )
    computed = compute_period(period=APRIL, now=MAY)
    [platform] = computed.for_project(None)
    assert platform.kind == "shared_residual"
    assert platform.amount == Decimal("142.86")
    assert all(
        line.kind != "shared_residual"
        for project_id, lines in computed.lines.items()
        if project_id is not None
        for line in lines
    )
    assert computed.total() == Decimal("2250.00")


def test_it_meters_guaranteed_usage_when_nothing_is_committed(f0):
    # K = 0: guarantees only give priority; every second is metered.
    run(lease(f0, f0.alpha, tier="guaranteed", gpus=2), start=APRIL, hours=10, gpus=2)
    computed = compute_period(period=APRIL, now=MAY)
    assert totals(computed, f0) == {"alpha": Decimal("50.00")}


def test_it_prorates_the_committed_cost_per_second_while_the_month_is_open(scenario12):
    # Halfway through April: F so far is 5,400 × 15 / 30; usage to that moment.
    computed = compute_period(period=APRIL, now=at(2026, 4, 16))
    alpha_share = next(
        line for line in computed.for_project(scenario12.alpha.pk) if line.kind == "committed_share"
    )
    assert alpha_share.amount == Decimal("900.00")
    assert computed.pools[scenario12.model.pk]["F"] == "2700.00"
    # One second later: 5,400 × 1,296,001 / 2,592,000 = 2,700.002083 → 2,700.00 (half up).
    later = compute_period(period=APRIL, now=at(2026, 4, 16, 0, 0, 1))
    assert later.pools[scenario12.model.pk]["F"] == "2700.00"


def test_it_amortizes_an_upfront_payment_over_a_leap_year_by_seconds(f0):
    payment = UpfrontPayment.objects.create(
        pool=f0.pool, amount=Decimal("36600.00"), first_month=at(2028, 1, 1).date(), months=12
    )
    shares = [amortized_share(payment, at(2028, month, 1)) for month in range(1, 13)]
    # $100 a day over 366 days.
    assert shares[0] == Decimal("3100.00")
    assert shares[1] == Decimal("2900.00")
    assert shares[3] == Decimal("3000.00")
    assert sum(shares) == Decimal("36600.00")
    assert amortized_share(payment, at(2029, 1, 1)) == Decimal("0.00")


def test_it_amortizes_an_uneven_payment_to_the_cent(f0):
    payment = UpfrontPayment.objects.create(
        pool=f0.pool, amount=Decimal("1000.00"), first_month=at(2027, 11, 1).date(), months=4
    )
    # Nov 30 d, Dec 31 d, Jan 31 d, Feb 29 d (2028): 121 days.
    shares = [
        amortized_share(payment, month)
        for month in (at(2027, 11, 1), at(2027, 12, 1), at(2028, 1, 1), at(2028, 2, 1))
    ]
    assert shares == [Decimal("247.93"), Decimal("256.20"), Decimal("256.20"), Decimal("239.67")]
    assert sum(shares) == Decimal("1000.00")


def test_it_adds_the_amortized_payment_to_the_month_committed_cost(scenario12):
    UpfrontPayment.objects.create(
        pool=scenario12.pool, amount=Decimal("1200.00"), first_month=APRIL.date(), months=1
    )
    computed = compute_period(period=APRIL, now=MAY)
    assert computed.pools[scenario12.model.pk]["F"] == "6600.00"
    assert computed.total() == Decimal("7850.00")


def test_it_charges_a_reservation_beyond_the_guarantee_whether_used_or_not(f0):
    # gamma reserves 4 GPUs for 8 h; it uses 2 GPUs for 3 h of it.
    reserved = lease(
        f0, f0.gamma, tier="reserved", gpus=4, start=at(2026, 4, 6, 9), end=at(2026, 4, 6, 17)
    )
    run(reserved, start=at(2026, 4, 6, 9), hours=3, gpus=2)
    computed = compute_period(period=APRIL, now=MAY)
    lines = {line.kind: line for line in computed.for_project(f0.gamma.pk)}
    assert lines["reservation"].amount == Decimal("80.00")  # 4 × 8 h × $2.50
    assert lines["usage"].amount == Decimal("0.00")
    assert lines["usage"].gpu_seconds == 2 * 3 * 3600
    assert computed.total() == Decimal("80.00")


def test_it_does_not_charge_a_reservation_cancelled_before_its_start(f0):
    lease(
        f0,
        f0.gamma,
        tier="reserved",
        gpus=4,
        start=at(2026, 4, 6, 9),
        end=at(2026, 4, 6, 17),
        status="cancelled",
    )
    assert compute_period(period=APRIL, now=MAY).total() == Decimal("0.00")


def test_it_charges_only_the_elapsed_part_of_a_reservation_in_a_draft(f0):
    lease(
        f0,
        f0.gamma,
        tier="reserved",
        gpus=4,
        start=at(2026, 4, 6, 9),
        end=at(2026, 4, 6, 17),
        status="active",
    )
    statement = draft_statement(project_id=f0.gamma.pk, period=APRIL, now=at(2026, 4, 6, 10, 30))
    assert statement.total == Decimal("15.00")  # 4 × 1.5 h × $2.50


def test_it_splits_a_reservation_at_the_month_boundary(f0):
    lease(f0, f0.gamma, tier="reserved", gpus=1, start=at(2026, 4, 30, 20), end=at(2026, 5, 1, 4))
    april = compute_period(period=APRIL, now=at(2026, 6, 1))
    may = compute_period(period=MAY, now=at(2026, 6, 1))
    assert (april.total(), may.total()) == (Decimal("10.00"), Decimal("10.00"))


def test_quotas_outside_the_pool_do_not_take_a_share(scenario12):
    other = Quota.objects.get(project=scenario12.gamma, gpu_model=scenario12.model)
    assert other.guaranteed == 0
    computed = compute_period(period=APRIL, now=MAY)
    assert all(line.kind != "committed_share" for line in computed.for_project(scenario12.gamma.pk))
