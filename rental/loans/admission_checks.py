"""Admission checks: the hook through which billing's budget cap (BU3) and any other
site check refuse a lease, without rental importing billing.

``PORTAL_ADMISSION_CHECKS`` names callables by dotted path. Each is called with keyword
arguments ``project``, ``gpu_model``, ``gpu_count``, ``tier``, ``market``,
``starts_at``, ``ends_at``, ``is_reservation`` and ``now`` and returns None to allow or
``(reason_code, message)`` or ``(reason_code, message, figures)`` to refuse; the figures
(a dict of numbers) reach the API's 409 answer. The message is best a phrase
(``portal.phrases``): a lease held back keeps it as its reason, said in each reader's
language.

The checks read other tables (budgets, spend), never the pool's standing, so a
submission asks them *before* it takes the pool lock, once for each tier the request can
end up in (``possible_tiers``), and applies the answer for the tier it gets under the
lock. The queue asks them again when it admits a waiting lease later.
"""

from collections.abc import Callable, Iterable
from dataclasses import dataclass
from datetime import datetime
from functools import cache
from typing import Any

from django.conf import settings
from django.utils.module_loading import import_string

from portal.errors import DomainError
from portal.phrases import Joined, Phrase, Text
from rental.loans.admission_rules import Decision
from rental.models import Market, Reservation, Tier

Status = Reservation.Status

Refusal = tuple[str, Text, dict[str, Any]]  # code, message, figures


@cache
def _load_checks(paths: tuple[str, ...]) -> tuple[Callable[..., object], ...]:
    return tuple(import_string(path) for path in paths)


def admission_checks() -> tuple[Callable[..., object], ...]:
    """The callables named in ``PORTAL_ADMISSION_CHECKS`` (dotted paths)."""
    return _load_checks(tuple(getattr(settings, "PORTAL_ADMISSION_CHECKS", ())))


def possible_tiers(*, market: str, booking: bool, over_limits: bool) -> tuple[str, ...]:
    """Every tier a submission can be decided into (Q2, R2): a request beyond the
    auto-approve limits or the ceiling waits for its manager in tier burst."""
    if over_limits:
        return (Tier.BURST,)
    if booking:
        return (Tier.RESERVED, Tier.BURST)
    if market == Market.SPOT:
        return (Tier.SPOT,)
    return (Tier.GUARANTEED, Tier.BURST)


@dataclass(frozen=True)
class Asked:
    """What a check is told about a request, apart from its tier."""

    project: Any
    gpu_model: Any
    gpu_count: int
    market: str
    starts_at: datetime
    ends_at: datetime
    is_reservation: bool
    now: datetime


def first_refusal(asked: Asked, tier: str) -> Refusal | None:
    """Ask every configured check in order; the first refusal, or None."""
    for check in admission_checks():
        refusal = check(
            project=asked.project,
            gpu_model=asked.gpu_model,
            gpu_count=asked.gpu_count,
            tier=str(tier),
            market=str(asked.market),
            starts_at=asked.starts_at,
            ends_at=asked.ends_at,
            is_reservation=asked.is_reservation,
            now=asked.now,
        )
        if refusal is not None:
            code, message, *figures = refusal  # type: ignore[misc]
            kept = message if isinstance(message, Phrase | Joined) else str(message)
            return str(code), kept, dict(figures[0]) if figures else {}
    return None


def refusals_by_tier(asked: Asked, tiers: Iterable[str]) -> dict[str, Refusal | None]:
    """``first_refusal`` for each of ``tiers``."""
    return {str(tier): first_refusal(asked, tier) for tier in tiers}


# A queued lease that a check holds back carries the check's code behind this prefix, so
# its page can say what would let it start (the check's own message is the reason).
HELD_PREFIX = "check:"


def held_code(code: str) -> str:
    return f"{HELD_PREFIX}{code}"[:40]


def is_held(status_code: str) -> bool:
    return status_code.startswith(HELD_PREFIX)


def asked_about(lease: Any, *, now: datetime) -> Asked:
    """What the checks are told when a waiting lease would start now: the same request,
    from now on for the time it asked."""
    return Asked(
        project=lease.project,
        gpu_model=lease.gpu_model,
        gpu_count=lease.gpu_count,
        market=lease.market,
        starts_at=now,
        ends_at=now + (lease.end - lease.start),
        is_reservation=lease.is_reservation,
        now=now,
    )


def hold(lease: Any, decision: Decision, *, now: datetime) -> Decision | None:
    """Ask the checks again before a waiting lease starts or takes GPUs back (the queue,
    a manager's approval): they were asked at submission, and the budget may have run out
    since. A refusal is a decision to keep the lease queued, with the check's message as
    its reason; None lets ``decision`` stand. A booking waiting at its start is not asked
    again: it was admitted when it was booked and its window is charged whether used or
    not (B7)."""
    takes_effect = decision.status == Status.PROVISIONING or (
        decision.status == Status.QUEUED and decision.tier != Tier.SPOT
    )
    if lease.is_reservation or not takes_effect:
        return None
    refusal = first_refusal(asked_about(lease, now=now), decision.tier)
    if refusal is None:
        return None
    code, message, _figures = refusal
    return Decision(status=Status.QUEUED, tier=decision.tier, code=held_code(code), message=message)


def raise_refusal(refusal: Refusal | None) -> None:
    """A refusal is a DomainError (409) carrying the check's code, message and figures."""
    if refusal is not None:
        code, message, figures = refusal
        raise DomainError(message, code=code, figures=figures)
