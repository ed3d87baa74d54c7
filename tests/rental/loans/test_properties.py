"""Property-based: random quotas and capacity for one pool, then random sequences of
submit, end, reserve (bookings on an hour grid, so back-to-back windows are common),
extend, capacity changes and the passing of time. After every step the invariants hold,
each checked from the rows by its own counting, never through the code under test:

- capacity: running GPUs (noticed ones included) ≤ C, and so is what runs once every
  notice is over (Q4, Q8);
- no project above its ceiling L or its guarantee G, now or after the notices (Q2), and
  no project above L at any future instant, its running leases counted to their end and
  its bookings over their windows (L over time);
- every victim is one its claimer may take (Q6, Q7, R4: never another project's
  guaranteed or reserved lease, burst takes only spot, spot takes nothing);
- every set of victims is minimal: none could have been spared (Q6's second pass), by the
  figures the preemption's audit event records;
- Σ E(t) ≤ C at every future instant, E(t) = max(G, booked and kept GPUs at t) (R2);
- a booking refused by R2 really had an instant over C (ends before starts);
- no booking waits in the queue after its start (R2, R4);
- after a queue pass no waiting lease that fits is left waiting (Q5).

The examples are derandomized so that every run tries the same ones: the mutations the
test is known to catch (docs/rules.md, "Measured") stay caught.
"""

from collections import defaultdict
from datetime import datetime, timedelta

from django.db import transaction
from hypothesis import HealthCheck, given, note, settings
from hypothesis import strategies as st

from portal.errors import DomainError, QuotaExceeded
from portal.models import AuditEvent
from rental.loans import admission, due, ending, extension, pools, queue
from rental.models import Pool, Quota, Reservation, TerminationReason, Tier
from tests.rental.loans.conftest import at

Status = Reservation.Status
PRIORITIES = ("production", "experiment", "learning")
RANK = {"production": 0, "experiment": 1, "learning": 2}
HOLDING = {Status.PROVISIONING, Status.ACTIVE, Status.ENDING}
BOOKED = {Status.SCHEDULED, Status.QUEUED, Status.PROVISIONING, Status.ACTIVE}

# (G, L) per project, every project with a ceiling; C = Σ G + a little (Q1), so that
# the pool is contested: reclaims, notices and waiting leases overlap.
quotas = st.tuples(
    st.tuples(st.integers(1, 3), st.integers(0, 2)),
    st.tuples(st.integers(1, 3), st.integers(0, 2)),
    st.tuples(st.integers(0, 1), st.integers(1, 3)),
).map(lambda rows: tuple((g, g + extra) for g, extra in rows))
config = st.tuples(quotas, st.integers(0, 2))

submit = st.tuples(
    st.just("submit"),
    st.integers(0, 2),
    st.integers(1, 3),
    st.sampled_from(("production", "experiment", "experiment", "learning", "learning")),
    st.sampled_from(("on_demand", "on_demand", "spot")),
    st.booleans(),
    st.integers(1, 4),  # hours
)
end = st.tuples(st.just("end"), st.integers(0, 50))
reserve = st.tuples(
    st.just("reserve"), st.integers(0, 2), st.integers(2, 4), st.integers(0, 2), st.integers(1, 2)
)
# A booking that starts where another one ends: ends come before starts (R2).
reserve_next = st.tuples(
    st.just("reserve_next"),
    st.integers(0, 2),
    st.integers(1, 4),
    st.integers(0, 9),
    st.integers(1, 2),
)
extend = st.tuples(st.just("extend"), st.integers(0, 50), st.integers(1, 3))
capacity = st.tuples(st.just("capacity"), st.integers(-3, 3))
tick = st.tuples(st.just("tick"), st.sampled_from((1, 60, 119, 120, 121, 900, 1800, 3600)))
# Submissions dominate so that pools fill and reclaims and notices overlap (one_of would
# draw each distinct strategy equally often; sampled_from keeps the weights).
WEIGHTED = [submit] * 6 + [reserve, reserve, reserve_next] + [tick] * 2 + [end, extend, capacity]
operations = st.lists(
    st.sampled_from(WEIGHTED).flatmap(lambda strategy: strategy), min_size=20, max_size=32
)


def next_hour(now: datetime) -> datetime:
    return now.replace(minute=0, second=0) + timedelta(hours=1)


class Pool_:
    """The pool's rows, read once per check, and the rules' figures counted from them."""

    def __init__(self, f0):
        self.pool = Pool.objects.get(pk=f0.pool.pk)
        self.capacity = self.pool.capacity
        self.quotas = {q.project_id: q for q in Quota.objects.filter(gpu_model=f0.model)}
        self.rows = list(Reservation.objects.filter(gpu_model=f0.model))

    def holding(self, r) -> bool:
        return r.status in HOLDING and not (
            r.status == Status.ENDING and r.end_reason == TerminationReason.PREEMPTED
        )

    def noticed(self, r) -> bool:
        return r.status in (Status.PROVISIONING, Status.ACTIVE) and r.notice_due_at is not None

    def claiming(self, r) -> bool:
        return r.status in (Status.QUEUED, Status.SCHEDULED) and r.reclaim_due_at is not None

    def total(self, test) -> int:
        return sum(r.gpu_count for r in self.rows if test(r))

    @property
    def held(self) -> int:
        return self.total(self.holding) + max(
            self.total(self.claiming) - self.total(self.noticed), 0
        )

    def kept(self, r) -> bool:
        """Counts in its project's E(t): a booking, or a lease admitted now in a tier
        nobody may take back, running (and not under notice) or claiming."""
        if r.is_reservation:
            return r.status in BOOKED
        running = r.status in (Status.PROVISIONING, Status.ACTIVE) and not self.noticed(r)
        return r.tier in (Tier.GUARANTEED, Tier.RESERVED) and (running or self.claiming(r))

    def in_ceiling(self, r) -> bool:
        """Counts against its project's L over time: non-spot and holding GPUs (once the
        notices are over) or claiming them, or a booking not started yet."""
        return r.tier != Tier.SPOT and (
            (self.holding(r) and not self.noticed(r))
            or self.claiming(r)
            or r.status == Status.SCHEDULED
        )

    def ceiling_peaks(self, project_id: int, since: datetime, extra=()) -> list[tuple]:
        """The project's GPUs counted against L at every boundary from ``since`` on,
        point by point."""
        counted = [
            (r.gpu_count, r.start, r.end)
            for r in self.rows
            if r.project_id == project_id and self.in_ceiling(r)
        ]
        counted += list(extra)
        times = {since} | {t for _n, s, e in counted for t in (s, e) if t > since}
        return [(t, sum(n for n, s, e in counted if max(s, since) <= t < e)) for t in sorted(times)]

    def entitled(self, since: datetime, extra=()) -> list[tuple[datetime, int]]:
        """Σ E(t) at every boundary from ``since`` on, evaluated point by point."""
        counted = [(r.project_id, r.gpu_count, r.start, r.end) for r in self.rows if self.kept(r)]
        counted += list(extra)
        times = {since} | {t for _p, _n, s, e in counted for t in (s, e) if t > since}
        peaks = []
        for t in sorted(times):
            booked: dict[int, int] = defaultdict(int)
            for project, gpus, start, end in counted:
                if start <= t < end:
                    booked[project] += gpus
            peaks.append(
                (
                    t,
                    sum(max(q.guaranteed, booked.get(pid, 0)) for pid, q in self.quotas.items()),
                )
            )
        return peaks


def may_take(victim, claimer) -> bool:
    """Q6, Q7, R4: whom a claimer may preempt."""
    spot = victim.market == "spot" or victim.tier == Tier.SPOT
    if claimer.market == "spot":
        return False
    if spot:
        return True
    if claimer.is_reservation:  # R4: then burst leases, its own project's included
        return victim.tier == Tier.BURST
    if claimer.tier == Tier.BURST:  # Q7
        return False
    if victim.project_id != claimer.project_id:  # Q6 step 2
        return victim.tier == Tier.BURST
    return (  # Q6 step 3
        victim.priority != "production"
        and RANK[victim.priority] > RANK[claimer.priority]
        and victim.tier in (Tier.GUARANTEED, Tier.BURST)
    )


def check_victims(state: Pool_) -> None:
    by_id = {r.pk: r for r in state.rows}
    chosen: dict[int, list] = defaultdict(list)
    for event in AuditEvent.objects.filter(verb="lease.preempted"):
        victim = by_id[int(event.object_id)]
        claimer = by_id[event.after["needed_by"]]
        assert may_take(victim, claimer), (victim.pk, victim.tier, claimer.pk, claimer.tier)
        chosen[(claimer.pk, event.at)].append((victim, event.after))
    for (claimer_id, _at), victims in chosen.items():
        claimer, figures = by_id[claimer_id], victims[0][1]
        freed = sum(v.gpu_count for v, _f in victims)
        missing = figures["need"] - figures["free"]
        short = figures["guarantee_short"]

        def gives(v, claimer=claimer):
            same = v.project_id == claimer.project_id and v.tier == Tier.GUARANTEED
            return v.gpu_count if same else 0

        def counts(v, claimer=claimer):  # against its project's L
            same = v.project_id == claimer.project_id
            return v.gpu_count if same and v.tier != Tier.SPOT and v.market != "spot" else 0

        over = figures.get("ceiling_short", 0)
        freed_g = sum(gives(v) for v, _f in victims)
        freed_l = sum(counts(v) for v, _f in victims)
        assert freed >= missing and freed_g >= short and freed_l >= over, (claimer_id, figures)
        for victim, _f in victims:  # Q6: then every victim not needed is dropped
            spared = (
                freed - victim.gpu_count >= missing
                and freed_g - gives(victim) >= short
                and freed_l - counts(victim) >= over
            )
            assert not spared, (claimer_id, victim.pk, figures)


def fits_now(state: Pool_, lease, now: datetime) -> bool:
    """Whether a waiting lease could start now (Q2, Q4), by counting."""
    free = state.capacity - state.held
    if lease.gpu_count > free:
        return False
    if lease.market == "spot":
        return True
    quota = state.quotas[lease.project_id]

    def mine(r):
        return r.project_id == lease.project_id and (state.holding(r) or state.claiming(r))

    used = state.total(lambda r: mine(r) and r.tier != Tier.SPOT)
    used_g = state.total(lambda r: mine(r) and r.tier == Tier.GUARANTEED)
    has_bookings = any(
        r.is_reservation and r.status in BOOKED and r.project_id == lease.project_id
        for r in state.rows
    )
    guaranteed = used_g + lease.gpu_count <= quota.guaranteed and not has_bookings
    window = (lease.gpu_count, now, now + (lease.end - lease.start))
    if any(
        total > quota.ceiling
        for _t, total in state.ceiling_peaks(lease.project_id, now, extra=[window])
        if _t < window[2]
    ):
        return False  # it would take its project over L at a booking's start
    if lease.priority == "production":
        return guaranteed
    return guaranteed or used + lease.gpu_count <= quota.ceiling


def check_invariants(f0, now) -> None:
    state = Pool_(f0)
    running = state.total(state.holding)
    noticed, claimed = state.total(state.noticed), state.total(state.claiming)
    assert running <= state.capacity, (running, state.capacity)
    assert running - noticed + claimed <= state.capacity, (running, noticed, claimed)
    for project_id, quota in state.quotas.items():
        for where in (
            state.holding,
            lambda r: (state.holding(r) and not state.noticed(r)) or state.claiming(r),
        ):

            def mine(r, where=where, project_id=project_id):
                return r.project_id == project_id and where(r)

            used = state.total(lambda r, mine=mine: mine(r) and r.tier != Tier.SPOT)
            assert used <= quota.ceiling, (project_id, used, quota.ceiling)
            guaranteed = state.total(lambda r, mine=mine: mine(r) and r.tier == Tier.GUARANTEED)
            assert guaranteed <= quota.guaranteed, (project_id, guaranteed, quota.guaranteed)
        for at_, total in state.ceiling_peaks(project_id, now):
            assert total <= quota.ceiling, ("L over time", project_id, at_, total)
    check_victims(state)
    for at_, total in state.entitled(now):
        assert total <= state.capacity, (at_, total, state.capacity)
    for lease in state.rows:
        if lease.status != Status.QUEUED:
            continue
        assert not lease.is_reservation, ("a booking waits after its start", lease.pk)
        if lease.reclaim_due_at is None:
            assert not fits_now(state, lease, now), ("fits but waits", lease.pk)


def check_refused_booking(f0, now, project, gpus, start, end) -> None:
    """R2 refused it: by point-by-point counting, some instant of its window is over C."""
    state = Pool_(f0)
    peaks = state.entitled(start, extra=[(project.pk, gpus, start, end)])
    assert any(t < end and total > state.capacity for t, total in peaks), (start, end, gpus)


@settings(
    max_examples=40,
    deadline=None,
    derandomize=True,
    suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow],
)
@given(setup=config, steps=operations)
def test_the_loan_model_keeps_its_invariants(f0, setup, steps):
    projects = (f0.alpha, f0.beta, f0.gamma)
    (limits, spare) = setup
    note(f"setup={setup!r}")
    note(f"steps={steps!r}")
    with transaction.atomic():
        for project, (g, ceiling) in zip(projects, limits, strict=True):
            Quota.objects.filter(project=project).update(guaranteed=g, ceiling=ceiling)
        Pool.objects.filter(pk=f0.pool.pk).update(
            capacity=max(sum(g for g, _l in limits) + spare, 1)
        )
        now = at("09:00")
        for step in steps:
            kind = step[0]
            try:
                with transaction.atomic():
                    if kind == "submit":
                        _, who, gpus, priority, market, requeue, hours = step
                        admission.submit_reservation(
                            actor=f0.engineer_of(projects[who]),
                            project=projects[who],
                            gpu_model=f0.model,
                            gpu_count=gpus,
                            duration_hours=hours,
                            priority=priority,
                            market=market,
                            requeue_on_preemption=requeue,
                            now=now,
                        )
                    elif kind in ("reserve", "reserve_next"):
                        _, who, gpus, index, hours = step
                        start = next_hour(now) + timedelta(hours=index)
                        if kind == "reserve_next":
                            ends = sorted(
                                {
                                    lease.end
                                    for lease in Reservation.objects.filter(
                                        is_reservation=True, status=Status.SCHEDULED
                                    )
                                }
                            )
                            start = ends[index % len(ends)] if ends else start
                        try:
                            admission.submit_reservation(
                                actor=f0.engineer_of(projects[who]),
                                project=projects[who],
                                gpu_model=f0.model,
                                gpu_count=gpus,
                                duration_hours=hours,
                                priority="experiment",
                                market="on_demand",
                                start=start,
                                now=now,
                            )
                        except QuotaExceeded as refused:
                            if refused.code == "reservation_conflict":
                                check_refused_booking(
                                    f0,
                                    now,
                                    projects[who],
                                    gpus,
                                    start,
                                    start + timedelta(hours=hours),
                                )
                            raise
                    elif kind in ("end", "extend"):
                        live = list(
                            Reservation.objects.exclude(status__in=Reservation.FINAL)
                            .exclude(status=Reservation.Status.ENDING)
                            .order_by("pk")
                        )
                        if live:
                            lease = live[step[1] % len(live)]
                            actor = f0.engineer_of(lease.project)
                            if kind == "end":
                                ending.end_reservation(actor=actor, reservation=lease, now=now)
                            else:
                                extension.extend_reservation(
                                    actor=actor, reservation=lease, hours=step[2], now=now
                                )
                    elif kind == "capacity":
                        state = Pool_(f0)
                        lowest = max(
                            state.total(state.holding),
                            state.held,
                            max(total for _t, total in state.entitled(now)),
                        )
                        wanted = max(state.capacity + step[1], lowest)
                        pools.set_capacity(actor=f0.admin, gpu_model=f0.model, capacity=wanted)
                    elif kind == "tick":
                        now += timedelta(seconds=step[1])
                        ending.end_expired_leases(now=now)
                    due.process_due(now=now)
                    queue.admit_queued(gpu_model=f0.model, now=now)
            except DomainError:
                pass
            check_invariants(f0, now)
        transaction.set_rollback(True)
