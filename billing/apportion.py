"""Apportioning one pool's cost between projects (B4, B5, B7): pure functions over plain numbers.

A pool's cost for a period is F (its committed cost for the period, already prorated
and amortized, in cents) plus M (the metered cost: every usage line not covered by the
commitment or by a reservation, each rounded once, B2) plus the reservation charges (B7).
Whatever the mode, the lines returned sum to exactly that, to the cent.
"""

from collections import defaultdict
from collections.abc import Mapping
from dataclasses import dataclass, field
from decimal import ROUND_HALF_UP, Decimal
from typing import Any

from django.conf import settings
from django.utils.translation import gettext as _

from billing.money import (
    RATE_PLACES,
    SECONDS_PER_HOUR,
    converted_rate,
    gpu_seconds_cost,
    largest_remainder,
    quantize,
)

QUANTITY_PLACES = Decimal("0.000001")
RESIDUAL = "__residual__"

BY_USAGE = "by_usage"
BY_PROJECT = "by_project"
HYBRID = "hybrid"
RESIDUAL_SHARED = "shared"
RESIDUAL_PLATFORM = "platform"

USAGE = "usage"
COMMITTED_SHARE = "committed_share"
RESERVATION = "reservation"
SHARED_RESIDUAL = "shared_residual"
ADJUSTMENT = "adjustment"
CREDIT = "credit"
TIERS_COVERED_BY_COMMITMENT = frozenset({"guaranteed"})
# A platform line's ``why`` for cloud time after billing stopped (billing.statements).
UNBILLED = "unbilled"


@dataclass(frozen=True, order=True)
class UsageKey:
    """What a usage line is per: GPU model, market, tier and the rate captured at launch."""

    gpu_model_id: int
    market: str
    tier: str
    rate: Decimal
    currency: str = ""  # the rate's currency; empty or the billing currency: not converted
    exchange_rate: Decimal = Decimal(1)  # units of ``currency`` per billing unit, at launch
    exchange_rate_id: int = 0


@dataclass
class Line:
    """One computed statement line. ``project_id`` None is the platform's own line."""

    project_id: int | None
    kind: str
    amount: Decimal
    description: str
    gpu_model_id: int | None = None
    market: str = ""
    tier: str = ""
    gpu_seconds: int = 0
    unit_price: Decimal = Decimal("0")
    references: dict[str, Any] = field(default_factory=dict)

    @property
    def quantity(self) -> Decimal:
        """GPU-hours, to six places (the amount is computed from the exact seconds)."""
        return (Decimal(self.gpu_seconds) / SECONDS_PER_HOUR).quantize(
            QUANTITY_PLACES, rounding=ROUND_HALF_UP
        )


@dataclass(frozen=True)
class PoolPeriod:
    """A pool's terms for one period (or the part of it elapsed so far)."""

    gpu_model_id: int
    gpu_model_name: str
    committed_gpus: int  # K
    fixed_cost: Decimal  # F for this period, in cents
    mode: str
    residual: str
    guarantees: Mapping[int, int]  # project id -> G
    elapsed_seconds: int


@dataclass(frozen=True)
class ReservedWindow:
    """A lease in tier ``reserved``: its GPUs for its window's seconds in the period (B7)."""

    reservation_id: int
    project_id: int
    gpu_model_id: int
    gpu_count: int
    market: str
    rate: Decimal
    seconds: int
    currency: str = ""
    exchange_rate: Decimal = Decimal(1)
    exchange_rate_id: int = 0


def effective_price(amount: Decimal, gpu_seconds: int) -> Decimal:
    if not gpu_seconds:
        return Decimal("0")
    return (amount * SECONDS_PER_HOUR / gpu_seconds).quantize(RATE_PLACES, rounding=ROUND_HALF_UP)


def is_covered(pool: PoolPeriod, key: UsageKey) -> bool:
    """Usage is covered by the commitment only when K > 0 and it runs guaranteed (B5);
    usage of a reserved lease is covered by the lease's own reservation charge (B7)."""
    if key.tier == "reserved":
        return True
    return pool.committed_gpus > 0 and key.tier in TIERS_COVERED_BY_COMMITMENT


def _usage_description(pool: PoolPeriod, key: UsageKey) -> str:
    market = key.market.replace("_", "-")
    if key.tier == key.market:  # a spot lease runs in tier spot: say it once
        return _("%(model)s, %(market)s") % {"model": pool.gpu_model_name, "market": market}
    return _("%(model)s, %(market)s, %(tier)s") % {
        "model": pool.gpu_model_name,
        "market": market,
        "tier": key.tier,
    }


def _rate_refs(priced: UsageKey | ReservedWindow) -> dict[str, str]:
    """A converted line's rate, for its explanation and the statement's "Rates used"."""
    if not priced.exchange_rate_id:
        return {}
    return {
        "currency": priced.currency,
        "exchange_rate": str(priced.exchange_rate),
        "exchange_rate_id": str(priced.exchange_rate_id),
    }


def _priced_in(key: UsageKey) -> str:
    if not key.exchange_rate_id:
        return ""
    whole, _dot, fraction = f"{key.rate.normalize():f}".partition(".")
    return _(" (%(currency)s %(rate)s/GPU-h at %(fx)s %(currency)s per %(billing)s)") % {
        "currency": key.currency,
        "rate": f"{whole}.{fraction.ljust(2, '0')}",
        "fx": f"{key.exchange_rate.normalize():f}",
        "billing": settings.PORTAL_CURRENCY,
    }


def _usage_formula(key: UsageKey) -> str:
    if key.exchange_rate_id:
        return "GPU-seconds × rate / 3600 / exchange rate"
    return "GPU-seconds × rate / 3600"


def metered_lines(pool: PoolPeriod, usage: Mapping[int, Mapping[UsageKey, int]]) -> list[Line]:
    """Each project's own usage lines: metered at the captured rate, or 0.00 where covered."""
    lines = []
    for project_id in sorted(usage):
        for key in sorted(usage[project_id]):
            seconds = usage[project_id][key]
            covered = is_covered(pool, key)
            amount = (
                Decimal("0.00")
                if covered
                else quantize(gpu_seconds_cost(seconds, key.rate, key.exchange_rate))
            )
            description = _usage_description(pool, key) + _priced_in(key)
            if covered:
                description = (
                    _("%(line)s (within the reservation)")
                    if key.tier == "reserved"
                    else _("%(line)s (covered by the commitment)")
                ) % {"line": description}
            lines.append(
                Line(
                    project_id=project_id,
                    kind=USAGE,
                    amount=amount,
                    description=description,
                    gpu_model_id=key.gpu_model_id,
                    market=key.market,
                    tier=key.tier,
                    gpu_seconds=seconds,
                    unit_price=Decimal("0")
                    if covered
                    else converted_rate(key.rate, key.exchange_rate),
                    references={
                        "gpu_seconds": seconds,
                        "rate": str(key.rate),
                        "covered": covered,
                        "formula": "0" if covered else _usage_formula(key),
                        **_rate_refs(key),
                    },
                )
            )
    return lines


def reservation_lines(pool: PoolPeriod, windows: list[ReservedWindow]) -> list[Line]:
    """B7: a reserved window is charged whether used or not."""
    lines = []
    for window in windows:
        seconds = window.seconds * window.gpu_count
        amount = quantize(gpu_seconds_cost(seconds, window.rate, window.exchange_rate))
        lines.append(
            Line(
                project_id=window.project_id,
                kind=RESERVATION,
                amount=amount,
                description=_("Reservation #%(id)s: %(n)s× %(model)s, charged whether used or not")
                % {
                    "id": window.reservation_id,
                    "n": window.gpu_count,
                    "model": pool.gpu_model_name,
                },
                gpu_model_id=window.gpu_model_id,
                market=window.market,
                tier="reserved",
                gpu_seconds=seconds,
                unit_price=converted_rate(window.rate, window.exchange_rate),
                references={
                    "reservation_id": window.reservation_id,
                    "gpu_count": window.gpu_count,
                    "window_seconds": window.seconds,
                    "rate": str(window.rate),
                    "formula": "GPUs × window seconds × rate / 3600"
                    + (" / exchange rate" if window.exchange_rate_id else ""),
                    **_rate_refs(window),
                },
            )
        )
    return lines


def _platform_line(
    pool: PoolPeriod, amount: Decimal, why: str, code: str, refs: dict[str, Any]
) -> Line:
    """Overhead no project pays; ``code`` says why in its references (``policy``,
    ``no_burst``, ``no_guarantee``, ``no_usage``), so its name is rendered in the reader's
    language (billing.linewords)."""
    return Line(
        project_id=None,
        kind=SHARED_RESIDUAL,
        amount=amount,
        description=_("%(model)s: platform overhead (%(why)s)")
        % {"model": pool.gpu_model_name, "why": why},
        gpu_model_id=pool.gpu_model_id,
        references={**refs, "why": code},
    )


def _committed_line(
    pool: PoolPeriod, project_id: int, amount: Decimal, guaranteed: int, refs: dict[str, Any]
) -> Line:
    seconds = guaranteed * pool.elapsed_seconds
    return Line(
        project_id=project_id,
        kind=COMMITTED_SHARE,
        amount=amount,
        description=_("%(model)s: share of the committed cost (G = %(g)s)")
        % {"model": pool.gpu_model_name, "g": guaranteed},
        gpu_model_id=pool.gpu_model_id,
        gpu_seconds=seconds,
        unit_price=effective_price(amount, seconds),
        references=refs,
    )


def _split_burst_residual(
    pool: PoolPeriod,
    residual: Decimal,
    usage: Mapping[int, Mapping[UsageKey, int]],
    labels: Mapping[int, str],
    refs: dict[str, Any],
) -> list[Line]:
    burst = {
        project_id: sum(s for key, s in keys.items() if key.tier == "burst")
        for project_id, keys in usage.items()
    }
    burst = {project_id: seconds for project_id, seconds in burst.items() if seconds}
    if pool.residual == RESIDUAL_PLATFORM or not burst:
        if pool.residual == RESIDUAL_PLATFORM:
            return [_platform_line(pool, residual, _("site policy"), "policy", refs)]
        why = _("no burst usage to share it over")
        return [_platform_line(pool, residual, why, "no_burst", refs)]
    parts = largest_remainder(residual, burst, tie_break={p: labels.get(p, str(p)) for p in burst})
    total_burst = sum(burst.values())
    return [
        Line(
            project_id=project_id,
            kind=SHARED_RESIDUAL,
            amount=parts[project_id],
            description=_("%(model)s: unassigned commitment, by burst use")
            % {"model": pool.gpu_model_name},
            gpu_model_id=pool.gpu_model_id,
            tier="burst",
            gpu_seconds=burst[project_id],
            unit_price=effective_price(parts[project_id], burst[project_id]),
            references={
                **refs,
                "burst_gpu_seconds": burst[project_id],
                "total_burst_gpu_seconds": total_burst,
                "formula": "R × burst GPU-seconds / total burst GPU-seconds (largest remainder)",
            },
        )
        for project_id in sorted(parts, key=lambda p: labels.get(p, str(p)))
    ]


def apportion_pool(
    pool: PoolPeriod,
    usage: Mapping[int, Mapping[UsageKey, int]],
    windows: list[ReservedWindow],
    labels: Mapping[int, str],
) -> list[Line]:
    """All lines of one pool for one period, in its mode (B5); they sum to F + M + R exactly.

    ``usage`` maps project id → usage key → GPU-seconds; ``labels`` maps project id → slug
    (the tie-break of every split, B3).
    """
    fixed = pool.fixed_cost
    if quantize(fixed) != fixed:
        raise ValueError("the fixed cost must be whole cents")
    own = metered_lines(pool, usage)
    reserved = reservation_lines(pool, windows)
    lines: list[Line] = []
    base_refs = {
        "F": str(fixed),
        "K": pool.committed_gpus,
        "mode": pool.mode,
    }
    if pool.mode == BY_USAGE:
        return _by_usage(pool, own, labels, base_refs) + reserved
    guarantees = {p: g for p, g in pool.guarantees.items() if g > 0}
    sum_g = sum(guarantees.values())
    if fixed > 0:
        if pool.mode == BY_PROJECT:
            refs = {**base_refs, "sum_G": sum_g, "formula": "F × G / ΣG (largest remainder)"}
            if sum_g == 0:
                lines.append(
                    _platform_line(
                        pool, fixed, _("no project has a guarantee"), "no_guarantee", refs
                    )
                )
            else:
                parts = largest_remainder(fixed, guarantees, tie_break=_labels(labels, guarantees))
                lines += [
                    _committed_line(pool, p, parts[p], guarantees[p], {**refs, "G": guarantees[p]})
                    for p in sorted(parts, key=lambda p: labels.get(p, str(p)))
                ]
        else:
            k = pool.committed_gpus
            refs = {**base_refs, "sum_G": sum_g, "formula": "F × G / K (largest remainder)"}
            if k == 0:
                # No committed GPUs to own a share of: the whole cost is unassigned.
                parts: dict[Any, Decimal] = {RESIDUAL: fixed}
                guarantees = {}
            else:
                weights: dict[Any, int] = dict(guarantees)
                if k > sum_g:
                    weights[RESIDUAL] = k - sum_g
                tie = {**_labels(labels, guarantees), RESIDUAL: "~residual"}
                parts = largest_remainder(fixed, weights, tie_break=tie)
            lines += [
                _committed_line(pool, p, parts[p], guarantees[p], {**refs, "G": guarantees[p]})
                for p in sorted(guarantees, key=lambda p: labels.get(p, str(p)))
            ]
            if parts.get(RESIDUAL):
                residual_refs = {
                    **base_refs,
                    "sum_G": sum_g,
                    "R": str(parts[RESIDUAL]),
                    "formula_R": "R = F × (K − ΣG) / K",
                }
                lines += _split_burst_residual(pool, parts[RESIDUAL], usage, labels, residual_refs)
    return lines + own + reserved


def _labels(labels: Mapping[int, str], keys: Mapping[int, Any]) -> dict[int, str]:
    return {p: labels.get(p, str(p)) for p in keys}


def _by_usage(
    pool: PoolPeriod, own: list[Line], labels: Mapping[int, str], refs: dict[str, Any]
) -> list[Line]:
    """F + M split by GPU-seconds used, all tiers: first between projects, then within each
    project between its usage lines, both by largest remainder, so both levels sum exactly."""
    metered = sum((line.amount for line in own), Decimal("0.00"))
    pot = pool.fixed_cost + metered
    per_project: dict[int, int] = defaultdict(int)
    # Reserved leases' usage is paid by their reservation lines (B7), not from the pot.
    shared = [line for line in own if line.tier != "reserved"]
    for line in shared:
        per_project[line.project_id] += line.gpu_seconds  # type: ignore[index]
    used = {p: s for p, s in per_project.items() if s}
    refs = {
        **refs,
        "M": str(metered),
        "pot": str(pot),
        "formula": "(F + M) × project GPU-seconds / all GPU-seconds (largest remainder)",
    }
    if not used:
        if pot:
            return [_platform_line(pool, pot, _("no usage to split it over"), "no_usage", refs)]
        return []
    shares = largest_remainder(pot, used, tie_break=_labels(labels, used))
    lines = []
    total_seconds = sum(used.values())
    for project_id in sorted(used, key=lambda p: labels.get(p, str(p))):
        mine = [line for line in shared if line.project_id == project_id and line.gpu_seconds]
        parts = largest_remainder(
            shares[project_id],
            {index: line.gpu_seconds for index, line in enumerate(mine)},
            tie_break={index: f"{index:06d}" for index in range(len(mine))},
        )
        for index, line in enumerate(mine):
            line.amount = parts[index]
            line.unit_price = effective_price(line.amount, line.gpu_seconds)
            line.references = {
                **line.references,
                **refs,
                "project_gpu_seconds": used[project_id],
                "all_gpu_seconds": total_seconds,
                "project_share": str(shares[project_id]),
            }
            lines.append(line)
    return lines + [line for line in own if line.tier == "reserved"]
