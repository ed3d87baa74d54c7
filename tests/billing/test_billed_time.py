"""Billed time (B1, B6): whole seconds counted once, then split at period boundaries."""

from datetime import timedelta
from decimal import Decimal
from itertools import pairwise
from types import SimpleNamespace

from hypothesis import given, settings
from hypothesis import strategies as st

from billing.money import gpu_seconds_cost, largest_remainder, quantize
from billing.periods import billed_seconds
from billing.selectors import draft_statement
from tests.billing.helpers import at, lease, run

ORIGIN = at(2026, 1, 31, 22)


def record(start, end, reason="user"):
    return SimpleNamespace(start=start, end=end, end_reason=reason)


def test_it_bills_a_two_hour_run_across_midnight_as_7200_seconds():
    start = at(2026, 1, 31, 23) + timedelta(microseconds=500_000)
    run_ = record(start, start + timedelta(hours=2), "lease_end")
    january = billed_seconds(run_, start=at(2026, 1, 1), end=at(2026, 2, 1), now=at(2026, 3, 1))
    february = billed_seconds(run_, start=at(2026, 2, 1), end=at(2026, 3, 1), now=at(2026, 3, 1))
    assert (january, february) == (3600, 3600)


def test_it_bills_the_same_run_through_the_statements(f0):
    start = at(2026, 1, 31, 23) + timedelta(microseconds=500_000)
    run(lease(f0, f0.alpha), start=start, seconds=7200)
    january = draft_statement(project_id=f0.alpha.pk, period=at(2026, 1, 1), now=at(2026, 3, 1))
    february = draft_statement(project_id=f0.alpha.pk, period=at(2026, 2, 1), now=at(2026, 3, 1))
    assert [line.gpu_seconds for line in january.lines + february.lines] == [3600, 3600]
    assert january.total + february.total == Decimal("5.00")


def test_it_drops_a_trailing_part_second_once_not_per_period():
    start = at(2026, 1, 31, 23, 59, 59) + timedelta(microseconds=700_000)
    run_ = record(start, start + timedelta(seconds=100, microseconds=900_000), "preempted")
    parts = [
        billed_seconds(run_, start=at(2026, 1, 1), end=at(2026, 2, 1), now=at(2026, 3, 1)),
        billed_seconds(run_, start=at(2026, 2, 1), end=at(2026, 3, 1), now=at(2026, 3, 1)),
    ]
    assert parts == [1, 99]


@st.composite
def runs_and_boundaries(draw):
    start = ORIGIN + timedelta(microseconds=draw(st.integers(0, 4 * 3600 * 10**6)))
    duration = timedelta(microseconds=draw(st.integers(0, 3 * 3600 * 10**6)))
    reason = draw(st.sampled_from(["user", "lease_end", "idle", "preempted", "spot_interrupted"]))
    cuts = draw(st.lists(st.integers(0, 8 * 3600 * 10**6), min_size=0, max_size=6, unique=True))
    boundaries = sorted(ORIGIN + timedelta(microseconds=cut) for cut in cuts)
    return record(start, start + duration, reason), boundaries


@settings(max_examples=300, deadline=None)
@given(runs_and_boundaries())
def test_any_split_preserves_the_seconds_and_tops_up_once_where_the_run_ended(case):
    run_, boundaries = case
    edges = [ORIGIN - timedelta(days=1), *boundaries, ORIGIN + timedelta(days=1)]
    periods = list(pairwise(edges))
    now = ORIGIN + timedelta(days=2)
    parts = [billed_seconds(run_, start=lo, end=hi, now=now) for lo, hi in periods]
    whole = (run_.end - run_.start) // timedelta(seconds=1)
    platform = run_.end_reason in ("preempted", "spot_interrupted")
    expected = whole if platform or whole >= 60 else 60
    assert sum(parts) == expected
    # Without the top-up, each period holds exactly the billed seconds that begin in it.
    last = run_.end - timedelta(microseconds=1) if run_.end > run_.start else run_.start
    for (lo, hi), part in zip(periods, parts, strict=True):
        begun = sum(1 for k in range(whole) if lo <= run_.start + timedelta(seconds=k) < hi)
        top_up = expected - whole if lo <= last < hi else 0
        assert part == begun + top_up


@settings(max_examples=300, deadline=None)
@given(
    total_cents=st.integers(0, 10**9),
    weights=st.dictionaries(
        st.text("abcdefgh", min_size=1, max_size=4),
        st.decimals(min_value=0, max_value=10**6, places=3, allow_nan=False),
        min_size=1,
        max_size=12,
    ),
)
def test_any_split_sums_exactly_to_its_total(total_cents, weights):
    if sum(weights.values()) == 0:
        weights = {**weights, "z": Decimal(1)}
    total = Decimal(total_cents) / 100
    parts = largest_remainder(total, weights)
    assert sum(parts.values()) == total
    assert all(part >= 0 and quantize(part) == part for part in parts.values())


def test_the_minimum_is_not_applied_to_a_running_interval():
    run_ = record(at(2026, 1, 10, 9), None)
    assert (
        billed_seconds(
            run_, start=at(2026, 1, 1), end=at(2026, 2, 1), now=at(2026, 1, 10, 9, 0, 30)
        )
        == 30
    )
    assert gpu_seconds_cost(30, Decimal("2.50")) == Decimal("30") * Decimal("2.50") / 3600
