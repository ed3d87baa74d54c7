"""Money: one rounding function and one exact split. Decimal only, never float."""

from collections.abc import Hashable, Mapping
from decimal import ROUND_FLOOR, ROUND_HALF_UP, Decimal

CENT = Decimal("0.01")
RATE_PLACES = Decimal("0.000001")
SECONDS_PER_HOUR = Decimal(3600)
# The amount columns hold 14 digits, two of them cents: what does not fit is refused on
# the field, never stored (SQLite would store it, and every later read of it would fail).
AMOUNT_LIMIT = Decimal(10) ** 12


def quantize(amount: Decimal) -> Decimal:
    """Round an exact amount to cents, half up (B2). The only rounding of money."""
    if not isinstance(amount, Decimal):
        raise TypeError(f"money must be Decimal, not {type(amount).__name__}")
    return amount.quantize(CENT, rounding=ROUND_HALF_UP)


ONE = Decimal(1)


def to_billing_currency(amount: Decimal, units_per_billing_unit: Decimal) -> Decimal:
    """An exact amount in another currency converted into the billing currency at a rate of
    ``units_per_billing_unit`` (7.25 CNY per USD), unrounded: the line's one rounding
    comes after (B2)."""
    if not isinstance(units_per_billing_unit, Decimal) or units_per_billing_unit <= 0:
        raise ValueError(
            f"an exchange rate must be a positive Decimal, not {units_per_billing_unit!r}"
        )
    if units_per_billing_unit == ONE:
        return amount
    return amount / units_per_billing_unit


def gpu_seconds_cost(
    gpu_seconds: int | Decimal, rate_per_gpu_hour: Decimal, exchange_rate: Decimal = ONE
) -> Decimal:
    """The exact, unrounded cost of GPU-seconds at an hourly rate, in the billing currency
    (the rate is in a currency worth ``exchange_rate`` units per billing unit)."""
    return to_billing_currency(
        Decimal(gpu_seconds) * rate_per_gpu_hour / SECONDS_PER_HOUR, exchange_rate
    )


def converted_rate(rate: Decimal, exchange_rate: Decimal) -> Decimal:
    """A rate shown in the billing currency, to six places (display only: amounts are
    computed from the exact figures)."""
    return to_billing_currency(rate, exchange_rate).quantize(RATE_PLACES, rounding=ROUND_HALF_UP)


def largest_remainder(
    total: Decimal,
    weights: Mapping[Hashable, Decimal | int],
    *,
    tie_break: Mapping[Hashable, str] | None = None,
) -> dict[Hashable, Decimal]:
    """Split a total in cents by weight so the parts sum exactly to it (B3).

    Each part is floored to the cent; the leftover cents go one each to the
    largest fractional remainders; ties go to the larger weight, then to the
    smaller ``tie_break`` label (the project slug). Zero total weight raises.
    """
    if quantize(total) != total:
        raise ValueError(f"total {total} is not a whole number of cents")
    weights = {key: Decimal(weight) for key, weight in weights.items()}
    if any(weight < 0 for weight in weights.values()):
        raise ValueError("weights must not be negative")
    weight_sum = sum(weights.values(), Decimal(0))
    if weight_sum == 0:
        raise ValueError("cannot split over zero total weight")
    labels = tie_break or {key: str(key) for key in weights}
    total_cents = int(total / CENT)
    floors: dict[Hashable, int] = {}
    remainders: dict[Hashable, Decimal] = {}
    for key, weight in weights.items():
        exact = Decimal(total_cents) * weight / weight_sum
        floors[key] = int(exact.to_integral_value(rounding=ROUND_FLOOR))
        remainders[key] = exact - floors[key]
    leftover = total_cents - sum(floors.values())
    order = sorted(weights, key=lambda key: (-remainders[key], -weights[key], labels[key]))
    for key in order[:leftover]:
        floors[key] += 1
    return {key: Decimal(cents) * CENT for key, cents in floors.items()}
