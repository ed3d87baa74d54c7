"""Money rules B1, B2, B3 and B6 (SCENARIOS.md 9, 10 and 11), with exact sums."""

from datetime import UTC, datetime, timedelta
from decimal import Decimal

import pytest

from billing.money import gpu_seconds_cost, largest_remainder, quantize
from billing.selectors import billed_seconds, draft_statement, usage_lines
from rental.models import Instance, Reservation, TerminationReason, UsageRecord


def at(*parts: int) -> datetime:
    return datetime(*parts, tzinfo=UTC)


@pytest.fixture
def lease(f0):
    """One lease of alpha to hang usage records on."""
    reservation = Reservation.objects.create(
        project=f0.alpha,
        requester=f0.alice,
        gpu_model=f0.model,
        gpu_count=2,
        offering=f0.offering,
        start=at(2026, 1, 1),
        end=at(2026, 3, 1),
        status="ended",
        tier="guaranteed",
    )
    return reservation


def run(
    lease, *, start, seconds, gpus=1, rate="2.50", reason=TerminationReason.USER, market="on_demand"
):
    instance = Instance.objects.create(
        reservation=lease,
        account=lease.offering.account,
        offering=lease.offering,
        region="us-east-1",
        market=market,
        gpu_count=gpus,
        rate_per_hour=Decimal(rate) * gpus,
        state="terminated",
    )
    return UsageRecord.objects.create(
        instance=instance,
        project=lease.project,
        gpu_model=lease.gpu_model,
        tier="guaranteed",
        market=market,
        gpu_count=gpus,
        start=start,
        end=start + timedelta(seconds=seconds) if seconds is not None else None,
        rate=Decimal(rate),
        end_reason=reason if seconds is not None else "",
    )


def test_it_rounds_half_up_not_half_even():
    assert quantize(Decimal("0.065")) == Decimal("0.07")
    assert quantize(Decimal("0.075")) == Decimal("0.08")
    assert quantize(Decimal("7.59375")) == Decimal("7.59")
    with pytest.raises(TypeError):
        quantize(0.065)  # type: ignore[arg-type]


# Scenario 9 (B1, B2)
def test_it_bills_per_second_with_a_minimum_only_for_user_ended_runs(lease):
    start = at(2026, 1, 10, 9)
    run(lease, start=start, seconds=5_415, gpus=2, reason=TerminationReason.LEASE_END)
    run(lease, start=start, seconds=45, reason=TerminationReason.USER)
    run(lease, start=start, seconds=45, reason=TerminationReason.PREEMPTED)

    statement = draft_statement(
        project_id=lease.project_id, period=at(2026, 1, 1), now=at(2026, 1, 20)
    )

    assert len(statement.lines) == 1
    line = statement.lines[0]
    assert line.gpu_seconds == 10_830 + 60 + 45
    assert gpu_seconds_cost(line.gpu_seconds, line.unit_price) == Decimal("7.59375")
    assert line.amount == Decimal("7.59")
    assert statement.total == Decimal("7.59")


def test_it_rounds_one_run_of_78_seconds_at_three_dollars_up(lease):
    run(lease, start=at(2026, 1, 10, 9), seconds=78, rate="3.00")
    lines = usage_lines(
        project_ids=[lease.project_id], start=at(2026, 1, 1), end=at(2026, 2, 1), now=at(2026, 2, 1)
    )[lease.project_id]
    assert gpu_seconds_cost(lines[0].gpu_seconds, lines[0].rate) == Decimal("0.065")
    assert lines[0].amount == Decimal("0.07")


# Scenario 10 (B6)
def test_it_splits_usage_at_the_period_boundary(lease):
    run(
        lease,
        start=at(2026, 1, 31, 23, 30),
        seconds=75 * 60,
        gpus=4,
        reason=TerminationReason.LEASE_END,
    )
    january = draft_statement(
        project_id=lease.project_id, period=at(2026, 1, 1), now=at(2026, 3, 1)
    )
    february = draft_statement(
        project_id=lease.project_id, period=at(2026, 2, 1), now=at(2026, 3, 1)
    )
    assert january.total == Decimal("5.00")
    assert february.total == Decimal("7.50")


def test_it_puts_the_minimum_top_up_where_the_run_ended(lease):
    record = run(lease, start=at(2026, 1, 31, 23, 59, 40), seconds=30)
    january = billed_seconds(record, start=at(2026, 1, 1), end=at(2026, 2, 1), now=at(2026, 3, 1))
    february = billed_seconds(record, start=at(2026, 2, 1), end=at(2026, 3, 1), now=at(2026, 3, 1))
    assert (january, february) == (20, 40)


def test_it_bills_a_running_interval_up_to_now_without_top_up(lease):
    record = run(lease, start=at(2026, 1, 10, 9), seconds=None)
    assert (
        billed_seconds(
            record, start=at(2026, 1, 1), end=at(2026, 2, 1), now=at(2026, 1, 10, 9, 0, 30)
        )
        == 30
    )


def test_it_keeps_projects_statements_apart(f0, lease):
    run(lease, start=at(2026, 1, 10, 9), seconds=3600)
    other = draft_statement(project_id=f0.beta.pk, period=at(2026, 1, 1), now=at(2026, 2, 1))
    assert other.lines == []
    assert other.total == Decimal("0.00")


# Scenario 11 (B3)
def test_it_splits_evenly_with_the_leftover_cent_to_the_first_slug():
    parts = largest_remainder(Decimal("100.00"), {"alpha": 1, "beta": 1, "gamma": 1})
    assert parts == {"alpha": Decimal("33.34"), "beta": Decimal("33.33"), "gamma": Decimal("33.33")}
    assert sum(parts.values()) == Decimal("100.00")


def test_it_splits_by_weight_to_the_cent():
    parts = largest_remainder(Decimal("1000.00"), {"alpha": 2, "beta": 3, "gamma": 4})
    assert parts == {
        "alpha": Decimal("222.22"),
        "beta": Decimal("333.33"),
        "gamma": Decimal("444.45"),
    }
    assert sum(parts.values()) == Decimal("1000.00")


def test_it_breaks_ties_by_larger_weight_then_slug():
    # 0.5 and 1.5 cents: equal fractions, the leftover cent goes to the larger weight.
    assert largest_remainder(Decimal("0.02"), {"a": 1, "b": 3}) == {
        "a": Decimal("0.00"),
        "b": Decimal("0.02"),
    }
    # 1.25 cents each: equal fractions and weights, the leftover goes to the first slug.
    parts = largest_remainder(Decimal("0.05"), {"d": 1, "c": 1, "b": 1, "a": 1})
    assert parts == {
        "a": Decimal("0.02"),
        "b": Decimal("0.01"),
        "c": Decimal("0.01"),
        "d": Decimal("0.01"),
    }


@pytest.mark.parametrize("total", ["0.01", "0.07", "6650.00", "12345.67"])
def test_it_always_sums_exactly(total):
    weights = {
        "alpha": Decimal("1000"),
        "beta": Decimal("2000"),
        "gamma": Decimal("300"),
        "delta": Decimal("0.5"),
    }
    assert sum(largest_remainder(Decimal(total), weights).values()) == Decimal(total)


def test_it_refuses_to_split_over_nothing():
    with pytest.raises(ValueError):
        largest_remainder(Decimal("1.00"), {"alpha": 0})
    with pytest.raises(ValueError):
        largest_remainder(Decimal("1.001"), {"alpha": 1})


# Scenario 13 (Q8, B1): a spot lease preempted by the platform bills to the second, no
# minimum. SCENARIOS.md says "from 09:00:00 … preempted at 10:02:00 … 4 × 7,320 s = $8.13",
# but 09:00:00 → 10:02:00 is 3,720 s; 7,320 s is a run from 08:00:00. Both are tested: the
# rule (per second) decides, the figures follow from it.
@pytest.mark.parametrize(
    ("started", "seconds", "amount"),
    [((2026, 4, 6, 8), 7_320, "8.13"), ((2026, 4, 6, 9), 3_720, "4.13")],
)
def test_it_bills_a_preempted_spot_run_to_the_second(f0, started, seconds, amount):
    from tests.billing.helpers import lease as make_lease
    from tests.billing.helpers import run as make_run

    spot = make_lease(f0, f0.gamma, tier="spot", gpus=4, market="spot")
    make_run(
        spot,
        start=at(*started),
        end=at(2026, 4, 6, 10, 2),
        gpus=4,
        rate="1.00",
        market="spot",
        reason=TerminationReason.PREEMPTED,
    )
    statement = draft_statement(project_id=f0.gamma.pk, period=at(2026, 4, 1), now=at(2026, 5, 1))
    [line] = statement.lines
    assert line.gpu_seconds == 4 * seconds
    assert (line.tier, line.market, line.amount) == ("spot", "spot", Decimal(amount))
