"""Expected start: when each waiting lease of a pool would start if nothing else changes.
Pure, over plain numbers.

The pool's known future is played forward with the loan rules themselves: running leases
end at their ends, victims at the end of their notice, claims start when their notice is
over, bookings take their GPUs back at start − notice (R4) and run their window, and at
every such instant the queue is admitted as ``queue.admit_in_pool`` admits it (Q3, then
Q5 order through ``queue_rules.queue_order``, Q2/Q4 through ``admission_rules.decide``,
Q6/Q7 by ``choose_victims``' rule kept over ordered lists in ``expected_start_state``
(``choose_victims`` sorts all its candidates at each call, the play keeps them in order as
leases start and end, so a step costs what it takes, not the pool's size; the scale test
holds the two to the same answers), R2 beside bookings and L over time through
the sweep of ``reservation_rules``). A lease's expected start is the first instant at
which that play admits it, or the end of the notice of the victims it takes; so it is
never earlier than the rules allow on what is known now.

What it cannot know, it leaves out: requests not sent yet, leases ended or extended
early, approvals, capacity changes, admission checks that change their answer, and how
long the cloud takes to confirm an instance gone (a lease being terminated counts as
free at once).
"""

from collections.abc import Callable
from dataclasses import dataclass, field, replace
from datetime import datetime, timedelta
from decimal import Decimal

from portal.errors import QuotaExceeded
from rental.loans.admission_rules import Decision, Standing, decide
from rental.loans.expected_start_queue import ALWAYS, PROJECT, ROOM, Key, QueueWatch
from rental.loans.expected_start_state import Lease, PoolState, Quota
from rental.loans.queue_rules import queue_key
from rental.loans.reclaim_rules import BURST, GUARANTEED, RESERVED
from rental.loans.reservation_rules import Booking, added_conflict, first_conflict
from rental.models import Market, Priority, Reservation, Tier

Status = Reservation.Status

# How far ahead the play looks: beyond it, "no start in sight in the next N days".
HORIZON_DAYS = 7

# The key of R2's guarantees that stands for the projects with no lease in the pool.
OTHERS = -1

MODE_BY_TIER = {Tier.GUARANTEED: GUARANTEED, Tier.BURST: BURST, Tier.RESERVED: RESERVED}

# Why a lease has no start in sight (the words are ``expected_start.reason_text``'s).
TOO_BIG = "too_big"  # more GPUs than the pool's capacity C
HELD = "held"  # an admission check holds it (its reason says which)
APPROVAL = "approval"  # waiting for a manager
PRODUCTION = "production_over_guarantee"  # production runs only within G
CEILING = "over_ceiling"  # its project would pass L
BUSY = "busy"  # the pool's GPUs stay taken (running, booked, ahead in the queue)
UNKNOWN = "unknown"  # the play ran out of its time before this lease started


class OutOfTime(Exception):
    """The caller's time for the play is spent (``Play.out_of_time``)."""


@dataclass(frozen=True)
class Picture:
    """A pool's state at ``now``, as read once: everything the play starts from."""

    now: datetime
    capacity: int
    notice: timedelta
    quotas: dict[int, Quota]
    running: list[Lease]  # holding GPUs (victims under notice included)
    claims: list[Lease]  # waiting for their victims' notice (reclaim_due_at)
    scheduled: list[Lease]  # bookings not begun
    queued: list[Lease]  # in the queue, in any order
    usage: dict[int, Decimal] = field(default_factory=dict)  # a fair pool's figures
    # Σ G over every quota of the pool, projects without a lease in ``quotas`` included
    # (None: ``quotas`` holds them all): the floor of R2's sweep.
    guaranteed_total: int | None = None


@dataclass(frozen=True)
class Expected:
    """A waiting lease's expected start, or why none is in sight within the horizon."""

    start: datetime | None
    reason: str = ""  # one of the codes above when ``start`` is None
    figures: dict = field(default_factory=dict)


class Play:
    """The pool played forward from ``picture.now``; ``started`` holds when each waiting
    lease starts (or the end of its victims' notice).

    Each instant costs what changes at it: the pool's sums are kept as leases come and go
    (``PoolState``); a waiting lease that could not start is looked at again only once
    something it depends on changed (its project's figures, or the pool's room past what it
    needs); the rest would fail again and are passed over in their place in Q5 order."""

    def __init__(
        self,
        picture: Picture,
        out_of_time: Callable[[], bool] | None = None,
        key: Key = queue_key,
    ) -> None:
        self.picture = picture
        self.key = key
        # Asked at every step: a pool is played for as long as the caller allows, never
        # longer (what has not started by then is UNKNOWN).
        self.out_of_time = out_of_time or (lambda: False)
        self.capacity = picture.capacity
        self.notice = picture.notice
        self.quotas = picture.quotas
        self.guarantees = {pid: quota.guaranteed for pid, quota in picture.quotas.items()}
        if picture.guaranteed_total is not None:
            # Projects with no lease here count in Σ G only: one entry stands for them.
            self.guarantees[OTHERS] = picture.guaranteed_total - sum(self.guarantees.values())
        self.pool = PoolState(picture.capacity)
        for lease in picture.running:
            self.pool.run(lease)
        for lease in picture.claims:
            self.pool.claim(lease)
        for lease in picture.scheduled:
            self.pool.schedule(lease)
        for lease in picture.queued:
            self.pool.queue(lease)
        self.started: dict[int, datetime] = {}
        self.waiting_for: set[int] = set()
        everyone = (*picture.running, *picture.claims, *picture.scheduled, *picture.queued)
        self.last_id = min([0, *(lease.id for lease in everyone)])
        self.watch = QueueWatch(self.pool, self.quotas, key)
        self.to_promote: set[int] = set()

    # --- Standing, as ``standing.read_standing`` reads it --------------------------------

    def standing(self, project_id: int, priority: str) -> Standing:
        pool = self.pool
        quota = self.quotas.get(project_id, Quota(0, 0))
        return Standing(
            guaranteed=quota.guaranteed,
            ceiling=quota.ceiling,
            used_guaranteed=pool.used_guaranteed.get(project_id, 0),
            used=pool.used.get(project_id, 0),
            capacity=self.capacity,
            running=self.capacity - pool.free(),
            displaceable=pool.own.get(project_id, 0) if priority == Priority.PRODUCTION else 0,
        )

    # --- R2 beside bookings and L over time (the sweep of ``reservation_rules``) ---------

    def bookings(self) -> list[Lease]:
        """Bookings not over: scheduled, claiming, queued at their start or running."""
        return list(self.pool.bookings.values())

    def _booked(self, project_id: int, start: datetime, end: datetime) -> bool:
        if project_id not in self.pool.booked_projects:
            return False
        return any(
            b.project_id == project_id and b.start < end and b.end > start
            for b in self.pool.bookings.values()
        )

    def _entitlements(self) -> list[Booking]:
        """What counts in E(t) (``reservations.bookings``): every booking over its window,
        and leases admitted in a tier nobody may take back, not under notice."""
        held = (*self.pool.bookings.values(), *self.pool.kept.values())
        return [Booking(x.project_id, x.gpus, x.start, x.end) for x in held]

    def _beside_bookings(self, project_id: int, gpus: int, start: datetime, end: datetime) -> bool:
        """``reservations.check_beside_bookings``: whether a kept lease leaves every
        booking its room."""
        added = Booking(project_id, gpus, start, end)
        conflict = added_conflict(
            self._entitlements(), self.guarantees, capacity=self.capacity, added=added
        )
        return conflict is None

    def _within_ceiling(self, lease: Lease, start: datetime, end: datetime) -> bool:
        """``ceiling.ceiling_conflict``: the project's non-spot leases to their end and its
        bookings not begun, with this lease, stay within L over [start, end)."""
        counted = [
            x
            for x in (*self.pool.mine[lease.project_id].values(), *self.pool.scheduled)
            if x.project_id == lease.project_id
            and x.tier != Tier.SPOT
            and x.notice_due is None
            and x.start < end
            and x.end > start
        ]
        uses = [Booking(x.project_id, x.gpus, x.start, x.end) for x in counted]
        quota = self.quotas.get(lease.project_id, Quota(0, 0))
        return (
            first_conflict(
                [*uses, Booking(lease.project_id, lease.gpus, start, end)],
                {},
                capacity=quota.ceiling,
                window_start=start,
                window_end=end,
            )
            is None
        )

    # --- What happens at one instant -----------------------------------------------------

    def settle(self, at: datetime) -> None:
        """Ends and notices that are over, then claims whose notice is over start (as
        ``due.settle``); a lease being terminated at ``now`` counts as gone."""
        pool = self.pool
        for lease in sorted(pool.ending(at), key=lambda x: (x.notice_due or x.end, x.id)):
            pool.stop(lease.id)
            if lease.notice_due is not None and lease.requeue and lease.end > lease.notice_due:
                self.last_id -= 1
                pool.queue(
                    replace(
                        lease,
                        id=self.last_id,
                        length=lease.end - lease.notice_due,
                        notice_due=None,
                        waiting=None,
                    )
                )
        due_claims = [c for c in pool.claims.values() if c.claim_due <= at]
        for claim in sorted(due_claims, key=lambda c: (c.claim_due, c.id)):
            pool.unclaim(claim.id)
            due = claim.claim_due
            if claim.booking:
                self._start_booking(replace(claim, claim_due=None), due)
                continue
            lease = replace(claim, claim_due=None)
            decision = self._decide(lease, due, lease.end)
            if decision is not None and decision.status == Status.PROVISIONING:
                self._run(lease, decision.tier, due, lease.end)
            else:
                pool.queue(lease)

    def begin_bookings(self, at: datetime) -> None:
        """R4 at start − notice (``reservations.begin``): the victims a booking needs are
        told, and its GPUs are held until its start; one without victims tries again."""
        pool = self.pool
        for booking in list(pool.scheduled):
            if booking.start - self.notice > at:
                break
            standing = self.standing(booking.project_id, booking.priority)
            due = max(booking.start, at)
            victims = self.pool.victims(
                booking,
                need=booking.gpus,
                free=standing.free,
                priority=booking.priority,
                mode=RESERVED,
            )
            if victims is None:
                if at >= booking.start:
                    pool.unschedule(booking)
                    self._start_booking(booking, at)
                continue
            pool.unschedule(booking)
            self._tell(victims, due)
            pool.claim(replace(booking, claim_due=due))

    def _start_booking(self, booking: Lease, at: datetime) -> None:
        """``reservations.start``: it runs when its GPUs are free, else it queues."""
        standing = self.standing(booking.project_id, booking.priority)
        if booking.gpus > standing.free:
            self.pool.queue(replace(booking, length=booking.end - booking.start))
            return
        fits = standing.used_guaranteed + booking.gpus <= standing.guaranteed
        self._run(booking, Tier.GUARANTEED if fits else Tier.RESERVED, at, booking.end)

    def promote(self, at: datetime) -> None:
        """Q3 (``queue.promote_in_pool``): burst leases that now fit their project's
        guarantee become guaranteed, oldest first, where that leaves its bookings room.
        Only projects whose figures changed since they were last looked at (or with
        bookings) can have one to promote."""
        pool = self.pool
        looked = self.to_promote | set(pool.booked_projects)
        self.to_promote = set()
        for project_id in sorted(p for p in looked if pool.promotable.get(p)):
            standing = self.standing(project_id, Priority.LEARNING)
            room = standing.guaranteed - standing.used_guaranteed
            burst = sorted(pool.promotable[project_id].values(), key=lambda x: (x.start, x.id))
            for lease in burst:
                if lease.gpus > room:
                    continue
                if self._booked(project_id, at, lease.end) and not self._beside_bookings(
                    project_id, lease.gpus, at, lease.end
                ):
                    continue
                pool.change(lease.id, tier=Tier.GUARANTEED)
                room -= lease.gpus

    def admit(self, at: datetime) -> None:
        """One queue pass at ``at``, as ``queue.admit_in_pool``: in Q5 order, each lease
        is looked at once; after one starts, the order is that of the figures then."""
        self.to_promote |= self.watch.absorb()
        self.promote(at)
        watch = self.watch
        self.to_promote |= watch.begin_pass()
        try:
            while (visit := watch.next()) is not None:
                key, lease_id = visit
                self._tick()
                lease = self.pool.queued[lease_id]
                waits = self._try(lease, at)
                if waits is None:
                    self.to_promote |= watch.started(key)
                else:
                    watch.sleep(lease, waits)
        finally:
            watch.end_pass()

    def _try(self, lease: Lease, at: datetime) -> tuple | None:
        """Start ``lease`` now if the rules let it (None), else how it waits."""
        end = lease.end if lease.booking else at + lease.length
        decision = self._decide(lease, at, end)
        waits: tuple = (PROJECT, 0)
        if decision is not None and decision.status == Status.PROVISIONING:
            self._unqueue(lease.id)
            self._run(lease, decision.tier, at, end)
            return None
        if decision is not None and decision.status == Status.QUEUED:
            waits = self._reclaim(lease, decision, at)
            if waits is None:
                return None
        if lease.project_id in self.pool.booked_projects:
            return (ALWAYS, 0)
        return waits

    def _decide(self, lease: Lease, start: datetime, end: datetime) -> Decision | None:
        """Q2/Q4 (``decide``), then beside the project's bookings (R2) and under L over
        time; None when the lease may not start or claim now."""
        standing = self.standing(lease.project_id, lease.priority)
        decision = _decided(standing, lease)
        if decision is None:
            return None
        until = end if lease.booking else end + self.notice
        if not self._booked(lease.project_id, start, until):
            return decision
        if decision.tier == Tier.GUARANTEED and not self._beside_bookings(
            lease.project_id, lease.gpus, start, end
        ):
            # ``reservations.keep_bookings``: production waits, the rest runs as burst.
            if lease.priority == Priority.PRODUCTION:
                return None
            no_room = replace(
                standing,
                guaranteed=min(standing.guaranteed, standing.used_guaranteed),
                displaceable=0,
            )
            decision = _decided(no_room, lease)
            if decision is None:
                return None
        if not lease.approved and lease.market != Market.SPOT:
            window_end = until if decision.status == Status.QUEUED else end
            if not self._within_ceiling(lease, start, window_end):
                return None  # ``queue.beyond_ceiling``: it keeps its place
        return decision

    def _reclaim(self, lease: Lease, decision: Decision, at: datetime) -> tuple | None:
        """``reclaim.reclaim_for``: take GPUs back; the lease starts when the notice is
        over (None), or how it waits when there is nothing to take."""
        mode = MODE_BY_TIER.get(decision.tier)
        if mode is None:
            return (ROOM[0], lease.gpus)  # it starts once its GPUs are free
        standing = self.standing(lease.project_id, lease.priority)
        guaranteed = decision.tier == Tier.GUARANTEED
        short = (
            standing.used_guaranteed + lease.gpus - standing.guaranteed if guaranteed else 0,
            standing.used + lease.gpus - standing.ceiling
            if guaranteed and not lease.approved
            else 0,
        )
        victims = self.pool.victims(
            lease,
            need=lease.gpus,
            free=standing.free,
            priority=lease.priority,
            mode=mode,
            short=short,
        )
        if not victims:
            return self._waits_for(lease, mode, short)
        due = at + self.notice
        self._tell(victims, due)
        self._unqueue(lease.id)
        length = lease.end - lease.start if lease.booking else lease.length
        start, end = (lease.start, lease.end) if lease.booking else (due, due + length)
        self.pool.claim(replace(lease, tier=decision.tier, claim_due=due, start=start, end=end))
        self._started(lease.id, due)
        return None

    def _waits_for(self, lease: Lease, mode: str, short: tuple[int, int]) -> tuple:
        """How a lease that found no victims waits: for its project's figures (what only
        they give is short), else for the pool's room: free + spot (+ burst) ≥ threshold."""
        beyond, guaranteed, counted = self.pool.eligible(lease.project_id, lease.priority, mode)
        if guaranteed < short[0] or counted < short[1]:
            return (PROJECT, 0)
        if mode == BURST:
            return (ROOM[1], lease.gpus)
        return (ROOM[2], lease.gpus - beyond)

    def _tell(self, victims: list[Lease], due: datetime) -> None:
        for victim in victims:
            self.pool.change(victim.id, notice_due=due)

    def _run(self, lease: Lease, tier: str, at: datetime, end: datetime) -> None:
        self.pool.run(replace(lease, tier=tier, start=at, end=max(end, at + timedelta(seconds=1))))
        self._started(lease.id, at)

    def _started(self, lease_id: int, at: datetime) -> None:
        self.started.setdefault(lease_id, at)
        self.waiting_for.discard(lease_id)

    def _unqueue(self, lease_id: int) -> None:
        self.pool.unqueue(lease_id)
        self.watch.unqueue(lease_id)

    # --- The play ------------------------------------------------------------------------

    def _tick(self) -> None:
        if self.out_of_time():
            raise OutOfTime

    def next_event(self, after: datetime) -> datetime | None:
        times = [self.pool.next_end(after)]
        times += [x.claim_due for x in self.pool.claims.values() if x.claim_due is not None]
        for booking in self.pool.scheduled:
            times += [booking.start - self.notice, booking.start]
        # A booking that found no victims at start − notice asks again at every change.
        return min((t for t in times if t is not None and t > after), default=None)

    def run(self, *, until: datetime, wanted: set[int]) -> None:
        self.waiting_for = set(wanted) - set(self.started)
        at: datetime | None = self.picture.now
        while at is not None and at <= until:
            self._tick()
            self.settle(at)
            self.begin_bookings(at)
            self.settle(at)
            self.admit(at)
            if not self.waiting_for:
                return
            at = self.next_event(at)


def _decided(standing: Standing, lease: Lease) -> Decision | None:
    """``decide`` for a waiting lease: None unless it may start or claim GPUs now."""
    try:
        decision = decide(
            standing,
            gpu_count=lease.gpus,
            priority=lease.priority,
            market=lease.market,
            approved=lease.approved,
        )
    except QuotaExceeded:
        return None
    if decision.status not in (Status.PROVISIONING, Status.QUEUED):
        return None
    return decision


def expected_starts(
    picture: Picture,
    *,
    days: int = HORIZON_DAYS,
    out_of_time: Callable[[], bool] | None = None,
    key: Key = queue_key,
) -> dict[int, Expected]:
    """Every queued lease's expected start in one play of the pool (claims: their due
    time); a lease with none in the next ``days`` days says why. When ``out_of_time()``
    says so the play stops: a lease that had not started by then is UNKNOWN."""
    play = Play(picture, out_of_time, key)
    wanted = {lease.id for lease in picture.queued}
    stopped = False
    try:
        play.run(until=picture.now + timedelta(days=days), wanted=wanted)
    except OutOfTime:
        stopped = True
    found = {claim.id: Expected(claim.claim_due) for claim in picture.claims}
    for lease in picture.queued:
        at = play.started.get(lease.id)
        if at is not None:
            found[lease.id] = Expected(at)
        else:
            found[lease.id] = (
                Expected(None, UNKNOWN) if stopped else why_not(play, lease, days=days)
            )
    return found


def expected_start_of(
    picture: Picture,
    lease: Lease,
    *,
    days: int = HORIZON_DAYS,
    out_of_time: Callable[[], bool] | None = None,
    key: Key = queue_key,
) -> Expected:
    """One lease not in the queue yet (a request before it is sent, or one waiting for a
    manager, as if approved now) added to it at ``picture.now``."""
    added = replace(picture, queued=[*picture.queued, lease])
    return expected_starts(added, days=days, out_of_time=out_of_time, key=key)[lease.id]


def why_not(play: Play, lease: Lease, *, days: int) -> Expected:
    """Why ``lease`` has no start in the play's horizon, judged where the play stopped."""
    if lease.gpus > play.capacity:
        return Expected(None, TOO_BIG, {"n": lease.gpus, "capacity": play.capacity})
    if lease.held:
        return Expected(None, HELD)
    quota = play.quotas.get(lease.project_id, Quota(0, 0))
    if lease.priority == Priority.PRODUCTION and lease.gpus > quota.guaranteed:
        return Expected(None, PRODUCTION, {"n": lease.gpus, "guaranteed": quota.guaranteed})
    if not lease.approved and lease.market != Market.SPOT and lease.gpus > quota.ceiling:
        return Expected(None, CEILING, {"n": lease.gpus, "ceiling": quota.ceiling})
    standing = play.standing(lease.project_id, lease.priority)
    try:
        decision = decide(
            standing,
            gpu_count=lease.gpus,
            priority=lease.priority,
            market=lease.market,
            approved=lease.approved,
        )
    except QuotaExceeded:
        return Expected(None, PRODUCTION, {"n": lease.gpus, "guaranteed": quota.guaranteed})
    if decision.status == Status.PENDING_APPROVAL:
        return Expected(
            None, CEILING, {"n": lease.gpus, "ceiling": quota.ceiling, "used": standing.used}
        )
    horizon = play.picture.now + timedelta(days=days)
    booked = sum(x.gpus for x in play.bookings() if x.start <= horizon < x.end)
    return Expected(
        None,
        BUSY,
        {"days": days, "n": lease.gpus, "capacity": play.capacity, "booked": booked},
    )
