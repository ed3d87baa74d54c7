"""Property: in every mode the lines over all projects (plus any platform line) sum to
F + M (+ reservation charges) to the cent (B5, B7), whatever the numbers."""

from decimal import Decimal

from hypothesis import given, settings
from hypothesis import strategies as st

from billing.apportion import PoolPeriod, ReservedWindow, UsageKey, apportion_pool, is_covered
from billing.money import gpu_seconds_cost, quantize

TIERS = ["guaranteed", "burst", "spot", "reserved"]
RATES = [Decimal("2.500000"), Decimal("1.000000"), Decimal("3.333333"), Decimal("0.000001")]


@st.composite
def pools(draw):
    projects = list(range(1, draw(st.integers(1, 6)) + 1))
    k = draw(st.integers(0, 12))
    guarantees: dict[int, int] = {}
    room = k if k else 12
    for project in projects:
        g = draw(st.integers(0, room))
        room -= g
        if g:
            guarantees[project] = g
    pool = PoolPeriod(
        gpu_model_id=1,
        gpu_model_name="A100 80GB",
        committed_gpus=k,
        fixed_cost=Decimal(draw(st.integers(0, 10**8))) / 100,
        mode=draw(st.sampled_from(["by_usage", "by_project", "hybrid"])),
        residual=draw(st.sampled_from(["shared", "platform"])),
        guarantees=guarantees,
        elapsed_seconds=draw(st.integers(1, 31 * 86400)),
    )
    usage = {}
    for project in projects:
        keys = draw(
            st.dictionaries(
                st.builds(
                    UsageKey,
                    st.just(1),
                    st.sampled_from(["on_demand", "spot"]),
                    st.sampled_from(TIERS),
                    st.sampled_from(RATES),
                ),
                st.integers(1, 10**8),
                max_size=5,
            )
        )
        if keys:
            usage[project] = keys
    windows = [
        ReservedWindow(
            reservation_id=index,
            project_id=draw(st.sampled_from(projects)),
            gpu_model_id=1,
            gpu_count=draw(st.integers(1, 8)),
            market="on_demand",
            rate=draw(st.sampled_from(RATES)),
            seconds=draw(st.integers(1, 10**6)),
        )
        for index in range(draw(st.integers(0, 3)))
    ]
    return pool, usage, windows, {p: f"p{p:02d}" for p in projects}


@settings(max_examples=400, deadline=None)
@given(pools())
def test_every_mode_sums_to_f_plus_m(case):
    pool, usage, windows, labels = case
    lines = apportion_pool(pool, usage, windows, labels)
    metered = sum(
        (
            quantize(gpu_seconds_cost(seconds, key.rate))
            for keys in usage.values()
            for key, seconds in keys.items()
            if not is_covered(pool, key)
        ),
        Decimal("0.00"),
    )
    reserved = sum(
        (quantize(gpu_seconds_cost(w.seconds * w.gpu_count, w.rate)) for w in windows),
        Decimal("0.00"),
    )
    assert sum((line.amount for line in lines), Decimal("0.00")) == (
        pool.fixed_cost + metered + reserved
    )
    assert all(quantize(line.amount) == line.amount for line in lines)
    assert all(line.amount >= 0 for line in lines)
