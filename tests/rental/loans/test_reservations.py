"""Bookings ahead of time: R1 validity, R2 admission by sweeping E(t) (scenario 6), R2 on
updates, R3 cancel, R4 start at start − notice, and the pure sweep with other numbers."""

from datetime import timedelta

import pytest

from portal.errors import InvalidInput, InvalidTransition, QuotaExceeded
from portal.models import AuditEvent
from rental.loans import admission, due, ending
from rental.loans.reservation_rules import Booking, first_conflict
from rental.loans.reservations import reschedule_reservation
from rental.models import Quota, Reservation, Tier
from tests.notices import told
from tests.rental.loans.conftest import at

Status = Reservation.Status
NOW = at("12:00", day=3)  # Friday before Monday 2026-04-06


def book(f0, project, gpus, start, end, *, now=NOW, **kwargs):
    hours = (end - start).total_seconds() / 3600
    return admission.submit_reservation(
        actor=f0.engineer_of(project),
        project=project,
        gpu_model=f0.model,
        gpu_count=gpus,
        duration_hours=str(hours),
        priority=kwargs.pop("priority", "experiment"),
        market=kwargs.pop("market", "on_demand"),
        start=start,
        now=now,
        **kwargs,
    )


def fresh(lease):
    return Reservation.objects.get(pk=lease.pk)


# Scenario 6
def test_scenario_6_capacity_over_a_window(f0):
    alpha = book(f0, f0.alpha, 4, at("09:00"), at("17:00"))
    assert (alpha.status, alpha.tier, alpha.is_reservation) == (
        Status.SCHEDULED,
        Tier.RESERVED,
        True,
    )
    with pytest.raises(QuotaExceeded) as refused:
        book(f0, f0.gamma, 1, at("16:00"), at("18:00"))
    assert refused.value.code == "reservation_conflict"
    assert "2026-04-06 [16:00, 17:00) would need 9 of 8 GPUs" in refused.value.message
    assert Reservation.objects.count() == 1

    gamma = book(f0, f0.gamma, 1, at("17:00"), at("18:00"))  # ends before starts
    beta = book(f0, f0.beta, 4, at("10:00"), at("12:00"))  # within its guarantee
    assert (gamma.status, beta.status) == (Status.SCHEDULED, Status.SCHEDULED)


def test_r2_with_other_numbers(f0):
    Quota.objects.filter(project=f0.beta).update(guaranteed=1)
    # Σ G = 3: alpha 2, beta 1. beta books 5 for [10, 14): E = 2 + 5 + 0 = 7.
    book(f0, f0.beta, 5, at("10:00"), at("14:00"))
    # gamma 2 over [13, 15): [13, 14) would be 2 + 5 + 2 = 9.
    with pytest.raises(QuotaExceeded, match=r"\[13:00, 14:00\) would need 9 of 8"):
        book(f0, f0.gamma, 2, at("13:00"), at("15:00"))
    book(f0, f0.gamma, 1, at("13:00"), at("15:00"))  # 8 fits exactly


@pytest.mark.parametrize(
    ("start", "hours", "market", "field"),
    [
        (at("11:59", day=3), 1, "on_demand", "start"),  # in the past
        (at("09:00"), 169, "on_demand", "duration_hours"),  # longer than the maximum
        (at("09:00"), 0, "on_demand", "duration_hours"),
        (at("09:00"), 2, "spot", "market"),
    ],
)
def test_r1_field_errors_write_nothing(f0, start, hours, market, field):
    with pytest.raises(InvalidInput) as refused:
        admission.submit_reservation(
            actor=f0.alice,
            project=f0.alpha,
            gpu_model=f0.model,
            gpu_count=1,
            duration_hours=hours,
            priority="experiment",
            market=market,
            start=start,
            now=NOW,
        )
    assert refused.value.field == field
    assert not Reservation.objects.exists()


def test_r1_more_than_the_ceiling_is_a_field_error(f0):
    with pytest.raises(InvalidInput) as refused:
        book(f0, f0.gamma, 5, at("09:00"), at("10:00"))
    assert refused.value.field == "gpu_count"


def test_an_update_does_not_count_its_own_old_window(f0):
    alpha = book(f0, f0.alpha, 4, at("09:00"), at("17:00"))
    # Moving alpha's 4 one hour later overlaps its old window: only the new one counts.
    moved = reschedule_reservation(
        actor=f0.alice, reservation=alpha, start=at("10:00"), end=at("18:00"), now=NOW
    )
    assert (moved.start, moved.end) == (at("10:00"), at("18:00"))
    assert AuditEvent.objects.filter(verb="lease.rescheduled", object_id=str(alpha.pk)).exists()


def test_a_refused_change_leaves_the_booking_as_it_was(f0):
    alpha = book(f0, f0.alpha, 4, at("09:00"), at("17:00"))
    book(f0, f0.gamma, 1, at("17:00"), at("18:00"))
    before = fresh(alpha)
    with pytest.raises(QuotaExceeded, match=r"\[17:00, 18:00\) would need 9 of 8"):
        reschedule_reservation(actor=f0.alice, reservation=alpha, end=at("18:00"), now=NOW)
    with pytest.raises(QuotaExceeded):
        reschedule_reservation(actor=f0.alice, reservation=alpha, gpu_count=5, now=NOW)
    after = fresh(alpha)
    assert (after.start, after.end, after.gpu_count, after.updated_at) == (
        before.start,
        before.end,
        before.gpu_count,
        before.updated_at,
    )


def test_r3_cancel_before_the_start_is_free(f0):
    alpha = book(f0, f0.alpha, 4, at("09:00"), at("17:00"))
    ending.end_reservation(actor=f0.alice, reservation=alpha, now=at("08:00"))
    gone = fresh(alpha)
    assert gone.status == Status.CANCELLED
    assert not gone.instances.exists()
    book(f0, f0.gamma, 1, at("16:00"), at("18:00"))  # its window is free again


def test_r3_a_started_booking_cannot_move(f0):
    alpha = book(f0, f0.alpha, 4, at("09:00"), at("17:00"))
    due.process_due(now=at("08:58:00"))
    with pytest.raises(InvalidTransition):
        reschedule_reservation(actor=f0.alice, reservation=alpha, start=at("10:00"), now=NOW)


def test_r4_victims_told_at_start_minus_notice_and_free_at_the_start(f0, lease):
    booked = book(f0, f0.alpha, 4, at("09:00"), at("17:00"))
    lease(f0.beta, 4, at("08:00"))
    burst = lease(f0.gamma, 2, at("08:10"))
    spot = lease(f0.gamma, 2, at("08:20"), market="spot")
    assert due.process_due(now=at("08:57:59")) == 0
    assert fresh(burst).notice_due_at is None

    due.process_due(now=at("08:58:00"))
    assert fresh(spot).notice_due_at == at("09:00:00")
    assert fresh(burst).notice_due_at == at("09:00:00")  # spot then burst
    assert len(told(f0.gary, starts="Preempted")) == 2
    # In between, the held GPUs are not given to anyone else.
    late = lease(f0.gamma, 1, at("08:59"))
    assert late.status == Status.QUEUED

    due.process_due(now=at("09:00:00"))
    started = fresh(booked)
    assert (started.status, started.start, started.tier) == (
        Status.PROVISIONING,
        at("09:00:00"),
        Tier.RESERVED,  # 4 > G 2: beyond the guarantee
    )
    assert fresh(spot).status == Status.PREEMPTED
    assert fresh(late).status == Status.QUEUED


def test_r4_a_late_sweep_settles_what_time_already_did_before_the_booking_begins(f0, lease):
    """The worker is down from 09:30 to 10:05. By then gamma's spot lease had ended
    (notice over at 09:32) and gamma's burst lease that waited for it had started; the
    booking must see that burst lease as running, and so takeable, not as a claim on
    GPUs nobody may touch, or it would wait in the queue after its start."""
    booked = book(f0, f0.alpha, 4, at("10:00"), at("11:00"))
    lease(f0.beta, 4, at("08:00"))
    spot = lease(f0.gamma, 4, at("08:10"), market="spot")
    burst = lease(f0.gamma, 2, at("09:30"), priority="learning")
    assert (fresh(spot).notice_due_at, fresh(burst).reclaim_due_at) == (
        at("09:32:00"),
        at("09:32:00"),
    )

    due.process_due(now=at("10:05:00"))
    assert fresh(spot).status == Status.PREEMPTED
    taken = fresh(burst)
    assert (taken.status, taken.tier) == (Status.PREEMPTED, Tier.BURST)
    started = fresh(booked)
    assert (started.status, started.tier, started.end) == (
        Status.PROVISIONING,
        Tier.RESERVED,
        at("11:00"),  # late, but it still ends when it was booked to
    )


def test_r4_a_booking_within_the_guarantee_runs_guaranteed(f0):
    booked = book(f0, f0.alpha, 2, at("09:00"), at("10:00"))
    due.process_due(now=at("09:00"))
    assert (fresh(booked).status, fresh(booked).tier) == (Status.PROVISIONING, Tier.GUARANTEED)


def test_cancelling_a_starting_booking_calls_off_its_notices(f0, lease):
    booked = book(f0, f0.alpha, 4, at("09:00"), at("17:00"))
    lease(f0.beta, 4, at("08:00"))
    spot = lease(f0.gamma, 4, at("08:20"), market="spot")
    due.process_due(now=at("08:58"))
    assert fresh(spot).notice_due_at is not None
    ending.end_reservation(actor=f0.alice, reservation=booked, now=at("08:59"))
    assert fresh(spot).notice_due_at is None
    due.process_due(now=at("09:00"))
    assert fresh(spot).status == Status.PROVISIONING


# The sweep by itself
T = at("00:00")


def h(hours):
    return T + timedelta(hours=hours)


def test_sweep_ends_before_starts_and_reports_the_first_maximal_interval():
    bookings = [Booking(1, 4, h(9), h(17)), Booking(3, 1, h(17), h(18))]
    guarantees = {1: 2, 2: 4, 3: 0}
    window = {"capacity": 8, "window_start": h(9), "window_end": h(18)}
    assert first_conflict(bookings, guarantees, **window) is None
    bookings.append(Booking(3, 1, h(15), h(16)))
    bookings.append(Booking(3, 1, h(16), h(17)))
    conflict = first_conflict(bookings, guarantees, **window)
    assert (conflict.start, conflict.end, conflict.needed) == (h(15), h(17), 9)


def test_sweep_a_booking_within_the_guarantee_always_fits():
    guarantees = {1: 2, 2: 6}
    assert (
        first_conflict(
            [Booking(2, 6, h(1), h(5))],
            guarantees,
            capacity=8,
            window_start=h(1),
            window_end=h(5),
        )
        is None
    )
