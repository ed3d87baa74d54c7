"""Where and when to try a launch next (L2): pure functions of the attempts so far.

The order of places is fixed when the launch starts: the chosen offering in each of its
zones, then (if the engineer allows other instance types) the other offerings of the same
GPU model and GPUs per instance in the pool's placement order (rental.catalog.
placement_rules: the admin's accounts first, then own servers before clouds; a pool set
to "cheapest" then goes by price alone), and among equals in the same account and
region, then the same instance type in other enabled regions and accounts, then other
types there. An own
server's zones are its hosts: hosts with the GPUs free come first (the fullest that fits
first, so larger holes stay whole), and hosts known to be full come after every other
place, tried last in case the portal's count is behind the hosts. Capacity moves to the
next place at once; a full round without luck waits a jittered backoff; a quota error
skips the rest of that account and region; throttling and transient errors retry the
same place after a backoff; bad requests and bad credentials end the launch at once.
"""

import hashlib
from dataclasses import dataclass
from datetime import datetime

from rental.catalog.placement_rules import CHEAPEST, PlacementOrder
from rental.fleet.retry import retry_countdown
from rental.providers.base import ProviderErrorKind

FATAL = frozenset({ProviderErrorKind.AUTH, ProviderErrorKind.INVALID, ProviderErrorKind.NOT_FOUND})
SAME_PLACE = frozenset({ProviderErrorKind.THROTTLED, ProviderErrorKind.TRANSIENT})
DEFAULT_ORDER = PlacementOrder()


@dataclass(frozen=True)
class OfferingView:
    """An offering as the decision sees it."""

    offering_id: int
    account_id: int
    region: str
    instance_type: str
    zones: tuple[str, ...]
    rate: object  # anything ordered (a Decimal rate per GPU-hour)
    own: bool = False  # the company's own servers (driver ``ssh``): its zones are hosts
    free: tuple[int, ...] = ()  # own: free GPUs on each zone's host, by the portal's count


@dataclass(frozen=True)
class Place:
    """One place to launch: an offering in a zone (``""``: the cloud chooses)."""

    offering_id: int
    account_id: int
    region: str
    instance_type: str
    zone: str


@dataclass(frozen=True)
class Attempt:
    place: Place
    kind: str  # a ProviderErrorKind value; "" when the cloud accepted the launch
    at: datetime


@dataclass(frozen=True)
class Policy:
    max_attempts: int
    timeout_seconds: int


@dataclass(frozen=True)
class TryAt:
    """Launch at ``place`` after ``wait`` seconds."""

    place: Place
    wait: int


@dataclass(frozen=True)
class GiveUp:
    """Stop: ``reason`` is ``permanent`` (the cloud refused for good), ``exhausted`` (the
    attempts are spent) or ``timeout`` (the provisioning timeout passed)."""

    reason: str


def places_in_order(
    *,
    chosen: OfferingView,
    others: list[OfferingView],
    allow_other_types: bool,
    order: PlacementOrder = DEFAULT_ORDER,
    gpus: int = 0,
) -> list[Place]:
    """Every place a launch may try, in the order it tries them; ``gpus``: the GPUs of
    the instance (an own server's host has room when that many are free on it)."""

    def rank(view: OfferingView) -> tuple:
        elsewhere = (view.account_id, view.region) != (chosen.account_id, chosen.region)
        other_type = view.instance_type != chosen.instance_type
        nearby = (elsewhere, other_type)
        # "cheapest": by price alone, whatever the driver; else the nearest first.
        by_price = (view.rate, *nearby) if order.order == CHEAPEST else (*nearby, view.rate)
        return (
            view.offering_id != chosen.offering_id,
            *order.rank(account_id=view.account_id, own=view.own),
            *by_price,
        )

    views = [chosen] + [
        view
        for view in others
        if view.offering_id != chosen.offering_id
        and (allow_other_types or view.instance_type == chosen.instance_type)
    ]
    ranked: list[tuple[tuple, Place]] = []
    for view in views:
        for index, zone in enumerate(view.zones or ("",)):
            free = view.free[index] if view.own and index < len(view.free) else None
            full = view.own and (free is None or free < gpus)
            # Within an own offering, the fullest host that fits goes first.
            packing = free if view.own and free is not None else 0
            place = Place(view.offering_id, view.account_id, view.region, view.instance_type, zone)
            ranked.append(((full, rank(view), packing if not full else 0, index), place))
    return [place for _key, place in sorted(ranked, key=lambda item: item[0])]


def next_try(
    *,
    places: list[Place],
    attempts: list[Attempt],
    policy: Policy,
    started_at: datetime,
    now: datetime,
    jitter: float,
) -> TryAt | GiveUp:
    """What to do after ``attempts`` (oldest first, all failed)."""
    if attempts and attempts[-1].kind in FATAL:
        return GiveUp("permanent")
    if (now - started_at).total_seconds() >= policy.timeout_seconds:
        return GiveUp("timeout")
    if len(attempts) >= policy.max_attempts:
        return GiveUp("exhausted")
    if not places:
        return GiveUp("exhausted")
    if not attempts:
        return TryAt(places[0], 0)
    last = attempts[-1]
    here = places.index(last.place) if last.place in places else -1
    if last.kind in SAME_PLACE:
        streak = 0
        for attempt in reversed(attempts):
            if attempt.kind not in SAME_PLACE:
                break
            streak += 1
        return TryAt(places[max(here, 0)], retry_countdown(streak - 1, jitter=jitter))
    skip = (
        (last.place.account_id, last.place.region) if last.kind == ProviderErrorKind.QUOTA else None
    )
    for index in range(here + 1, len(places)):
        if skip is None or (places[index].account_id, places[index].region) != skip:
            return TryAt(places[index], 0)
    # A full round without luck: start again from the first place after a backoff.
    rounds = sum(1 for attempt in attempts if attempt.place == places[0])
    return TryAt(places[0], retry_countdown(max(rounds - 1, 0), jitter=jitter))


def failure_summary(*, attempts: list[Attempt], started_at: datetime, now: datetime) -> dict:
    """The figures a failure message is made of: tries, zones, types, places, the seconds
    they took, the kind most tries ended with."""
    kinds = [attempt.kind for attempt in attempts if attempt.kind]
    return {
        "tries": len(attempts),
        "zones": len({(a.place.region, a.place.zone) for a in attempts}),
        "types": len({a.place.instance_type for a in attempts}),
        "places": len({(a.place.account_id, a.place.region) for a in attempts}),
        "seconds": max(0, round((now - started_at).total_seconds())),
        "kind": max(set(kinds), key=kinds.count) if kinds else "",
    }


# Outcomes after which the cloud may have created an instance: accepted, or no answer.
UNCERTAIN = frozenset({"", ProviderErrorKind.TRANSIENT.value})


def attempt_number(*, attempts: list[Attempt], place: Place) -> int:
    """The number of the call about to be made at ``place`` after ``attempts``: a new one
    (its index), unless an earlier call at the same place may have created the instance,
    whose number it takes again. A redelivery of the same call (a worker died before
    recording it) sees the same attempts, so it gets the same number."""
    for index, attempt in enumerate(attempts):
        if attempt.place == place and attempt.kind in UNCERTAIN:
            return attempt_number(attempts=attempts[:index], place=place)
    return len(attempts)


def client_token(idempotency_key: str, number: int) -> str:
    """The cloud request token of call ``number`` of the instance keyed ``idempotency_key``.

    EC2 ties a ClientToken to its first request's parameters, so a call at another place
    needs its own token, while the same call repeated (a lost answer, a dead worker) must
    reuse it so the cloud returns the instance it created rather than a second one. 64
    hex characters (EC2's limit), the same for the same key and number on every worker."""
    return hashlib.sha256(f"{idempotency_key}#{number}".encode()).hexdigest()[:64]


def uncertain_places(attempts: list[Attempt]) -> list[Place]:
    """Where an earlier call may have created the instance (once each, oldest first): a
    launch about to go elsewhere looks there first, by the instance's tag."""
    return list(dict.fromkeys(a.place for a in attempts if a.kind in UNCERTAIN))
