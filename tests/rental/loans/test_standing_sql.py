"""The standing that admission reads under the pool lock is one hand-written statement
(rental/loans/standing.py). It must say exactly what the ORM filters HOLDING_GPUS,
NOTICED and CLAIMING say, over every combination of status, tier, end reason, notice,
reclaim and priority, for every project and request priority."""

import itertools

import pytest
from django.db.models import Q, Sum

from rental.loans.standing import (
    BOOKED,
    CLAIMING,
    HOLDING_GPUS,
    NOTICED,
    PoolUse,
    read_standing,
)
from rental.models import Priority, Quota, Reservation, TerminationReason, Tier
from tests.rental.loans.conftest import at

Status = Reservation.Status


def reference(f0, project, priority, window=None):
    """The standing written with the ORM's filters, as the rules define it."""
    leases = Reservation.objects.filter(gpu_model=f0.model)

    def total(where):
        return leases.filter(where).aggregate(n=Sum("gpu_count"))["n"] or 0

    mine = Q(project=project) & (HOLDING_GPUS | CLAIMING)
    own = Q(
        project=project,
        tier=Tier.GUARANTEED,
        notice_due_at__isnull=True,
        status__in=(Status.PROVISIONING, Status.ACTIVE),
        priority__in=(Priority.LEARNING, Priority.EXPERIMENT),
    )
    quota = Quota.objects.get(project=project, gpu_model=f0.model)
    use = PoolUse(
        capacity=f0.pool.capacity,
        running=total(HOLDING_GPUS),
        noticed=total(NOTICED),
        claimed=total(CLAIMING),
    )
    return {
        "guaranteed": quota.guaranteed,
        "ceiling": quota.ceiling,
        "used_guaranteed": total(mine & Q(tier=Tier.GUARANTEED)),
        "used": total(mine & ~Q(tier=Tier.SPOT)),
        "running": use.held,
        "displaceable": total(own) if priority == Priority.PRODUCTION else 0,
        "booked_in_window": 0
        if window is None
        else total(
            Q(
                project=project,
                is_reservation=True,
                status__in=BOOKED,
                start__lt=window[1],
                end__gt=window[0],
            )
        ),
    }


@pytest.fixture
def every_kind_of_lease(f0):
    """One lease per combination, with GPU counts that make every sum distinct."""
    projects = (f0.alpha, f0.beta, f0.gamma)
    combos = itertools.product(
        projects,
        Priority.values,
        Status.values,
        (Tier.GUARANTEED, Tier.BURST, Tier.RESERVED, Tier.SPOT, ""),
        (TerminationReason.PREEMPTED, TerminationReason.USER, ""),
        (None, at("10:02")),  # notice_due_at
        (None, at("10:02")),  # reclaim_due_at
    )
    rows = []
    windows = ((at("09:00"), at("10:00")), (at("10:30"), at("11:00")), (at("11:00"), at("12:00")))
    for index, (project, priority, status, tier, reason, notice, reclaim) in enumerate(combos):
        start, end = windows[index % 3]
        rows.append(
            Reservation(
                project=project,
                requester=f0.alice,
                gpu_model=f0.model,
                gpu_count=1 + index % 7,
                offering=f0.offering,
                instance_count=1,
                market="spot" if tier == Tier.SPOT else "on_demand",
                priority=priority,
                image=f0.image,
                start=start,
                end=end,
                is_reservation=index % 2 == 0,
                submitted_at=at("09:00"),
                status=status,
                tier=tier,
                end_reason=reason,
                notice_due_at=notice,
                reclaim_due_at=reclaim,
            )
        )
    Reservation.objects.bulk_create(rows)
    return rows


def test_it_reads_what_the_orm_filters_say(f0, every_kind_of_lease):
    assert len(every_kind_of_lease) == 3 * 3 * len(Status.values) * 5 * 3 * 2 * 2
    windows = (None, (at("09:30"), at("10:30")), (at("10:00"), at("11:00")))
    for project, priority, window in itertools.product(
        (f0.alpha, f0.beta, f0.gamma), Priority.values, windows
    ):
        standing = read_standing(f0.pool, project.pk, priority=priority, window=window)
        expected = reference(f0, project, priority, window)
        assert {key: getattr(standing, key) for key in expected} == expected, (
            project.slug,
            priority,
            window,
        )
        assert standing.capacity == f0.pool.capacity


def test_a_project_without_a_quota_has_no_guarantee_and_no_ceiling(f0):
    Quota.objects.filter(project=f0.gamma).delete()
    standing = read_standing(f0.pool, f0.gamma.pk)
    assert (standing.guaranteed, standing.ceiling, standing.used, standing.running) == (0, 0, 0, 0)
