"""Queue rules: the order queued leases are admitted in (Q5). Pure, over plain numbers."""

from dataclasses import dataclass
from datetime import datetime
from decimal import Decimal

from rental.loans.reclaim_rules import PRIORITY_RANK


@dataclass(frozen=True)
class Waiting:
    id: int
    guaranteed_eligible: bool
    priority: str
    over_guarantee: int  # (U − G)⁺ of its project
    weight: Decimal
    submitted_at: datetime


def queue_key(lease: Waiting) -> tuple:
    """Q5: guaranteed-eligible first, then priority (production > experiment > learning),
    then the lowest (U − G)⁺ / w, then the oldest submission (then the lowest id)."""
    return (
        not lease.guaranteed_eligible,
        PRIORITY_RANK[lease.priority],
        Decimal(lease.over_guarantee) / lease.weight,
        lease.submitted_at,
        lease.id,
    )


def queue_order(waiting: list[Waiting]) -> list[Waiting]:
    return sorted(waiting, key=queue_key)
