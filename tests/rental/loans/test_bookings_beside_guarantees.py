"""A booking admitted by R2 is honoured at its start (R4) whatever is admitted now in
between. E(t) = max(G, what the project has booked at t), and a lease running in a tier
nobody may take back counts there too: a guaranteed lease admitted now beside its own
project's booking would otherwise hold GPUs R2 promised to another booking. Such a lease
runs as burst (R4 takes it back at the start) or, for production, is refused; a booking
beside a running guaranteed lease counts it; an extension into a booking is refused."""

import pytest

from portal.errors import QuotaExceeded
from rental.loans import admission, due, ending, extension, queue
from rental.models import Reservation, Tier
from tests.rental.loans.conftest import at

Status = Reservation.Status
FRIDAY = at("12:00", day=3)


def book(f0, project, gpus, start, end, *, now=FRIDAY):
    return admission.submit_reservation(
        actor=f0.engineer_of(project),
        project=project,
        gpu_model=f0.model,
        gpu_count=gpus,
        duration_hours=str((end - start).total_seconds() / 3600),
        priority="experiment",
        market="on_demand",
        start=start,
        now=now,
    )


def fresh(lease):
    return Reservation.objects.get(pk=lease.pk)


def test_a_booking_starts_on_time_after_guaranteed_and_burst_leases_came_in_between(f0, lease):
    booked = book(f0, f0.alpha, 4, at("10:00"), at("14:00"))  # Σ E = 4 + 4 + 0 = 8
    # alpha's own request overlaps its booking: within G now, but at 10:00 alpha would
    # hold 2 + 4 > E = 4. It runs, as burst, and says why.
    beside = lease(f0.alpha, 2, at("08:10"), hours=4)
    assert (beside.status, beside.tier) == (Status.PROVISIONING, Tier.BURST)
    assert "[10:00, 12:10) would need 10 of 8 GPUs" in str(beside.status_message)
    # Another project's guarantee is its own E: admitted guaranteed.
    beta = lease(f0.beta, 4, at("08:20"))
    assert (beta.status, beta.tier) == (Status.PROVISIONING, Tier.GUARANTEED)
    gamma = lease(f0.gamma, 2, at("08:30"))
    assert (gamma.status, gamma.tier) == (Status.PROVISIONING, Tier.BURST)  # pool full: 8

    due.process_due(now=at("09:57:59"))
    assert fresh(gamma).notice_due_at is None
    due.process_due(now=at("09:58:00"))  # R4: start − notice
    assert fresh(gamma).notice_due_at == at("10:00:00")  # another project's burst
    assert fresh(beside).notice_due_at == at("10:00:00")  # then its own burst
    assert fresh(beta).notice_due_at is None  # a guarantee is never taken
    late = lease(f0.gamma, 1, at("09:59"))
    assert late.status == Status.QUEUED  # the booked GPUs are held

    due.process_due(now=at("10:00:00"))
    started = fresh(booked)
    assert (started.status, started.start, started.tier) == (
        Status.PROVISIONING,
        at("10:00:00"),
        Tier.RESERVED,
    )
    assert fresh(beside).status == Status.PREEMPTED
    assert fresh(beta).status == Status.PROVISIONING


def test_a_guaranteed_lease_that_ends_before_the_booking_stays_guaranteed(f0, lease):
    book(f0, f0.alpha, 4, at("10:00"), at("14:00"))
    before = lease(f0.alpha, 2, at("08:00"), hours=2)  # [08:00, 10:00): ends as it starts
    assert before.tier == Tier.GUARANTEED
    ending.end_reservation(actor=f0.alice, reservation=before, now=at("08:01"))
    into = lease(f0.alpha, 2, at("08:02"), hours="1.97")  # [08:02, 10:00:12)
    assert into.tier == Tier.BURST


def test_production_beside_its_booked_guarantee_is_refused_with_the_interval(f0, lease):
    book(f0, f0.alpha, 4, at("10:00"), at("14:00"))
    with pytest.raises(QuotaExceeded) as refused:
        lease(f0.alpha, 2, at("08:10"), hours=4, priority="production")
    assert refused.value.code == "guarantee_booked"
    assert "2026-04-06 [10:00, 12:10) would need 10 of 8 GPUs" in refused.value.message
    assert refused.value.figures == {"needed": 10, "capacity": 8}
    assert Reservation.objects.count() == 1


def test_a_booking_counts_the_guaranteed_leases_its_project_runs_then(f0, lease):
    running = lease(f0.alpha, 2, at("08:00"), hours=4)  # guaranteed until 12:00
    assert running.tier == Tier.GUARANTEED
    with pytest.raises(QuotaExceeded) as refused:
        book(f0, f0.alpha, 4, at("10:00"), at("14:00"), now=at("08:30"))
    assert "[10:00, 12:00) would need 10 of 8 GPUs" in refused.value.message
    # From its end on the guarantee is free again (ends before starts).
    assert book(f0, f0.alpha, 4, at("12:00"), at("16:00"), now=at("08:30")).status == (
        Status.SCHEDULED
    )


def test_extending_a_guaranteed_lease_into_its_projects_booking_is_refused(f0, lease):
    book(f0, f0.alpha, 4, at("10:00"), at("14:00"))
    running = lease(f0.alpha, 2, at("08:00"), hours=1)  # [08:00, 09:00), guaranteed
    with pytest.raises(QuotaExceeded) as refused:
        extension.extend_reservation(actor=f0.alice, reservation=running, hours=2, now=at("08:30"))
    assert (refused.value.code, refused.value.field) == ("guarantee_booked", "hours")
    assert fresh(running).end == at("09:00")
    extended = extension.extend_reservation(
        actor=f0.alice, reservation=running, hours=1, now=at("08:30")
    )
    assert extended.end == at("10:00")  # ends as the booking starts


def test_the_queue_admits_a_lease_beside_a_booking_as_burst(f0, lease):
    book(f0, f0.alpha, 4, at("10:00"), at("14:00"))
    lease(f0.beta, 4, at("08:00"))
    gamma = lease(f0.gamma, 4, at("08:00"))
    waiting = lease(f0.alpha, 2, at("08:10"), hours=4)
    assert (waiting.status, waiting.tier) == (Status.QUEUED, Tier.BURST)
    ending.end_reservation(actor=f0.gary, reservation=gamma, now=at("08:20"))
    queue.admit_queued(gpu_model=f0.model, now=at("08:20"))
    admitted = fresh(waiting)
    assert (admitted.status, admitted.tier) == (Status.PROVISIONING, Tier.BURST)


def test_promotion_leaves_a_lease_beside_its_projects_booking_burst(f0, lease):
    book(f0, f0.alpha, 4, at("10:00"), at("14:00"))
    beside = lease(f0.alpha, 2, at("08:10"), hours=4)  # burst: overlaps the booking
    assert beside.tier == Tier.BURST
    queue.admit_queued(gpu_model=f0.model, now=at("08:15"))  # a pass promotes (Q3)
    assert fresh(beside).tier == Tier.BURST  # G 2 has room, but the booking holds it
    assert fresh(beside).status_code != "promoted"


def test_a_claim_decided_again_at_its_due_stays_burst_beside_its_booking(f0, lease):
    """alpha's 1-GPU request overlaps its 12:00 booking of 4 (Σ E there = 4 + 4 = C), so
    it claims gamma's spot GPUs as burst. When the notice is over it is decided again:
    within G now, but running guaranteed it would count in alpha's E at 12:00 (5) and
    break R2; it starts as burst, which R4 takes back at the booking's start."""
    booked = book(f0, f0.alpha, 4, at("12:00"), at("13:00"))
    lease(f0.beta, 4, at("09:00"))
    spot = lease(f0.gamma, 4, at("09:00"), market="spot")
    claim = lease(f0.alpha, 1, at("09:00"), priority="learning", hours=4)
    assert (claim.tier, claim.status_code) == (Tier.BURST, "reclaiming")

    due.process_due(now=at("09:02"))
    started = fresh(claim)
    assert (fresh(spot).status, started.status, started.tier) == (
        Status.PREEMPTED,
        Status.PROVISIONING,
        Tier.BURST,
    )
    due.process_due(now=at("11:58"))
    assert fresh(claim).notice_due_at == at("12:00")  # R4 takes it back for the booking
    due.process_due(now=at("12:00"))
    assert fresh(booked).status == Status.PROVISIONING
