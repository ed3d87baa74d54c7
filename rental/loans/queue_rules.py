"""Queue rules: the order queued leases are admitted in (Q5), and a fair pool's decayed
usage (Q5, fair share). Pure, over plain numbers."""

import math
from collections.abc import Iterable
from dataclasses import dataclass
from datetime import datetime, timedelta
from decimal import Decimal

from rental.loans.reclaim_rules import PRIORITY_RANK

# A fair pool reads usage over this many half-lives back. A GPU-second older than that
# weighs less than 2^-10 ≈ 0.098 % of one used now; for a project that used the pool at
# a steady rate, what is left out is 2^-10 of its full figure, under 0.1 %.
WINDOW_HALF_LIVES = 10
# Figures are compared to the millionth of a GPU-hour per share, so that two projects
# with the same history (summed in another order) tie and go by submission.
USAGE_PLACES = Decimal("0.000001")


@dataclass(frozen=True)
class Waiting:
    id: int
    guaranteed_eligible: bool
    priority: str
    over_guarantee: int  # (U − G)⁺ of its project
    weight: Decimal
    submitted_at: datetime
    # A fair pool's decayed GPU-hours per share of its project (``usage_per_share``);
    # None in a pool without fair share.
    fair_usage: Decimal | None = None
    project_id: int = 0


def queue_key(lease: Waiting) -> tuple:
    """Q5: guaranteed-eligible first, then priority (production > experiment > learning),
    then the lowest (U − G)⁺ / w, then the oldest submission (then the lowest id). In a
    fair pool, leases beyond a guarantee (burst and spot) of one priority go by the lowest
    decayed usage per share instead of (U − G)⁺ / w."""
    fair = lease.fair_usage is not None and not lease.guaranteed_eligible
    return (
        not lease.guaranteed_eligible,
        PRIORITY_RANK[lease.priority],
        lease.fair_usage if fair else Decimal(lease.over_guarantee) / lease.weight,
        lease.submitted_at,
        lease.id,
    )


def queue_order(waiting: list[Waiting]) -> list[Waiting]:
    """``waiting`` in the order Q5 admits them (a fair pool's leases carry ``fair_usage``)."""
    return sorted(waiting, key=queue_key)


# Why the first of two leases, next to each other in Q5 order, is ahead of the second.
AHEAD_GUARANTEE = "guarantee"  # it is within its project's guarantee, the other is not
AHEAD_PRIORITY = "priority"  # a higher priority
AHEAD_FAIR_SHARE = "fair_share"  # the same priority, its project used the pool less
AHEAD_OVER_GUARANTEE = "over_guarantee"  # the same priority, its project less over G
AHEAD_EARLIER = "earlier"  # the same priority and figure: sent earlier


def ahead_because(first: Waiting, second: Waiting) -> str:
    """Which step of ``queue_key`` puts ``first`` ahead of ``second`` (one AHEAD_ code)."""
    one, other = queue_key(first), queue_key(second)
    if one[0] != other[0]:
        return AHEAD_GUARANTEE
    if one[1] != other[1]:
        return AHEAD_PRIORITY
    if one[2] != other[2]:
        fair = first.fair_usage is not None and not first.guaranteed_eligible
        return AHEAD_FAIR_SHARE if fair else AHEAD_OVER_GUARANTEE
    return AHEAD_EARLIER


@dataclass(frozen=True)
class Run:
    """One usage run of a project in the pool: ``gpus`` from ``start`` to ``end`` (None:
    still running)."""

    gpus: int
    start: datetime
    end: datetime | None


def window_start(now: datetime, half_life: timedelta) -> datetime:
    """The earliest second a fair pool's usage is read from (``WINDOW_HALF_LIVES``)."""
    return now - half_life * WINDOW_HALF_LIVES


def decay_integral(start: datetime, end: datetime, *, now: datetime, half_life: timedelta) -> float:
    """∫ 2^(−(now − t)/h) dt over [start, end) clipped to the window and to ``now``, in
    seconds: h / ln 2 × (2^(−(now − end)/h) − 2^(−(now − start)/h)), exactly (closed form)."""
    h = half_life.total_seconds()
    start = max(start, window_start(now, half_life))
    end = min(end, now)
    if end <= start:
        return 0.0
    return (
        h
        / math.log(2)
        * (2 ** (-(now - end).total_seconds() / h) - 2 ** (-(now - start).total_seconds() / h))
    )


def decayed_gpu_seconds(runs: Iterable[Run], *, now: datetime, half_life: timedelta) -> float:
    """A project's decayed usage: each run's GPUs × its decay integral, summed."""
    return sum(
        run.gpus * decay_integral(run.start, run.end or now, now=now, half_life=half_life)
        for run in runs
    )


def fair_share_of(guaranteed: int) -> int:
    """A project's share of a fair pool: its guarantee G, or 1 GPU when G is 0 (a project
    without a guarantee counts as one with a guarantee of one GPU)."""
    return guaranteed if guaranteed > 0 else 1


def usage_per_share(gpu_seconds: float, *, guaranteed: int) -> Decimal:
    """Decayed GPU-seconds as the figure Q5 compares: GPU-hours per share, to the
    millionth."""
    hours = Decimal(repr(gpu_seconds / 3600 / fair_share_of(guaranteed)))
    return hours.quantize(USAGE_PLACES)
