"""Admission by rules Q1, Q2 and Q4 through the services (SCENARIOS.md 1, 2 and 4)."""

from decimal import Decimal

import pytest

from portal.errors import InvalidInput, NotPermitted, QuotaExceeded
from portal.models import AuditEvent
from rental.loans import admission, ending, queue, quotas
from rental.models import Instance, Quota, Reservation, Tier
from tests import factories

Status = Reservation.Status


def submit(f0, project, gpus, *, priority="experiment", market="on_demand", hours=4, now=None):
    return admission.submit_reservation(
        actor=f0.engineer_of(project),
        project=project,
        gpu_model=f0.model,
        gpu_count=gpus,
        duration_hours=hours,
        priority=priority,
        market=market,
        now=now,
    )


# Scenario 1 (Q1)
def test_it_refuses_guarantees_beyond_capacity(f0):
    delta = factories.project("delta")
    with pytest.raises(InvalidInput) as refused:
        quotas.set_quota(actor=f0.admin, project=delta, gpu_model=f0.model, guaranteed=3, ceiling=4)
    assert refused.value.field == "guaranteed"
    assert "9" in refused.value.message and "8" in refused.value.message
    assert not Quota.objects.filter(project=delta).exists()


def test_it_accepts_a_guarantee_that_fits(f0):
    delta = factories.project("delta")
    quota = quotas.set_quota(
        actor=f0.admin, project=delta, gpu_model=f0.model, guaranteed=2, ceiling=4
    )
    assert (quota.guaranteed, quota.ceiling) == (2, 4)
    assert AuditEvent.objects.filter(verb="quota.set", object_id=str(quota.pk)).exists()


def test_it_refuses_a_ceiling_below_the_guarantee(f0):
    delta = factories.project("delta")
    with pytest.raises(InvalidInput) as refused:
        quotas.set_quota(actor=f0.admin, project=delta, gpu_model=f0.model, guaranteed=2, ceiling=1)
    assert refused.value.field == "ceiling"
    assert not Quota.objects.filter(project=delta).exists()


def test_it_bounds_guarantees_by_committed_gpus(f0):
    f0.pool.committed_gpus = 6
    f0.pool.save()
    delta = factories.project("delta")
    with pytest.raises(InvalidInput, match="committed"):
        quotas.set_quota(actor=f0.admin, project=delta, gpu_model=f0.model, guaranteed=1, ceiling=1)


def test_it_lets_only_admins_set_quotas(f0):
    with pytest.raises(NotPermitted):
        quotas.set_quota(
            actor=f0.alpha_manager, project=f0.alpha, gpu_model=f0.model, guaranteed=1, ceiling=6
        )
    assert Quota.objects.get(project=f0.alpha).guaranteed == 2


# Scenario 2 (Q2)
def test_it_admits_guaranteed_then_burst_then_waits_over_the_ceiling(f0, t0):
    leases = [submit(f0, f0.alpha, 2, now=t0) for _ in range(3)]
    assert [lease.tier for lease in leases] == [Tier.GUARANTEED, Tier.BURST, Tier.BURST]
    assert {lease.status for lease in leases} == {Status.PROVISIONING}
    assert Instance.objects.filter(reservation__in=leases).count() == 6

    fourth = submit(f0, f0.alpha, 1, now=t0)
    assert fourth.status == Status.PENDING_APPROVAL
    assert fourth.status_code == "over_ceiling"
    assert not fourth.instances.exists()
    # Two GPUs are free in the pool, yet the ceiling holds.
    assert f0.pool.capacity - sum(lease.gpu_count for lease in leases) == 2


def test_it_provisions_an_over_ceiling_request_once_approved(f0, t0):
    for _ in range(3):
        submit(f0, f0.alpha, 2, now=t0)
    fourth = submit(f0, f0.alpha, 1, now=t0)
    approved = admission.approve_reservation(
        actor=f0.alpha_manager, reservation=fourth, comment="deadline", now=t0
    )
    assert approved.status == Status.PROVISIONING
    assert approved.tier == Tier.BURST
    assert approved.approved_by == f0.alpha_manager
    assert approved.instances.count() == 1


def test_it_lets_only_the_projects_manager_decide(f0, t0):
    for _ in range(3):
        submit(f0, f0.alpha, 2, now=t0)
    fourth = submit(f0, f0.alpha, 1, now=t0)
    for stranger in (f0.alice, f0.bob, f0.outsider):
        with pytest.raises(NotPermitted):
            admission.approve_reservation(actor=stranger, reservation=fourth, now=t0)
    assert Reservation.objects.get(pk=fourth.pk).status == Status.PENDING_APPROVAL


def test_it_requires_a_comment_to_reject(f0, t0):
    for _ in range(3):
        submit(f0, f0.alpha, 2, now=t0)
    fourth = submit(f0, f0.alpha, 1, now=t0)
    with pytest.raises(InvalidInput) as refused:
        admission.reject_reservation(actor=f0.alpha_manager, reservation=fourth, comment=" ")
    assert refused.value.field == "comment"
    rejected = admission.reject_reservation(
        actor=f0.alpha_manager, reservation=fourth, comment="Not this month"
    )
    assert rejected.status == Status.REJECTED
    assert rejected.decision_comment == "Not this month"


# Scenario 4 (Q2: no production burst)
def test_it_refuses_production_over_the_guarantee_and_preempts_nothing(f0, t0):
    a1 = submit(f0, f0.alpha, 2, now=t0)
    b1 = submit(f0, f0.beta, 2, priority="production", now=t0)
    b2 = submit(f0, f0.beta, 2, priority="production", now=t0)
    c1 = submit(f0, f0.gamma, 2, now=t0)
    assert [a1.tier, b1.tier, b2.tier, c1.tier] == [Tier.GUARANTEED] * 3 + [Tier.BURST]
    before = Reservation.objects.count()

    with pytest.raises(QuotaExceeded) as refused:
        submit(f0, f0.beta, 2, priority="production", now=t0)

    assert refused.value.code == "production_over_guarantee"
    assert Reservation.objects.count() == before
    assert set(Reservation.objects.values_list("status", flat=True)) == {Status.PROVISIONING}


# Q4
def test_it_queues_burst_when_the_pool_is_full(f0, t0):
    submit(f0, f0.beta, 4, now=t0)
    submit(f0, f0.alpha, 2, now=t0)
    submit(f0, f0.gamma, 2, now=t0)
    queued = submit(f0, f0.gamma, 2, now=t0)
    # Within gamma's ceiling, but the pool is full and a burst lease preempts only spot.
    assert queued.status == Status.QUEUED
    assert queued.status_code == "no_capacity"
    assert queued.tier == Tier.BURST
    assert not queued.instances.exists()
    assert not Reservation.objects.filter(notice_due_at__isnull=False).exists()


def test_it_admits_the_queue_when_room_appears(f0, t0):
    running = submit(f0, f0.beta, 4, now=t0)
    submit(f0, f0.alpha, 2, now=t0)
    submit(f0, f0.gamma, 2, now=t0)
    queued = submit(f0, f0.gamma, 2, now=t0)
    ending.end_reservation(actor=f0.bob, reservation=running, now=t0)
    # The ended lease's instances were never launched: they free the pool at once.
    assert Reservation.objects.get(pk=running.pk).status == Status.ENDED
    admitted = queue.admit_queued(gpu_model=f0.model, now=t0)
    assert [lease.pk for lease in admitted] == [queued.pk]
    assert Reservation.objects.get(pk=queued.pk).status == Status.PROVISIONING


def test_it_marks_spot_requests_tier_spot(f0, t0):
    lease = submit(f0, f0.gamma, 2, market="spot", now=t0)
    assert lease.tier == Tier.SPOT
    assert [i.rate_per_hour for i in lease.instances.all()] == [Decimal("1.000000")] * 2


# R1: field errors, nothing written
@pytest.mark.parametrize(
    ("change", "field"),
    [
        ({"gpus": 7}, "gpu_count"),  # over alpha's ceiling of 6
        ({"gpus": 0}, "gpu_count"),
        ({"hours": 0}, "duration_hours"),
        ({"hours": "soon"}, "duration_hours"),
        ({"hours": 10_000}, "duration_hours"),
        ({"priority": "urgent"}, "priority"),
        ({"market": "reserved"}, "market"),
    ],
)
def test_it_names_the_field_of_bad_input(f0, t0, change, field):
    with pytest.raises(InvalidInput) as refused:
        admission.submit_reservation(
            actor=f0.alice,
            project=f0.alpha,
            gpu_model=f0.model,
            gpu_count=change.get("gpus", 1),
            duration_hours=change.get("hours", 2),
            priority=change.get("priority", "experiment"),
            market=change.get("market", "on_demand"),
            now=t0,
        )
    assert refused.value.field == field
    assert not Reservation.objects.exists()


def test_it_lets_only_members_request(f0, t0):
    with pytest.raises(NotPermitted):
        admission.submit_reservation(
            actor=f0.bob,
            project=f0.alpha,
            gpu_model=f0.model,
            gpu_count=1,
            duration_hours=1,
            priority="experiment",
            market="on_demand",
            now=t0,
        )
    assert not Reservation.objects.exists()


def test_it_sends_requests_beyond_auto_approve_limits_to_the_manager(f0, t0):
    Quota.objects.filter(project=f0.alpha).update(max_hours_per_lease=8)
    lease = submit(f0, f0.alpha, 1, hours=12, now=t0)
    assert lease.status == Status.PENDING_APPROVAL
    assert lease.status_code == "over_auto_approve"
