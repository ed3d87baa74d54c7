"""The expected-start play's queue: each waiting lease's Q5 key as its project's figures
stand, and which leases are worth looking at in a pass. Pure, over plain numbers.

A pass of ``queue.admit_in_pool`` looks at every waiting lease once, in Q5 order, and after
one starts goes on in the order of the figures then. A lease that could not start would
fail again until something it depends on changes: its project's figures (what decides its
tier, its ceiling and what its own leases give back), or the pool's room (free GPUs, and
those of the spot and burst leases it may take back) reaching what it needs. So it waits
asleep until then, and a pass looks at the awake ones only: an asleep lease whose place in
the order is passed (a lease after it started) counts as looked at, as it would have
failed there.
"""

import heapq
from collections.abc import Callable
from dataclasses import replace
from decimal import Decimal

from rental.loans.expected_start_state import Lease, PoolState, Quota
from rental.loans.queue_rules import Waiting
from rental.loans.reclaim_rules import BURST, GUARANTEED
from rental.models import Market

# How a lease that could not start waits: looked at in every pass (its project has
# bookings: the answer moves with time), once its project's figures change, or also once
# the pool's room of ROOM[k] reaches a threshold: 0 free; 1 free + spot; 2 free + spot +
# burst.
ALWAYS = "always"
PROJECT = "project"
ROOM = (0, 1, 2)

Key = Callable[[Waiting], tuple]


class QueueWatch:
    def __init__(self, pool: PoolState, quotas: dict[int, Quota], key: Key) -> None:
        self.pool = pool
        self.quotas = quotas
        self.key = key
        self.keys: dict[int, tuple] = {}  # each queued lease's Q5 key as it stands
        self.awake: set[int] = set()  # to be looked at in the next pass
        self.restless: set[int] = set()  # looked at in every pass
        self.asleep: dict[int, int] = {}  # lease -> the number of its wait
        self.waits: tuple[list, list, list] = ([], [], [])  # per ROOM: (threshold, n, id)
        self.waited = 0
        self.passed: set[int] | None = None  # during a pass: the leases looked at
        self.frontier: tuple | None = None  # the greatest key started in this pass
        self.visit: list[tuple] = []  # during a pass: (key, id) to look at

    def _rekey(self, lease: Lease) -> tuple | None:
        """Its Q5 key with its project's figures as they stand (``queue.waiting_in_order``);
        returns the key it had."""
        quota = self.quotas.get(lease.project_id)
        guaranteed = quota.guaranteed if quota is not None else 0
        used_guaranteed = self.pool.used_guaranteed.get(lease.project_id, 0)
        base = lease.waiting or Waiting(
            id=lease.id,
            guaranteed_eligible=False,
            priority=lease.priority,
            over_guarantee=0,
            weight=quota.weight if quota is not None else Decimal(1),
            submitted_at=lease.submitted_at or lease.start,
        )
        figures = replace(
            base,
            id=lease.id,
            guaranteed_eligible=lease.market != Market.SPOT
            and used_guaranteed + lease.gpus <= guaranteed,
            over_guarantee=max(self.pool.used.get(lease.project_id, 0) - guaranteed, 0),
        )
        old = self.keys.get(lease.id)
        self.keys[lease.id] = self.key(figures)
        return old

    def absorb(self) -> set[int]:
        """What changed since last asked: new leases in the queue are keyed and woken; a
        changed project's leases are keyed again and woken; leases waiting for room are
        woken once the pool's room reaches what they need. Returns the changed projects."""
        pool = self.pool
        touched, pool.touched = pool.touched, set()
        for lease_id in pool.arrived:
            if lease_id in pool.queued:
                self._rekey(pool.queued[lease_id])
                self._wake(lease_id, None)
        pool.arrived = []
        for project_id in touched:
            for lease_id in pool.queued_of.get(project_id, ()):
                self._wake(lease_id, self._rekey(pool.queued[lease_id]))
        rooms = (pool.free(), pool.room(BURST), pool.room(GUARANTEED))
        for waits, room in zip(self.waits, rooms, strict=True):
            while waits and waits[0][0] <= room:
                _threshold, number, lease_id = heapq.heappop(waits)
                if self.asleep.get(lease_id) == number:
                    self._wake(lease_id, self.keys[lease_id])
        return touched

    def _wake(self, lease_id: int, old_key: tuple | None) -> None:
        if self.pool.queued[lease_id].held:
            return  # an admission check holds it: never started
        # In a pass, asleep until now with its key unchanged: if a lease after it in Q5
        # order has started, its place was passed (where it could not start).
        if (
            self.asleep.pop(lease_id, None) is not None
            and self.frontier is not None
            and old_key is not None
            and old_key < self.frontier
        ):
            self.passed.add(lease_id)
        self.awake.add(lease_id)
        if self.passed is not None and lease_id not in self.passed:
            heapq.heappush(self.visit, (self.keys[lease_id], lease_id))

    def sleep(self, lease: Lease, waits: tuple) -> None:
        kind, threshold = waits
        if kind == ALWAYS:
            self.restless.add(lease.id)
            return
        self.waited += 1
        self.asleep[lease.id] = self.waited
        if kind != PROJECT:
            heapq.heappush(self.waits[kind], (threshold, self.waited, lease.id))

    def begin_pass(self) -> set[int]:
        self.awake |= self.restless
        self.restless = set()
        touched = self.absorb()
        self.passed, self.frontier = set(), None
        self.visit = [(self.keys[lease_id], lease_id) for lease_id in self.awake]
        heapq.heapify(self.visit)
        return touched

    def next(self) -> tuple | None:
        """The next awake lease not looked at in this pass, in Q5 order as it stands:
        (key, id), now counted as looked at; None at the end of the pass."""
        while self.visit:
            key, lease_id = heapq.heappop(self.visit)
            if (
                lease_id in self.awake
                and lease_id not in self.passed
                and self.keys.get(lease_id) == key
            ):
                self.passed.add(lease_id)
                self.awake.discard(lease_id)
                return key, lease_id
        return None

    def started(self, key: tuple) -> set[int]:
        """The lease of ``key`` started: what it changed wakes who it concerns (returns
        the changed projects)."""
        self.frontier = key if self.frontier is None else max(self.frontier, key)
        return self.absorb()

    def end_pass(self) -> None:
        self.passed, self.frontier, self.visit = None, None, []

    def unqueue(self, lease_id: int) -> None:
        self.keys.pop(lease_id, None)
        self.awake.discard(lease_id)
