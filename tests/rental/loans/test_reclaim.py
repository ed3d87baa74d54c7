"""Reclaim (Q6, Q7), notice (Q8), re-queue and the queue after it: SCENARIOS.md 3, 4, 5
through the services with exact times, and the rules with other numbers."""

import pytest

from portal.errors import QuotaExceeded
from portal.models import AuditEvent
from rental.fleet import instances as fleet_instances
from rental.loans import due, ending, pools, queue
from rental.loans.standing import pool_use
from rental.models import Instance, Pool, Quota, Reservation, TerminationReason, Tier
from rental.providers.base import CloudInstance, CloudState
from tests.notices import told
from tests.rental.loans.conftest import at

Status = Reservation.Status


def fresh(lease):
    return Reservation.objects.get(pk=lease.pk)


def noticed():
    return set(Reservation.objects.filter(notice_due_at__isnull=False).values_list("pk", flat=True))


# Scenario 3
def test_scenario_3_reclaims_the_newest_lowest_burst_and_requeues_it(f0, lease):
    a1 = lease(f0.alpha, 2, at("09:55"))
    a2 = lease(f0.alpha, 2, at("10:00"))
    a3 = lease(f0.alpha, 2, at("10:05"), priority="learning", requeue_on_preemption=True)
    b1 = lease(f0.beta, 2, at("10:10"))
    assert [x.tier for x in (a1, a2, a3, b1)] == ["guaranteed", "burst", "burst", "guaranteed"]

    b2 = lease(f0.beta, 2, at("11:00"))
    assert (b2.tier, b2.status, b2.status_code) == (Tier.GUARANTEED, Status.QUEUED, "reclaiming")
    assert noticed() == {a3.pk}
    victim = fresh(a3)
    assert victim.notice_due_at == at("11:02:00")
    assert victim.preempted_for_id == b2.pk
    [notice] = told(f0.alice, starts="Preempted")
    assert f"#{b2.pk}" in notice.body and "2026-04-06 11:02 UTC" in notice.subject
    assert AuditEvent.objects.filter(verb="lease.preempted", object_id=str(a3.pk)).exists()

    assert due.process_due(now=at("11:01:59")) == 0
    assert fresh(a3).status == Status.PROVISIONING
    assert fresh(b2).status == Status.QUEUED

    due.process_due(now=at("11:02:00"))
    victim = fresh(a3)
    assert (victim.status, victim.ended_at) == (Status.PREEMPTED, at("11:02:00"))
    assert victim.end_reason == TerminationReason.PREEMPTED
    started = fresh(b2)
    assert (started.status, started.start, started.tier) == (
        Status.PROVISIONING,
        at("11:02:00"),
        Tier.GUARANTEED,
    )
    assert started.instances.count() == 2
    again = Reservation.objects.get(requeued_from=a3)
    assert (again.status, again.submitted_at) == (Status.QUEUED, at("10:05"))

    b3 = lease(f0.beta, 2, at("11:05"))
    assert (b3.tier, b3.status, b3.status_code) == (Tier.BURST, Status.QUEUED, "no_capacity")
    assert noticed() == {a3.pk}  # a burst lease preempts nothing but spot (Q7)

    ending.end_reservation(actor=f0.alice, reservation=a2, now=at("12:00"))
    admitted = queue.admit_queued(gpu_model=f0.model, now=at("12:00"))
    assert [x.pk for x in admitted] == [b3.pk]  # experiment before the re-queued learning
    assert fresh(again).status == Status.QUEUED


# Scenario 4
def test_scenario_4_refuses_production_burst_and_preempts_nothing(f0, lease):
    lease(f0.alpha, 2, at("09:00"))
    lease(f0.beta, 2, at("09:00"), priority="production")
    lease(f0.beta, 2, at("09:00"), priority="production")
    lease(f0.gamma, 2, at("09:00"))
    before = Reservation.objects.count()
    with pytest.raises(QuotaExceeded) as refused:
        lease(f0.beta, 2, at("10:00"), priority="production")
    assert refused.value.code == "production_over_guarantee"
    assert Reservation.objects.count() == before
    assert noticed() == set()


# Scenario 5
def test_scenario_5_takes_the_projects_own_lower_priority_lease(f0, lease):
    b1 = lease(f0.beta, 2, at("09:00"), priority="learning")
    b2 = lease(f0.beta, 2, at("09:01"))
    lease(f0.alpha, 2, at("09:02"))
    c1 = lease(f0.gamma, 2, at("09:03"))
    assert (b1.tier, b2.tier, c1.tier) == (Tier.GUARANTEED, Tier.GUARANTEED, Tier.BURST)

    b5 = lease(f0.beta, 2, at("10:00"), priority="production")
    assert b5.tier == Tier.GUARANTEED
    assert noticed() == {b1.pk}  # not c1: only b1 also gives beta's guarantee back

    due.process_due(now=at("10:02:00"))
    assert fresh(b5).status == Status.PROVISIONING
    assert fresh(b5).tier == Tier.GUARANTEED
    assert fresh(c1).status == Status.PROVISIONING
    assert fresh(b1).status == Status.PREEMPTED


# Q6 order, each step
def test_an_own_reclaim_that_would_leave_the_project_over_l_asks_a_manager(f0, lease):
    """Q2 and Q6 step 3 with other numbers: beta (G 3, L 4) runs 2 guaranteed and 2 burst
    GPUs; its production request of 3 fits the guarantee once the 2 give way, but beta
    would then run 5 > L 4, so a manager decides and nobody is told to leave."""
    Quota.objects.filter(project=f0.beta).update(guaranteed=3, ceiling=4)
    lease(f0.beta, 2, at("09:00"))
    burst = lease(f0.beta, 2, at("09:01"))
    assert burst.tier == Tier.BURST
    asked = lease(f0.beta, 3, at("09:02"), priority="production")
    assert (asked.status, asked.status_code) == (Status.PENDING_APPROVAL, "over_ceiling")
    assert noticed() == set()


def test_an_own_reclaim_takes_enough_to_keep_the_project_within_l(f0, lease):
    """The guarantee would need one victim, the ceiling two: beta (G 3, L 4) runs two
    1-GPU learning leases and 2 burst GPUs; its production request of 2 takes both
    learning leases (2 + 2 = L), not only the one the guarantee needs."""
    Quota.objects.filter(project=f0.beta).update(guaranteed=3, ceiling=4)
    first = lease(f0.beta, 1, at("09:00"), priority="learning")
    second = lease(f0.beta, 1, at("09:01"), priority="learning")
    burst = lease(f0.beta, 2, at("09:02"))
    assert burst.tier == Tier.BURST
    asked = lease(f0.beta, 2, at("09:03"), priority="production")
    assert (asked.status, asked.status_code) == (Status.QUEUED, "reclaiming")
    assert noticed() == {first.pk, second.pk}
    due.process_due(now=at("09:05"))
    running = Reservation.objects.filter(
        project=f0.beta, status__in=(Status.PROVISIONING, Status.ACTIVE)
    )
    assert sum(r.gpu_count for r in running) == 4


def test_withdrawing_a_claim_keeps_the_notices_another_claim_counts_on(f0, lease):
    """Q8: a notice frees GPUs for every claim in the pool. alpha's claim of 1 took
    gamma's 3-GPU spot lease; beta's burst claim of 2 took gamma's 1-GPU spot lease and
    the GPU left free; then C was lowered to what the pool will use (7). When alpha
    withdraws, the 3-GPU notice must stay: calling it off would leave beta's claim 1 GPU
    beyond C."""
    big = lease(f0.gamma, 3, at("09:00"), market="spot", priority="learning")
    small = lease(f0.gamma, 1, at("09:00"), market="spot", priority="production")
    lease(f0.beta, 3, at("09:00"))
    first = lease(f0.alpha, 1, at("09:00"))
    claim = lease(f0.alpha, 1, at("09:01"))
    assert (claim.status_code, noticed()) == ("reclaiming", {big.pk})
    ending.end_reservation(actor=f0.alice, reservation=first, now=at("09:01:10"))
    other = lease(f0.beta, 2, at("09:01:20"))
    assert (other.tier, other.status_code, noticed()) == (
        Tier.BURST,
        "reclaiming",
        {big.pk, small.pk},
    )
    pools.set_capacity(actor=f0.admin, gpu_model=f0.model, capacity=7)

    ending.end_reservation(actor=f0.alice, reservation=claim, now=at("09:01:30"))
    assert fresh(claim).status == Status.CANCELLED
    assert noticed() == {big.pk, small.pk}
    use = pool_use(Pool.objects.get(pk=f0.pool.pk))
    assert use.running + max(use.claimed - use.noticed, 0) <= use.capacity == 7
    due.process_due(now=at("09:03:20"))
    assert (fresh(big).status, fresh(other).status) == (Status.PREEMPTED, Status.PROVISIONING)


def test_withdrawing_a_claim_nobody_else_needs_calls_its_notices_off(f0, lease):
    spot = lease(f0.gamma, 4, at("09:00"), market="spot")
    lease(f0.beta, 4, at("09:00"))
    claim = lease(f0.alpha, 2, at("09:01"))
    assert noticed() == {spot.pk}
    ending.end_reservation(actor=f0.alice, reservation=claim, now=at("09:01:30"))
    assert noticed() == set()
    assert fresh(spot).preempted_for_id is None


def test_it_takes_spot_before_other_projects_burst(f0, lease):
    lease(f0.beta, 4, at("09:00"))
    burst = lease(f0.gamma, 2, at("09:01"))
    spot = lease(f0.gamma, 2, at("09:02"), market="spot")
    assert spot.tier == Tier.SPOT
    lease(f0.alpha, 2, at("10:00"))
    assert noticed() == {spot.pk}
    assert fresh(burst).notice_due_at is None


def test_it_takes_the_lowest_priority_then_the_newest_burst(f0, lease):
    lease(f0.beta, 4, at("09:00"))
    old_learning = lease(f0.gamma, 1, at("09:01"), priority="learning")
    experiment = lease(f0.gamma, 1, at("09:02"))
    new_learning = lease(f0.gamma, 1, at("09:03"), priority="learning")
    lease(f0.gamma, 1, at("09:04"))
    lease(f0.alpha, 1, at("10:00"))
    assert noticed() == {new_learning.pk}
    lease(f0.alpha, 1, at("10:00:30"))
    assert noticed() == {new_learning.pk, old_learning.pk}
    assert fresh(experiment).notice_due_at is None


def test_it_takes_other_projects_burst_before_its_own_leases(f0, lease):
    Quota.objects.filter(project=f0.alpha).update(guaranteed=4)
    own = lease(f0.alpha, 2, at("09:00"), priority="learning")
    lease(f0.beta, 4, at("09:01"))
    burst = lease(f0.gamma, 2, at("09:02"))
    want = lease(f0.alpha, 2, at("10:00"))
    assert (own.tier, want.tier) == (Tier.GUARANTEED, Tier.GUARANTEED)
    assert noticed() == {burst.pk}


def test_it_drops_a_victim_the_greedy_pass_did_not_need(f0, lease):
    # Free 1; victims in order: spot 1 GPU (newest), then gamma burst 2 GPUs.
    lease(f0.beta, 4, at("09:00"))
    burst = lease(f0.gamma, 2, at("09:01"))
    spot = lease(f0.gamma, 1, at("09:02"), market="spot")
    # alpha needs 3 GPUs: greedy takes the spot (1 + 1 free = 2 < 3) then the burst
    # (2 + 2 + 1 = 5 ≥ 3); without the spot, 2 + 1 = 3 still fits, so the spot is dropped.
    Quota.objects.filter(project=f0.alpha).update(guaranteed=3, ceiling=6)
    Quota.objects.filter(project=f0.beta).update(guaranteed=4)
    want = lease(f0.alpha, 3, at("10:00"))
    assert want.tier == Tier.GUARANTEED
    assert noticed() == {burst.pk}
    assert fresh(spot).notice_due_at is None


def test_it_never_takes_other_projects_guaranteed_leases_even_when_degraded(f0, lease):
    lease(f0.alpha, 2, at("09:00"), priority="learning")
    lease(f0.beta, 4, at("09:01"), priority="learning")
    # C falls to 6 below Σ G = 8 (Q1: degraded); gamma's guarantee of 2 finds no room.
    Pool.objects.filter(pk=f0.pool.pk).update(capacity=6)
    Quota.objects.filter(project=f0.gamma).update(guaranteed=2)
    want = lease(f0.gamma, 2, at("10:00"))
    assert (want.tier, want.status, want.status_code) == (
        Tier.GUARANTEED,
        Status.QUEUED,
        "no_capacity",
    )
    assert noticed() == set()


def test_a_burst_request_takes_only_spot(f0, lease):
    lease(f0.beta, 4, at("09:00"))
    lease(f0.alpha, 2, at("09:00"))
    learning = lease(f0.alpha, 1, at("09:01"), priority="learning")  # alpha burst
    spot = lease(f0.alpha, 1, at("09:02"), market="spot")
    first = lease(f0.gamma, 1, at("10:00"))
    assert first.tier == Tier.BURST
    assert noticed() == {spot.pk}
    second = lease(f0.gamma, 1, at("10:00:10"))
    assert (second.status, second.status_code) == (Status.QUEUED, "no_capacity")
    assert fresh(learning).notice_due_at is None


# Q8: nothing is admitted on noticed GPUs in between
def test_nothing_is_admitted_during_the_notice(f0, lease):
    lease(f0.beta, 4, at("09:00"))
    lease(f0.alpha, 2, at("09:00"))
    spot = lease(f0.gamma, 2, at("09:00"), market="spot")
    Reservation.objects.filter(project=f0.alpha).update(status=Status.ENDED)
    # 2 GPUs free and 2 spot: alpha, its guarantee raised to 4, asks 4.
    Quota.objects.filter(project=f0.alpha).update(guaranteed=4, ceiling=6)
    Quota.objects.filter(project=f0.beta).update(guaranteed=4)
    want = lease(f0.alpha, 4, at("10:00"))
    assert noticed() == {spot.pk}
    late = lease(f0.gamma, 1, at("10:01"))  # a free-looking GPU is already claimed
    assert (late.status, late.status_code) == (Status.QUEUED, "no_capacity")
    queue.admit_queued(gpu_model=f0.model, now=at("10:01:30"))
    assert fresh(late).status == Status.QUEUED
    due.process_due(now=at("10:02:00"))
    assert fresh(want).status == Status.PROVISIONING
    assert fresh(late).status == Status.QUEUED


def test_a_victim_told_while_it_starts_keeps_saying_why_once_it_runs(f0, lease):
    lease(f0.alpha, 2, at("09:55"))
    lease(f0.alpha, 2, at("10:00"))
    a3 = lease(f0.alpha, 2, at("10:05"), priority="learning")
    lease(f0.beta, 2, at("10:10"))
    b2 = lease(f0.beta, 2, at("11:00"))
    assert noticed() == {a3.pk} and fresh(a3).status == Status.PROVISIONING
    for number, instance in enumerate(fresh(a3).instances.all()):
        cloud = CloudInstance(
            external_id=f"i-0victim{number}",
            state=CloudState.RUNNING,
            market="on_demand",
            region=instance.region,
            zone=f"{instance.region}a",
            instance_type=instance.offering.instance_type,
            public_address="203.0.113.9",
            private_address="10.0.0.9",
            launched_at=at("11:00:30"),
            state_reason="",
            state_changed_at=at("11:00:30"),
            tags=(),
        )
        fleet_instances.record_launch(instance_id=instance.pk, cloud=cloud, now=at("11:00:30"))
        running = Instance.objects.get(pk=instance.pk)
        fleet_instances.mark_running(running, cloud, now=at("11:00:30"))

    victim = fresh(a3)
    assert victim.status == Status.ACTIVE
    assert str(victim.status_message).startswith(f"Preempted: lease #{b2.pk} of Beta needs 2 GPUs")
