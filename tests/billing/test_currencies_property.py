"""Property: with usage and reservations priced in several currencies, every mode's lines
still sum exactly to F + M (+ reservations), M being each line converted at its captured
rate and rounded once (B2, B5, B7)."""

from dataclasses import replace
from decimal import Decimal

from hypothesis import given, settings
from hypothesis import strategies as st

from billing.apportion import apportion_pool, is_covered
from billing.money import gpu_seconds_cost, quantize
from tests.billing.test_modes_property import pools

RATES = [
    ("", Decimal(1), 0),
    ("CNY", Decimal("7.25000000"), 1),
    ("CNY", Decimal("7.00000000"), 2),
    ("EUR", Decimal("0.91234567"), 3),
]


@st.composite
def priced(draw):
    pool, usage, windows, labels = draw(pools())
    usage = {
        project: {
            replace(key, currency=c, exchange_rate=fx, exchange_rate_id=i): seconds
            for key, seconds in keys.items()
            for c, fx, i in [draw(st.sampled_from(RATES))]
        }
        for project, keys in usage.items()
    }
    windows = [
        replace(w, currency=c, exchange_rate=fx, exchange_rate_id=i)
        for w in windows
        for c, fx, i in [draw(st.sampled_from(RATES))]
    ]
    return pool, usage, windows, labels


@settings(max_examples=300, deadline=None)
@given(priced())
def test_it_sums_to_f_plus_converted_m_in_every_mode(case):
    pool, usage, windows, labels = case
    lines = apportion_pool(pool, usage, windows, labels)
    metered = sum(
        (
            quantize(gpu_seconds_cost(seconds, key.rate, key.exchange_rate))
            for keys in usage.values()
            for key, seconds in keys.items()
            if not is_covered(pool, key)
        ),
        Decimal("0.00"),
    )
    reserved = sum(
        (
            quantize(gpu_seconds_cost(w.seconds * w.gpu_count, w.rate, w.exchange_rate))
            for w in windows
        ),
        Decimal("0.00"),
    )
    assert sum((line.amount for line in lines), Decimal("0.00")) == (
        pool.fixed_cost + metered + reserved
    )
    assert all(quantize(line.amount) == line.amount for line in lines)
