"""Reclaim rules: which running leases give their GPUs back, and in what order (Q6, Q7, R4).

Pure functions over plain numbers; ``reclaim.py`` reads the candidates under the
pool lock, calls ``choose_victims`` and writes the notices.
"""

from dataclasses import dataclass
from datetime import datetime
from typing import Any

from rental.models import Market, Priority, Tier

# Lower number: more important. "Lowest priority first" sorts by the highest rank first.
PRIORITY_RANK = {Priority.PRODUCTION: 0, Priority.EXPERIMENT: 1, Priority.LEARNING: 2}

# Who may take GPUs back (the tier the request would run in).
GUARANTEED = "guaranteed"  # Q6: spot, other projects' burst, own lower-priority leases
BURST = "burst"  # Q7: spot only
RESERVED = "reserved"  # R4: spot, then other projects' burst, then the project's own burst


@dataclass(frozen=True)
class Candidate:
    """A running lease that might be a victim."""

    id: int
    project_id: int
    gpus: int
    tier: str
    market: str
    priority: str
    started: datetime


def is_spot(lease: Any) -> bool:
    """Q6's first group: a spot lease, by its market or its tier (a ``Candidate``, or
    any lease with the two)."""
    return lease.market == Market.SPOT or lease.tier == Tier.SPOT


def reclaim_order(
    candidates: list[Candidate], *, project_id: int, priority: str, mode: str
) -> list[Candidate]:
    """The leases that may be taken, in the order they are taken.

    1. spot leases (any project), lowest priority first, then newest;
    2. other projects' burst leases, lowest priority first, then newest;
    3. (guaranteed requests only) the project's own non-production leases of a
       lower priority than the request, lowest priority first, then newest;
       (a booking starting, R4) the project's own burst leases, whatever their
       priority: GPUs it borrowed beside the GPUs it booked.
    Other projects' guaranteed and reserved leases are never candidates (Q1, Q6).
    """

    def newest_lowest(lease: Candidate) -> tuple:
        return (-PRIORITY_RANK[lease.priority], -lease.started.timestamp(), -lease.id)

    spot = [c for c in candidates if is_spot(c)]
    rest = [c for c in candidates if not is_spot(c)]
    order = sorted(spot, key=newest_lowest)
    if mode == BURST:
        return order
    order += sorted(
        (c for c in rest if c.project_id != project_id and c.tier == Tier.BURST),
        key=newest_lowest,
    )
    if mode == RESERVED:
        order += sorted(
            (c for c in rest if c.project_id == project_id and c.tier == Tier.BURST),
            key=newest_lowest,
        )
    if mode == GUARANTEED:
        order += sorted(
            (
                c
                for c in rest
                if c.project_id == project_id
                and c.priority != Priority.PRODUCTION
                and PRIORITY_RANK[c.priority] > PRIORITY_RANK[priority]
                and c.tier in (Tier.GUARANTEED, Tier.BURST)
            ),
            key=newest_lowest,
        )
    return order


def choose_victims(
    candidates: list[Candidate],
    *,
    need: int,
    free: int,
    project_id: int,
    priority: str,
    mode: str,
    guarantee_short: int = 0,
    ceiling_short: int = 0,
) -> list[Candidate] | None:
    """Victims that free ``need − free`` GPUs of the pool and, for a production request
    over its guarantee, ``guarantee_short`` GPUs of its own project's guarantee and
    ``ceiling_short`` of the GPUs its project counts against L (every tier but spot).

    Greedy in Q6 order until all three are covered, then every victim that is not needed
    is dropped (latest taken first). None when even all the candidates would not make
    room; an empty list when there is room already."""
    missing = need - free

    def gives(lease: Candidate) -> tuple[int, int, int]:
        own = lease.project_id == project_id
        counted = own and not is_spot(lease)
        return (
            lease.gpus,
            lease.gpus if own and lease.tier == Tier.GUARANTEED else 0,
            lease.gpus if counted else 0,
        )

    wanted = (missing, guarantee_short, ceiling_short)

    def covered(freed: tuple[int, int, int]) -> bool:
        return all(have >= want for have, want in zip(freed, wanted, strict=True))

    def plus(freed: tuple[int, int, int], lease: Candidate, sign: int = 1) -> tuple[int, int, int]:
        return tuple(have + sign * got for have, got in zip(freed, gives(lease), strict=True))

    if covered((0, 0, 0)):
        return []
    chosen: list[Candidate] = []
    freed = (0, 0, 0)
    for candidate in reclaim_order(candidates, project_id=project_id, priority=priority, mode=mode):
        if covered(freed):
            break
        chosen.append(candidate)
        freed = plus(freed, candidate)
    if not covered(freed):
        return None
    # Latest taken first, each dropped when the rest still cover; marked by place, so the
    # pass is linear however many were taken.
    kept = [True] * len(chosen)
    for place in range(len(chosen) - 1, -1, -1):
        without = plus(freed, chosen[place], -1)
        if covered(without):
            kept[place] = False
            freed = without
    return [candidate for candidate, keep in zip(chosen, kept, strict=True) if keep]
