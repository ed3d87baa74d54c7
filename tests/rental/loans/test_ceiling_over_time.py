"""L over time: a project's ceiling holds at every instant, its running leases counted to
their end and its bookings over their windows. A booking that would take the project
over L beside the leases still running at its start, a lease admitted now that would do
so when a booking starts, an extension into a booking and a move of a booking onto
running leases all go to the manager or are refused; the queue keeps such a lease
waiting, saying why. Fixture F0: alpha G 2, L 6; C = 8."""

import pytest

from portal.errors import QuotaExceeded
from rental.loans import ending, extension, queue
from rental.loans.reservations import reschedule_reservation
from rental.loans.waiting import wait_hint
from rental.models import Reservation, Tier
from tests.rental.loans.conftest import at
from tests.rental.loans.test_reservations import book, fresh

Status = Reservation.Status


def test_a_booking_beside_leases_still_running_at_its_start_goes_to_the_manager(f0, lease):
    running = lease(f0.alpha, 4, at("08:00"), hours=4)  # burst, until 12:00
    assert (running.status, running.tier) == (Status.PROVISIONING, Tier.BURST)
    over = book(f0, f0.alpha, 4, at("10:00"), at("11:00"), now=at("08:30"))
    assert (over.status, over.status_code) == (Status.PENDING_APPROVAL, "over_ceiling")
    assert "2026-04-06 [10:00, 11:00) it would run 8 GPUs, its ceiling is 6" in (
        str(over.status_message)
    )
    within = book(f0, f0.alpha, 2, at("10:00"), at("11:00"), now=at("08:31"))
    after = book(f0, f0.alpha, 4, at("12:00"), at("13:00"), now=at("08:32"))
    assert within.status == after.status == Status.SCHEDULED


def test_a_production_booking_is_not_judged_by_todays_use(f0, lease):
    lease(f0.alpha, 2, at("08:00"), priority="production", hours=1)  # alpha's G is in use
    booked = book(f0, f0.alpha, 2, at("10:00"), at("11:00"), now=at("08:10"), priority="production")
    assert (booked.status, booked.tier) == (Status.SCHEDULED, Tier.RESERVED)


def test_a_lease_now_that_would_pass_l_when_a_booking_starts_goes_to_the_manager(f0, lease):
    book(f0, f0.alpha, 4, at("10:00"), at("12:00"), now=at("08:00"))
    over = lease(f0.alpha, 3, at("08:10"), hours=4)  # until 12:10: 3 + 4 = 7 > 6 at 10:00
    assert (over.status, over.status_code) == (Status.PENDING_APPROVAL, "over_ceiling")
    assert "[10:00, 12:00) it would run 7 GPUs, its ceiling is 6" in str(over.status_message)
    short = lease(f0.alpha, 3, at("08:11"), hours=1)  # over at 09:11, before the booking
    assert short.status == Status.PROVISIONING
    beside = lease(f0.gamma, 4, at("08:12"), hours=4)  # another project's L is its own
    assert beside.status == Status.PROVISIONING


def test_the_queue_keeps_a_lease_that_would_pass_l_beside_a_booking(f0, lease):
    lease(f0.beta, 4, at("08:00"))
    gamma = lease(f0.gamma, 4, at("08:00"))  # the pool is full
    waiting = lease(f0.alpha, 3, at("08:05"), hours=4)  # until at least 12:05
    assert waiting.status == Status.QUEUED
    book(f0, f0.alpha, 4, at("10:00"), at("12:00"), now=at("08:10"))  # 4 ≤ 6: queued ones wait
    ending.end_reservation(actor=f0.gary, reservation=gamma, now=at("08:20"))
    queue.admit_queued(gpu_model=f0.model, now=at("08:20"))
    held = fresh(waiting)
    assert (held.status, held.status_code) == (Status.QUEUED, queue.CEILING_BOOKED)
    assert "it would run 7 GPUs, its ceiling is 6" in str(held.status_message)
    assert "under the project's ceiling beside its bookings" in wait_hint(held)
    cancelled = Reservation.objects.get(is_reservation=True)
    ending.end_reservation(actor=f0.alice, reservation=cancelled, now=at("08:30"))
    queue.admit_queued(gpu_model=f0.model, now=at("08:30"))
    assert fresh(waiting).status == Status.PROVISIONING


def test_an_extension_into_a_booking_over_l_goes_to_the_manager(f0, lease):
    running = lease(f0.alpha, 3, at("08:00"), hours=1)  # until 09:00
    book(f0, f0.alpha, 4, at("10:00"), at("11:00"), now=at("08:05"))
    asked = extension.extend_reservation(
        actor=f0.alice, reservation=running, hours=2, now=at("08:30")
    )
    assert (asked.end, asked.extension_until) == (at("09:00"), at("11:00"))
    ok = extension.extend_reservation(actor=f0.alice, reservation=running, hours=1, now=at("08:31"))
    assert (ok.end, ok.extension_until) == (at("10:00"), None)  # ends as the booking starts


def test_moving_a_booking_onto_running_leases_over_l_is_refused(f0, lease):
    lease(f0.alpha, 3, at("08:00"), hours=4)  # until 12:00
    booked = book(f0, f0.alpha, 4, at("13:00"), at("14:00"), now=at("08:05"))
    with pytest.raises(QuotaExceeded) as refused:
        reschedule_reservation(
            actor=f0.alice, reservation=booked, start=at("11:00"), now=at("08:10")
        )
    assert refused.value.code == "over_ceiling"
    assert refused.value.figures["needed"] == 7 and refused.value.figures["ceiling"] == 6
    assert (fresh(booked).start, fresh(booked).end) == (at("13:00"), at("14:00"))
    moved = reschedule_reservation(
        actor=f0.alice, reservation=booked, start=at("12:00"), now=at("08:11")
    )
    assert moved.start == at("12:00")
