"""The pool as the expected-start play holds it while it plays: its leases by where they
stand, and the sums the loan rules read kept as leases come and go, so that a step of the
play costs what changes in it, not the size of the pool. Pure, over plain numbers.

Per project: GPUs used in the guarantee (Ug) and non-spot (U), its own guaranteed GPUs a
production lease may take back, and what it has to give back by priority. For the whole
pool: GPUs running, under notice and claimed; the reclaim candidates (running, not under
notice) as Q6 orders them, spot and burst apart; the running leases' ends and notices in a
heap. ``touched`` collects the projects whose figures changed, for the play to look at
again; ``arrived`` the leases that joined the queue. (``Lease`` and ``Quota``: a lease and
a quota as the play sees them.)
"""

import heapq
from bisect import bisect_left, insort
from collections import defaultdict
from dataclasses import dataclass, replace
from datetime import datetime, timedelta
from decimal import Decimal

from rental.loans.queue_rules import Waiting
from rental.loans.reclaim_rules import BURST, PRIORITY_RANK, RESERVED, is_spot
from rental.models import Priority, Tier


@dataclass(frozen=True)
class Quota:
    guaranteed: int  # G
    ceiling: int  # L
    weight: Decimal = Decimal(1)  # w


@dataclass(frozen=True)
class Lease:
    """One lease of the pool as the play sees it. ``start``/``end``: its window (running:
    as it runs; claiming: from when its notice is over; a booking: as booked); a queued
    lease runs ``length`` from when it is admitted (a booking keeps its ``end``)."""

    id: int
    project_id: int
    gpus: int
    tier: str
    market: str
    priority: str
    start: datetime
    end: datetime
    length: timedelta = timedelta(0)
    notice_due: datetime | None = None  # a victim: ends then
    claim_due: datetime | None = None  # a claim: starts then
    booking: bool = False
    approved: bool = False
    held: bool = False  # an admission check holds it: the play never starts it
    requeue: bool = False  # queued again when preempted (Q8)
    submitted_at: datetime | None = None
    waiting: Waiting | None = None  # a queued lease: its Q5 key's figures


KEPT_TIERS = (Tier.GUARANTEED, Tier.RESERVED)
OWN_PRIORITIES = (Priority.LEARNING, Priority.EXPERIMENT)


def victim_order(lease: Lease) -> tuple:
    """``reclaim_rules.reclaim_order``'s order inside a group: lowest priority, newest."""
    return (-PRIORITY_RANK[lease.priority], -lease.start.timestamp(), -lease.id)


class PoolState:
    """Running, claiming, booked and queued leases with their sums kept as they change."""

    def __init__(self, capacity: int) -> None:
        self.capacity = capacity
        self.running: dict[int, Lease] = {}
        self.claims: dict[int, Lease] = {}
        self.scheduled: list[Lease] = []  # bookings not begun, by (start, id)
        self.queued: dict[int, Lease] = {}
        self.queued_of: dict[int, set[int]] = defaultdict(set)
        self.running_gpus = 0
        self.noticed_gpus = 0
        self.claimed_gpus = 0
        self.used_guaranteed: dict[int, int] = defaultdict(int)  # Ug: running and claims
        self.used: dict[int, int] = defaultdict(int)  # U: non-spot, running and claims
        self.own: dict[int, int] = defaultdict(int)  # guaranteed, L/E, not under notice
        self.mine: dict[int, dict[int, Lease]] = defaultdict(dict)  # running and claims
        # Reclaim candidates: running, not under notice.
        self.spot_gpus = 0
        self.spot_guaranteed: dict[int, int] = defaultdict(int)  # spot, guaranteed tier
        self.spot_order: list[tuple] = []  # (victim_order, id)
        self.burst_gpus = 0
        self.burst_of: dict[int, int] = defaultdict(int)  # non-spot burst per project
        self.burst_order: list[tuple] = []
        # Non-spot guaranteed or burst, not production, per project and priority:
        # [GPUs, of them guaranteed].
        self.lower: dict[tuple[int, str], list[int]] = defaultdict(lambda: [0, 0])
        self.promotable: dict[int, dict[int, Lease]] = defaultdict(dict)  # burst, no notice
        self.bookings: dict[int, Lease] = {}  # bookings not over, wherever they stand
        self.booked_projects: dict[int, int] = defaultdict(int)
        self.kept: dict[int, Lease] = {}  # kept leases of E(t): running and claims
        self.ends: list[tuple[datetime, int]] = []  # running leases' ends and notices
        self.touched: set[int] = set()
        self.arrived: list[int] = []

    # --- Sums ------------------------------------------------------------------------

    def free(self) -> int:
        """C − GPUs held (running, under notice, claimed beyond what notices free)."""
        held = self.running_gpus + max(self.claimed_gpus - self.noticed_gpus, 0)
        return self.capacity - held

    def _booking(self, lease: Lease, sign: int) -> None:
        if not lease.booking:
            return
        if sign > 0:
            self.bookings[lease.id] = lease
        else:
            self.bookings.pop(lease.id, None)
        self.booked_projects[lease.project_id] += sign
        if not self.booked_projects[lease.project_id]:
            del self.booked_projects[lease.project_id]

    def _holding(self, lease: Lease, sign: int) -> None:
        """What a running or claiming lease adds to its project's figures."""
        project = lease.project_id
        self.touched.add(project)
        if lease.tier == Tier.GUARANTEED:
            self.used_guaranteed[project] += sign * lease.gpus
        if lease.tier != Tier.SPOT:
            self.used[project] += sign * lease.gpus
        if sign > 0:
            self.mine[project][lease.id] = lease
        else:
            del self.mine[project][lease.id]
        if not lease.booking and lease.tier in KEPT_TIERS and lease.notice_due is None:
            if sign > 0:
                self.kept[lease.id] = lease
            else:
                del self.kept[lease.id]
        self._booking(lease, sign)

    def _runs(self, lease: Lease, sign: int) -> None:
        gpus = sign * lease.gpus
        self.running_gpus += gpus
        self._holding(lease, sign)
        if lease.notice_due is not None:
            self.noticed_gpus += gpus
            return
        project = lease.project_id
        if lease.tier == Tier.GUARANTEED and lease.priority in OWN_PRIORITIES:
            self.own[project] += gpus
        if lease.tier == Tier.BURST:
            if sign > 0:
                self.promotable[project][lease.id] = lease
            else:
                del self.promotable[project][lease.id]
        entry = (victim_order(lease), lease.id)
        if is_spot(lease):
            self.spot_gpus += gpus
            if lease.tier == Tier.GUARANTEED:
                self.spot_guaranteed[project] += gpus
            _sorted(self.spot_order, entry, sign)
            return
        if lease.tier == Tier.BURST:
            self.burst_gpus += gpus
            self.burst_of[project] += gpus
            _sorted(self.burst_order, entry, sign)
        if lease.priority != Priority.PRODUCTION and lease.tier in (Tier.GUARANTEED, Tier.BURST):
            lower = self.lower[(project, lease.priority)]
            lower[0] += gpus
            if lease.tier == Tier.GUARANTEED:
                lower[1] += gpus

    # --- Moves -----------------------------------------------------------------------

    def run(self, lease: Lease) -> None:
        self.running[lease.id] = lease
        self._runs(lease, 1)
        heapq.heappush(self.ends, (lease.end, lease.id))
        if lease.notice_due is not None:
            heapq.heappush(self.ends, (lease.notice_due, lease.id))

    def stop(self, lease_id: int) -> Lease:
        lease = self.running.pop(lease_id)
        self._runs(lease, -1)
        return lease

    def change(self, lease_id: int, **fields) -> None:
        """A running lease told to go (``notice_due``) or promoted (``tier``)."""
        self.run(replace(self.stop(lease_id), **fields))

    def claim(self, lease: Lease) -> None:
        self.claims[lease.id] = lease
        self.claimed_gpus += lease.gpus
        self._holding(lease, 1)

    def unclaim(self, lease_id: int) -> Lease:
        lease = self.claims.pop(lease_id)
        self.claimed_gpus -= lease.gpus
        self._holding(lease, -1)
        return lease

    def schedule(self, lease: Lease) -> None:
        insort(self.scheduled, lease, key=lambda b: (b.start, b.id))
        self._booking(lease, 1)

    def unschedule(self, lease: Lease) -> None:
        self.scheduled.remove(lease)
        self._booking(lease, -1)

    def queue(self, lease: Lease) -> None:
        self.queued[lease.id] = lease
        self.queued_of[lease.project_id].add(lease.id)
        self._booking(lease, 1)
        self.arrived.append(lease.id)

    def unqueue(self, lease_id: int) -> Lease:
        lease = self.queued.pop(lease_id)
        self.queued_of[lease.project_id].discard(lease_id)
        self._booking(lease, -1)
        return lease

    # --- Time ------------------------------------------------------------------------

    def ending(self, at: datetime) -> list[Lease]:
        """Running leases whose end or notice is over at ``at``."""
        found: dict[int, Lease] = {}
        while self.ends and self.ends[0][0] <= at:
            when, lease_id = heapq.heappop(self.ends)
            lease = self.running.get(lease_id)
            if lease is not None and when in (lease.end, lease.notice_due):
                found[lease_id] = lease
        return list(found.values())

    def next_end(self, after: datetime) -> datetime | None:
        """The first end or notice of a running lease after ``after`` (what is not
        later is done with)."""
        while self.ends:
            when, lease_id = self.ends[0]
            lease = self.running.get(lease_id)
            if when > after and lease is not None and when in (lease.end, lease.notice_due):
                return when
            heapq.heappop(self.ends)
        return None

    # --- Reclaim candidates ----------------------------------------------------------

    def eligible(self, project_id: int, priority: str, mode: str) -> tuple[int, int, int]:
        """What every candidate of ``choose_victims`` would give together, from the
        sums: (GPUs beyond those of spot, and of burst but for BURST; the project's
        guaranteed GPUs; its GPUs counted against L)."""
        spot_guaranteed = self.spot_guaranteed.get(project_id, 0)
        if mode == BURST:
            return (0, spot_guaranteed, 0)
        if mode == RESERVED:
            return (0, spot_guaranteed, self.burst_of.get(project_id, 0))
        rank = PRIORITY_RANK[priority]
        lower = [
            self.lower.get((project_id, other), (0, 0))
            for other in (Priority.EXPERIMENT, Priority.LEARNING)
            if PRIORITY_RANK[other] > rank
        ]
        gpus = sum(one[0] for one in lower)
        return (
            gpus - self.burst_of.get(project_id, 0),
            spot_guaranteed + sum(one[1] for one in lower),
            gpus,
        )

    def room(self, mode: str) -> int:
        """Free GPUs and those of spot (and burst, but for BURST) leases to take back."""
        return self.free() + self.spot_gpus + (self.burst_gpus if mode != BURST else 0)

    def victims(
        self,
        lease: Lease,
        *,
        need: int,
        free: int,
        priority: str,
        mode: str,
        short: tuple[int, int] = (0, 0),
    ) -> list[Lease] | None:
        """``reclaim_rules.choose_victims`` over the running leases not under notice
        (``lease`` left out), from the pool's sums and orders: None at once when all of
        them would not cover what is wanted; else greedy in Q6 order until covered, then
        every victim not needed dropped, latest taken first. (``choose_victims`` sorts all
        its candidates at each call; here they are kept in order as leases come and go.)"""
        project = lease.project_id
        wanted = (need - free, *short)
        beyond, guaranteed, counted = self.eligible(project, priority, mode)
        room = free + self.spot_gpus + (self.burst_gpus if mode != BURST else 0) + beyond
        if max(wanted) > 0 and (room < need or guaranteed < short[0] or counted < short[1]):
            return None

        def gives(one: Lease) -> tuple[int, int, int]:
            own = one.project_id == project
            return (
                one.gpus,
                one.gpus if own and one.tier == Tier.GUARANTEED else 0,
                one.gpus if own and not is_spot(one) else 0,
            )

        def covered(freed: list[int]) -> bool:
            return all(have >= want for have, want in zip(freed, wanted, strict=True))

        freed = [0, 0, 0]
        chosen: list = []  # a lease, or (entries, skip, from, GPUs): the rest of a group
        for entries, skip, pool_only, total in self._groups(lease, priority, mode):
            taken = 0
            for index, (_order, lease_id) in enumerate(entries):
                one = self.running[lease_id]
                if one.project_id == skip or one.id == lease.id:
                    continue
                if covered(freed):
                    break
                if pool_only and freed[0] >= wanted[0]:
                    # The rest of the group gives only GPUs of the pool: all taken.
                    chosen.append((entries, skip, index, total - taken))
                    freed[0] += total - taken
                    break
                chosen.append(one)
                taken += one.gpus
                freed = [have + got for have, got in zip(freed, gives(one), strict=True)]
        if not covered(freed):
            return None
        kept = []
        for item in reversed(chosen):
            if isinstance(item, tuple):
                entries, skip, start, gpus = item
                if freed[0] - gpus >= wanted[0]:
                    freed[0] -= gpus  # each of them is dropped in turn
                    continue
                members = [self.running[lease_id] for _order, lease_id in entries[start:]]
                members = [x for x in members if x.project_id != skip]
            else:
                members = [item]
            for one in reversed(members):
                without = [have - got for have, got in zip(freed, gives(one), strict=True)]
                if covered(without):
                    freed = without
                else:
                    kept.append(one)
        return kept[::-1]

    def _groups(self, lease: Lease, priority: str, mode: str) -> list[tuple]:
        """``reclaim_rules.reclaim_order``'s groups over the running leases not under
        notice, each as (its (order, id) entries, a project left out, whether its leases
        give only GPUs of the pool, their GPUs): spot, other projects' burst, then the
        project's own as ``mode`` allows."""
        project = lease.project_id
        # A group is taken whole only when ``lease`` is none of its leases.
        whole = lease.id not in self.running
        groups = [
            (
                self.spot_order,
                None,
                whole and not self.spot_guaranteed.get(project, 0),
                self.spot_gpus,
            )
        ]
        if mode == BURST:
            return groups
        others = self.burst_gpus - self.burst_of.get(project, 0)
        groups.append((self.burst_order, project, whole, others))
        own = [
            x
            for x in self.mine[project].values()
            if x.id in self.running
            and x.notice_due is None
            and not is_spot(x)
            and (
                x.tier == Tier.BURST
                if mode == RESERVED
                else x.priority != Priority.PRODUCTION
                and PRIORITY_RANK[x.priority] > PRIORITY_RANK[priority]
                and x.tier in (Tier.GUARANTEED, Tier.BURST)
            )
        ]
        groups.append((sorted((victim_order(x), x.id) for x in own), None, False, 0))
        return groups


def _sorted(entries: list[tuple], entry: tuple, sign: int) -> None:
    if sign > 0:
        insort(entries, entry)
    else:
        del entries[bisect_left(entries, entry)]
