"""The budget cap's cheap read (BU3): month-to-date spend kept per project, refreshed in
one full computation, exact to the cent against that computation."""

from datetime import timedelta
from decimal import Decimal

import pytest

from billing import services, spend
from billing.admission import budget_cap
from billing.models import Budget, SpendSnapshot
from billing.selectors import month_to_date
from rental.models import Pool
from tests.billing.helpers import at, lease, run

APRIL = at(2026, 4, 1)
NOW = at(2026, 4, 17, 13, 27, 41)


def check(project, *, now, tier="burst"):
    return budget_cap(
        project=project,
        gpu_model=None,
        gpu_count=1,
        tier=tier,
        market="on_demand",
        starts_at=now,
        ends_at=now + timedelta(hours=1),
        is_reservation=False,
        now=now,
    )


@pytest.fixture
def month(f0):
    """Usage of every kind over three projects: guaranteed, burst and spot runs at several
    rates, short runs (the B1 minimum), one still running, one crossing from March."""
    Pool.objects.filter(pk=f0.pool.pk).update(
        committed_gpus=7, committed_monthly_cost=Decimal("1234.56")
    )
    for index, project in enumerate((f0.alpha, f0.beta, f0.gamma)):
        guaranteed = lease(f0, project, tier="guaranteed", gpus=2)
        burst = lease(f0, project, tier="burst")
        spot = lease(f0, project, tier="spot", market="spot")
        for day in range(1, 16):
            start = at(2026, 4, day, index + 1, 7, 13)
            run(guaranteed, start=start, seconds=3600 * (day % 5) + 17 * index, gpus=2)
            run(burst, start=start + timedelta(hours=5), seconds=45 + day * 611, rate="2.75")
            run(spot, start=start, seconds=1234 + day, rate="1.000001", market="spot")
    run(lease(f0, f0.beta, tier="burst"), start=at(2026, 3, 31, 22), seconds=None, rate="3.1")
    return f0


@pytest.mark.parametrize("mode", ["hybrid", "by_usage", "by_project"])
def test_it_matches_the_full_computation_to_the_cent(month, mode):
    Pool.objects.filter(pk=month.pool.pk).update(apportionment=mode)
    assert spend.refresh(now=NOW) == 3
    full = month_to_date(project_ids=[month.alpha.pk, month.beta.pk, month.gamma.pk], now=NOW)
    stored = {
        row.project_id: row.amount for row in SpendSnapshot.objects.filter(period=APRIL.date())
    }
    assert stored == full
    assert len(set(stored.values())) == 3 and min(stored.values()) > 0
    assert {row.as_of for row in SpendSnapshot.objects.all()} == {NOW}


def test_it_reads_the_cap_from_the_snapshot_in_two_queries(f0, django_assert_max_num_queries):
    Budget.objects.create(project=f0.gamma, monthly_amount=Decimal("100.00"), thresholds=[])
    SpendSnapshot.objects.create(
        project=f0.gamma, period=APRIL.date(), amount=Decimal("100.00"), as_of=NOW
    )
    later = NOW + timedelta(seconds=30)
    with django_assert_max_num_queries(2):
        refusal = check(f0.gamma, now=later)
    # No usage exists: only the snapshot can have said 100.00.
    assert refusal[0] == "budget_cap" and "100.00" in str(refusal[1])
    SpendSnapshot.objects.filter(project=f0.gamma).update(amount=Decimal("99.99"))
    assert check(f0.gamma, now=later) is None


def test_it_computes_in_full_when_the_snapshot_is_stale_or_missing(month, settings):
    settings.PORTAL_SPEND_SNAPSHOT_MAX_AGE_SECONDS = 180
    actual = month_to_date(project_ids=[month.gamma.pk], now=NOW)[month.gamma.pk]
    Budget.objects.create(project=month.gamma, monthly_amount=actual, thresholds=[])
    # A stale snapshot saying "nothing spent" is not trusted.
    SpendSnapshot.objects.create(
        project=month.gamma,
        period=APRIL.date(),
        amount=Decimal("0.00"),
        as_of=NOW - timedelta(seconds=181),
    )
    assert check(month.gamma, now=NOW)[0] == "budget_cap"
    SpendSnapshot.objects.all().delete()
    assert check(month.gamma, now=NOW)[0] == "budget_cap"
    # Last month's snapshot does not count for this month, and a refresh deletes it.
    SpendSnapshot.objects.create(
        project=month.gamma, period=at(2026, 3, 1).date(), amount=Decimal("0.00"), as_of=NOW
    )
    assert check(month.gamma, now=NOW)[0] == "budget_cap"
    spend.refresh(now=NOW)
    assert not SpendSnapshot.objects.filter(period__lt=APRIL.date()).exists()


def test_it_adds_a_manual_line_to_the_snapshot_at_once(month):
    spend.refresh(now=NOW)
    before = SpendSnapshot.objects.get(project=month.alpha).amount
    services.add_correction(
        project=month.alpha,
        actor=month.admin,
        kind="credit",
        amount="12.34",
        description="Goodwill",
        now=NOW + timedelta(seconds=5),
    )
    after = SpendSnapshot.objects.get(project=month.alpha).amount
    assert after == before - Decimal("12.34")
    full = month_to_date(project_ids=[month.alpha.pk], now=NOW)[month.alpha.pk]
    assert after == full
