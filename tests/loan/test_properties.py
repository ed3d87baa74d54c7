"""Property-based: random sequences of submit, end, preempt (through guaranteed requests),
reserve, extend, capacity changes and the passing of time against one pool (F0). After
every step: running GPUs (noticed ones included) ≤ C, and so is what runs once every
notice is over; no project above its ceiling L (nothing is approved here); no other
project's guaranteed or reserved lease is ever a victim; Σ E(t) ≤ C at every future
instant."""

from datetime import timedelta

from django.db import transaction
from django.db.models import Q, Sum
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from portal.errors import DomainError
from rental import services
from rental.models import Pool, Reservation, Tier
from rental.services import extension, pools
from rental.services.pool import CLAIMING, HOLDING_GPUS, NOTICED
from rental.services.reservation_rules import segments
from rental.services.reservations import bookings, guarantees
from tests.loan.conftest import at

PRIORITIES = ("production", "experiment", "learning")

submit = st.tuples(
    st.just("submit"),
    st.integers(0, 2),
    st.integers(1, 4),
    st.sampled_from(PRIORITIES),
    st.sampled_from(("on_demand", "on_demand", "spot")),
    st.booleans(),
)
end = st.tuples(st.just("end"), st.integers(0, 50))
reserve = st.tuples(
    st.just("reserve"), st.integers(0, 2), st.integers(1, 5), st.integers(1, 30), st.integers(1, 6)
)
extend = st.tuples(st.just("extend"), st.integers(0, 50), st.integers(1, 3))
capacity = st.tuples(st.just("capacity"), st.integers(-3, 3))
tick = st.tuples(st.just("tick"), st.sampled_from((1, 30, 119, 120, 121, 600, 3600)))
# Submissions dominate so that pools fill and reclaims and notices overlap.
operations = st.lists(
    st.one_of(submit, submit, submit, end, reserve, extend, capacity, tick), max_size=30
)


def total(query: Q, **filters) -> int:
    return Reservation.objects.filter(query, **filters).aggregate(n=Sum("gpu_count"))["n"] or 0


def max_entitlement(pool: Pool, now) -> int:
    return max(
        (s.entitled for s in segments(bookings(pool), guarantees(pool), since=now)), default=0
    )


def check_invariants(f0, now) -> None:
    pool = Pool.objects.get(pk=f0.pool.pk)
    running, noticed, claimed = total(HOLDING_GPUS), total(NOTICED), total(CLAIMING)
    assert running <= pool.capacity, (running, pool.capacity)
    assert running - noticed + claimed <= pool.capacity, (running, noticed, claimed)
    after_notices = (HOLDING_GPUS & ~NOTICED) | CLAIMING
    for project in (f0.alpha, f0.beta, f0.gamma):
        quota = project.quotas.get()
        for where in (HOLDING_GPUS, after_notices):
            used = total(where & ~Q(tier=Tier.SPOT), project=project)
            assert used <= quota.ceiling, (project.slug, used, quota.ceiling)
            guaranteed = total(where & Q(tier=Tier.GUARANTEED), project=project)
            assert guaranteed <= quota.guaranteed, (project.slug, guaranteed, quota.guaranteed)
    for victim in Reservation.objects.filter(preempted_for__isnull=False).select_related(
        "preempted_for"
    ):
        if victim.project_id != victim.preempted_for.project_id:
            assert victim.tier in (Tier.BURST, Tier.SPOT), (victim.pk, victim.tier)
    assert max_entitlement(pool, now) <= pool.capacity


@settings(
    max_examples=30,
    deadline=None,
    suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow],
)
@given(steps=operations)
def test_the_loan_model_keeps_its_invariants(f0, steps):
    projects = (f0.alpha, f0.beta, f0.gamma)
    with transaction.atomic():
        now = at("09:00")
        for step in steps:
            kind = step[0]
            try:
                with transaction.atomic():
                    if kind == "submit":
                        _, who, gpus, priority, market, requeue = step
                        services.submit_reservation(
                            actor=f0.engineer_of(projects[who]),
                            project=projects[who],
                            gpu_model=f0.model,
                            gpu_count=gpus,
                            duration_hours=2,
                            priority=priority,
                            market=market,
                            requeue_on_preemption=requeue,
                            now=now,
                        )
                    elif kind == "reserve":
                        _, who, gpus, in_hours, hours = step
                        services.submit_reservation(
                            actor=f0.engineer_of(projects[who]),
                            project=projects[who],
                            gpu_model=f0.model,
                            gpu_count=gpus,
                            duration_hours=hours,
                            priority="experiment",
                            market="on_demand",
                            start=now + timedelta(hours=in_hours),
                            now=now,
                        )
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
                                services.end_reservation(actor=actor, reservation=lease, now=now)
                            else:
                                extension.extend_reservation(
                                    actor=actor, reservation=lease, hours=step[2], now=now
                                )
                    elif kind == "capacity":
                        pool = Pool.objects.get(pk=f0.pool.pk)
                        lowest = max(
                            total(HOLDING_GPUS),
                            total(HOLDING_GPUS) - total(NOTICED) + total(CLAIMING),
                            max_entitlement(pool, now),
                            sum(guarantees(pool).values()),
                        )
                        wanted = max(pool.capacity + step[1], lowest)
                        pools.set_capacity(actor=f0.admin, gpu_model=f0.model, capacity=wanted)
                    elif kind == "tick":
                        now += timedelta(seconds=step[1])
                        services.end_expired_leases(now=now)
                    services.process_due(now=now)
                    services.admit_queued(gpu_model=f0.model, now=now)
            except DomainError:
                pass
            check_invariants(f0, now)
        transaction.set_rollback(True)
