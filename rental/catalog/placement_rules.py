"""Which offering of a pool a lease goes to first (pure: no database).

A pool may sell its GPU model through several drivers: the company's own servers (a
provider account of driver ``ssh``) and cloud accounts. The pool's admin sets the order:

- ``own_first`` (the default): own servers that have room, then the cheapest cloud
  offering that fits;
- ``cheapest``: the cheapest offering first, whatever its driver.

Before either, the provider accounts the admin lists are tried in the listed order. Own
servers known to be full (no host with the GPUs free, by the portal's own count) go after
everything else: they are tried last, in case the count is behind the hosts. The same
order chooses a lease's offering when it is asked for and the places its launch tries
(rental.fleet.failover), so a lease does not start on one order and fail over on another.
"""

from collections.abc import Iterable
from dataclasses import dataclass

OWN_DRIVER = "ssh"
OWN_FIRST = "own_first"
CHEAPEST = "cheapest"


@dataclass(frozen=True)
class PlacementOrder:
    """A pool's order: ``order`` (``own_first`` | ``cheapest``) after ``accounts``."""

    order: str = OWN_FIRST
    accounts: tuple[int, ...] = ()

    def account_rank(self, account_id: int) -> int:
        """The account's place in the admin's list; after all of them when not listed."""
        if account_id in self.accounts:
            return self.accounts.index(account_id)
        return len(self.accounts)

    def rank(self, *, account_id: int, own: bool) -> tuple[int, int]:
        """Lower goes first: the admin's accounts in their order, then (``own_first``)
        own servers before clouds."""
        own_rank = 0 if own or self.order != OWN_FIRST else 1
        return (self.account_rank(account_id), own_rank)

    def key(self, *, account_id: int, own: bool, has_room: bool) -> tuple:
        """Lower goes first: offerings with room before own servers known to be full,
        then ``rank``. Equal keys keep the order they came in (cheapest first)."""
        return (not has_room, *self.rank(account_id=account_id, own=own))


def instances_fit(free: Iterable[int], *, gpus_per_instance: int, instances: int) -> bool:
    """Whether ``instances`` instances of ``gpus_per_instance`` GPUs each fit on hosts with
    ``free`` GPUs each (an instance runs on one host)."""
    if gpus_per_instance < 1:
        return False
    return sum(count // gpus_per_instance for count in free) >= instances


def placement_order(order: str, accounts: object) -> PlacementOrder:
    """A pool's stored fields as a ``PlacementOrder`` (ids that are not whole numbers are
    left out: the admin form refuses them, this keeps an old row harmless)."""
    listed = accounts if isinstance(accounts, list) else []
    ids = tuple(a for a in listed if isinstance(a, int) and not isinstance(a, bool))
    known = order if order in (OWN_FIRST, CHEAPEST) else OWN_FIRST
    return PlacementOrder(order=known, accounts=ids)
