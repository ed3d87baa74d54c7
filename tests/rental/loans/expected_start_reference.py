"""The play as it was before its sums were kept (issue 22): every step re-sums and
re-sorts the whole pool, plainly the rules. tests/rental/loans/test_expected_start_scale.py
holds the fast play to it."""

from collections.abc import Callable
from dataclasses import replace
from datetime import datetime, timedelta

from portal.errors import QuotaExceeded
from rental.loans.admission_rules import Decision, Standing, decide
from rental.loans.expected_start_rules import (
    HORIZON_DAYS,
    MODE_BY_TIER,
    OTHERS,
    Expected,
    OutOfTime,
    Picture,
    why_not,
)
from rental.loans.expected_start_state import Lease, Quota
from rental.loans.queue_rules import Waiting, queue_order
from rental.loans.reclaim_rules import RESERVED, Candidate, choose_victims
from rental.loans.reservation_rules import Booking, added_conflict, first_conflict
from rental.models import Market, Priority, Reservation, Tier

Status = Reservation.Status
KEPT_TIERS = (Tier.GUARANTEED, Tier.RESERVED)
Order = Callable[[list[Waiting]], list[Waiting]]


class ReferencePlay:
    """The play as it was before its sums were kept (issue 22): every step re-sums and
    re-sorts the whole pool. Slow, plainly the rules; the fast play must agree with it."""

    def __init__(
        self, picture: Picture, order: Order, out_of_time: Callable[[], bool] | None = None
    ) -> None:
        self.picture = picture
        self.order = order
        self.out_of_time = out_of_time or (lambda: False)
        self.capacity = picture.capacity
        self.notice = picture.notice
        self.quotas = picture.quotas
        self.guarantees = {pid: quota.guaranteed for pid, quota in picture.quotas.items()}
        if picture.guaranteed_total is not None:
            # Projects with no lease here count in Σ G only: one entry stands for them.
            self.guarantees[OTHERS] = picture.guaranteed_total - sum(self.guarantees.values())
        self.running = list(picture.running)
        self.claims = list(picture.claims)
        self.scheduled = sorted(picture.scheduled, key=lambda b: (b.start, b.id))
        self.queued = list(picture.queued)
        self.started: dict[int, datetime] = {}
        self.last_id = min([0, *(lease.id for lease in self._all())])

    def _all(self) -> list[Lease]:
        return [*self.running, *self.claims, *self.scheduled, *self.queued]

    # --- Standing, as ``standing.read_standing`` reads it --------------------------------

    def standing(self, project_id: int, priority: str) -> Standing:
        running = sum(lease.gpus for lease in self.running)
        noticed = sum(lease.gpus for lease in self.running if lease.notice_due is not None)
        claimed = sum(lease.gpus for lease in self.claims)
        mine = [lease for lease in (*self.running, *self.claims) if lease.project_id == project_id]
        own = sum(
            lease.gpus
            for lease in self.running
            if lease.project_id == project_id
            and lease.tier == Tier.GUARANTEED
            and lease.notice_due is None
            and lease.priority in (Priority.LEARNING, Priority.EXPERIMENT)
        )
        quota = self.quotas.get(project_id, Quota(0, 0))
        return Standing(
            guaranteed=quota.guaranteed,
            ceiling=quota.ceiling,
            used_guaranteed=sum(lease.gpus for lease in mine if lease.tier == Tier.GUARANTEED),
            used=sum(lease.gpus for lease in mine if lease.tier != Tier.SPOT),
            capacity=self.capacity,
            running=running + max(claimed - noticed, 0),
            displaceable=own if priority == Priority.PRODUCTION else 0,
        )

    # --- R2 beside bookings and L over time (the sweep of ``reservation_rules``) ---------

    def bookings(self) -> list[Lease]:
        """Bookings not over: scheduled, claiming, queued at their start or running."""
        return [lease for lease in self._all() if lease.booking]

    def _booked(self, project_id: int, start: datetime, end: datetime) -> bool:
        return any(
            b.project_id == project_id and b.start < end and b.end > start for b in self.bookings()
        )

    def _entitlements(self) -> list[Booking]:
        """What counts in E(t) (``reservations.bookings``): every booking over its window,
        and leases admitted in a tier nobody may take back, not under notice."""
        kept = [
            lease
            for lease in (*self.running, *self.claims)
            if not lease.booking and lease.tier in KEPT_TIERS and lease.notice_due is None
        ]
        return [Booking(x.project_id, x.gpus, x.start, x.end) for x in (*self.bookings(), *kept)]

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
            for x in (*self.running, *self.claims, *self.scheduled)
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
        ending = [x for x in self.running if x.end <= at or (x.notice_due and x.notice_due <= at)]
        for lease in sorted(ending, key=lambda x: (x.notice_due or x.end, x.id)):
            self.running.remove(lease)
            if lease.notice_due is not None and lease.requeue and lease.end > lease.notice_due:
                self.last_id -= 1
                self.queued.append(
                    replace(
                        lease,
                        id=self.last_id,
                        length=lease.end - lease.notice_due,
                        notice_due=None,
                        waiting=None,
                    )
                )
        for claim in sorted(
            (c for c in self.claims if c.claim_due <= at), key=lambda c: (c.claim_due, c.id)
        ):
            self.claims.remove(claim)
            due = claim.claim_due
            if claim.booking:
                self._start_booking(replace(claim, claim_due=None), due)
                continue
            lease = replace(claim, claim_due=None)
            decision = self._decide(lease, due, lease.end)
            if decision is not None and decision.status == Status.PROVISIONING:
                self._run(lease, decision.tier, due, lease.end)
            else:
                self.queued.append(lease)

    def begin_bookings(self, at: datetime) -> None:
        """R4 at start − notice (``reservations.begin``): the victims a booking needs are
        told, and its GPUs are held until its start; one without victims tries again."""
        for booking in list(self.scheduled):
            if booking.start - self.notice > at:
                break
            standing = self.standing(booking.project_id, booking.priority)
            due = max(booking.start, at)
            victims = choose_victims(
                self._candidates(booking.id),
                need=booking.gpus,
                free=standing.free,
                project_id=booking.project_id,
                priority=booking.priority,
                mode=RESERVED,
            )
            if victims is None:
                if at >= booking.start:
                    self.scheduled.remove(booking)
                    self._start_booking(booking, at)
                continue
            self.scheduled.remove(booking)
            self._tell(victims, due)
            self.claims.append(replace(booking, claim_due=due))

    def _start_booking(self, booking: Lease, at: datetime) -> None:
        """``reservations.start``: it runs when its GPUs are free, else it queues."""
        standing = self.standing(booking.project_id, booking.priority)
        if booking.gpus > standing.free:
            self.queued.append(replace(booking, length=booking.end - booking.start))
            return
        fits = standing.used_guaranteed + booking.gpus <= standing.guaranteed
        self._run(booking, Tier.GUARANTEED if fits else Tier.RESERVED, at, booking.end)

    def promote(self, at: datetime) -> None:
        """Q3 (``queue.promote_in_pool``): burst leases that now fit their project's
        guarantee become guaranteed, oldest first, where that leaves its bookings room."""
        burst = [x for x in self.running if x.tier == Tier.BURST and x.notice_due is None]
        for project_id in sorted({x.project_id for x in burst}):
            standing = self.standing(project_id, Priority.LEARNING)
            room = standing.guaranteed - standing.used_guaranteed
            for lease in sorted(
                (x for x in burst if x.project_id == project_id), key=lambda x: (x.start, x.id)
            ):
                if lease.gpus > room:
                    continue
                if self._booked(project_id, at, lease.end) and not self._beside_bookings(
                    project_id, lease.gpus, at, lease.end
                ):
                    continue
                self.running[self.running.index(lease)] = replace(lease, tier=Tier.GUARANTEED)
                room -= lease.gpus

    def admit(self, at: datetime) -> None:
        """One queue pass at ``at``, as ``queue.admit_in_pool``."""
        self.promote(at)
        passed: set[int] = set()
        while True:
            queued = [x for x in self.queued if x.id not in passed]
            if not queued:
                return
            for lease in self._in_order(queued):
                self._tick()
                passed.add(lease.id)
                if lease.held:
                    continue
                end = lease.end if lease.booking else at + lease.length
                decision = self._decide(lease, at, end)
                if decision is None:
                    continue
                if decision.status == Status.PROVISIONING:
                    self.queued.remove(lease)
                    self._run(lease, decision.tier, at, end)
                    break
                if decision.status == Status.QUEUED and self._reclaim(lease, decision, at):
                    break
            else:
                return

    def _in_order(self, queued: list[Lease]) -> list[Lease]:
        """Q5 order through ``queue_rules``' order function, with each project's figures
        as they stand now (as ``queue.waiting_in_order`` builds them)."""
        by_id = {lease.id: lease for lease in queued}
        figures = []
        for lease in queued:
            self._tick()
            standing = self.standing(lease.project_id, Priority.LEARNING)
            base = lease.waiting or Waiting(
                id=lease.id,
                guaranteed_eligible=False,
                priority=lease.priority,
                over_guarantee=0,
                weight=self.quotas.get(lease.project_id, Quota(0, 0)).weight,
                submitted_at=lease.submitted_at or lease.start,
            )
            figures.append(
                replace(
                    base,
                    id=lease.id,
                    guaranteed_eligible=lease.market != Market.SPOT
                    and standing.used_guaranteed + lease.gpus <= standing.guaranteed,
                    over_guarantee=max(standing.used - standing.guaranteed, 0),
                )
            )
        return [by_id[w.id] for w in self.order(figures)]

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

    def _candidates(self, exclude: int) -> list[Candidate]:
        return [
            Candidate(x.id, x.project_id, x.gpus, x.tier, x.market, x.priority, x.start)
            for x in self.running
            if x.notice_due is None and x.id != exclude
        ]

    def _reclaim(self, lease: Lease, decision: Decision, at: datetime) -> bool:
        """``reclaim.reclaim_for``: take GPUs back; the lease starts when the notice is
        over."""
        mode = MODE_BY_TIER.get(decision.tier)
        if mode is None:
            return False
        standing = self.standing(lease.project_id, lease.priority)
        guaranteed = decision.tier == Tier.GUARANTEED
        victims = choose_victims(
            self._candidates(lease.id),
            need=lease.gpus,
            free=standing.free,
            project_id=lease.project_id,
            priority=lease.priority,
            mode=mode,
            guarantee_short=standing.used_guaranteed + lease.gpus - standing.guaranteed
            if guaranteed
            else 0,
            ceiling_short=standing.used + lease.gpus - standing.ceiling
            if guaranteed and not lease.approved
            else 0,
        )
        if not victims:
            return False
        due = at + self.notice
        self._tell(victims, due)
        self.queued.remove(lease)
        length = lease.end - lease.start if lease.booking else lease.length
        start, end = (lease.start, lease.end) if lease.booking else (due, due + length)
        self.claims.append(replace(lease, tier=decision.tier, claim_due=due, start=start, end=end))
        self.started.setdefault(lease.id, due)
        return True

    def _tell(self, victims: list[Candidate], due: datetime) -> None:
        told = {victim.id for victim in victims}
        self.running = [replace(x, notice_due=due) if x.id in told else x for x in self.running]

    def _run(self, lease: Lease, tier: str, at: datetime, end: datetime) -> None:
        self.running.append(
            replace(lease, tier=tier, start=at, end=max(end, at + timedelta(seconds=1)))
        )
        self.started.setdefault(lease.id, at)

    # --- The play ------------------------------------------------------------------------

    def _tick(self) -> None:
        if self.out_of_time():
            raise OutOfTime

    def next_event(self, after: datetime) -> datetime | None:
        times = [x.end for x in self.running]
        times += [x.notice_due for x in self.running if x.notice_due is not None]
        times += [x.claim_due for x in self.claims if x.claim_due is not None]
        for booking in self.scheduled:
            times += [booking.start - self.notice, booking.start]
        # A booking that found no victims at start − notice asks again at every change.
        return min((t for t in times if t > after), default=None)

    def run(self, *, until: datetime, wanted: set[int]) -> None:
        at: datetime | None = self.picture.now
        while at is not None and at <= until:
            self._tick()
            self.settle(at)
            self.begin_bookings(at)
            self.settle(at)
            self.admit(at)
            if wanted <= set(self.started):
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


def reference_starts(picture: Picture) -> dict[int, Expected]:
    """``expected_starts`` as it was, on the reference play."""
    play = ReferencePlay(picture, queue_order)
    play.run(
        until=picture.now + timedelta(days=HORIZON_DAYS),
        wanted={lease.id for lease in picture.queued},
    )
    found = {claim.id: Expected(claim.claim_due) for claim in picture.claims}
    for lease in picture.queued:
        at = play.started.get(lease.id)
        found[lease.id] = Expected(at) if at else why_not(play, lease, days=HORIZON_DAYS)
    return found
