"""The queue (Q5): admitted in order whenever room appears, a lease that cannot fit does
not block those behind it, and each waiting lease shows its place and why it waits."""

import re

from django.urls import reverse

from rental.loans import due, ending, queue
from rental.loans.queue import queue_positions
from rental.models import Reservation
from tests.rental.loans.conftest import at

Status = Reservation.Status


def fresh(lease):
    return Reservation.objects.get(pk=lease.pk)


def full_pool(f0, lease):
    """beta 4 guaranteed, alpha 2 guaranteed, gamma 2 burst: no spot, nothing reclaimable
    by a burst request."""
    b = lease(f0.beta, 4, at("09:00"))
    a = lease(f0.alpha, 2, at("09:00"))
    c = lease(f0.gamma, 2, at("09:00"))
    return b, a, c


def test_a_lease_that_cannot_fit_does_not_block_those_behind(f0, lease):
    *_, c = full_pool(f0, lease)
    big = lease(f0.alpha, 3, at("09:10"))  # burst, waits
    small = lease(f0.gamma, 1, at("09:20"))  # burst, waits
    assert (big.status, small.status) == (Status.QUEUED, Status.QUEUED)
    assert queue_positions(f0.model) == {big.pk: 1, small.pk: 2}
    ending.end_reservation(actor=f0.gary, reservation=c, now=at("10:00"))
    admitted = queue.admit_queued(gpu_model=f0.model, now=at("10:00"))
    # 2 free: the 3-GPU lease cannot fit, the 1-GPU one behind it starts.
    assert [x.pk for x in admitted] == [small.pk]
    assert fresh(big).status == Status.QUEUED


def test_room_from_raised_capacity_admits_the_queue(f0, lease):
    full_pool(f0, lease)
    waiting = lease(f0.gamma, 2, at("09:10"))
    f0.pool.capacity = 10
    f0.pool.save()
    assert [x.pk for x in queue.admit_queued(gpu_model=f0.model, now=at("09:30"))] == [waiting.pk]


def test_room_from_a_preemption_admits_the_queue(f0, lease):
    lease(f0.beta, 4, at("09:00"))
    lease(f0.alpha, 2, at("09:00"))
    spot = lease(f0.gamma, 2, at("09:00"), market="spot")
    Reservation.objects.filter(pk=spot.pk).update(requeue_on_preemption=False)
    queued = lease(f0.gamma, 1, at("09:05"), priority="learning")  # burst: takes the spot
    assert fresh(spot).notice_due_at == at("09:07:00")
    due.process_due(now=at("09:07:00"))
    assert fresh(queued).status == Status.PROVISIONING


def test_the_lease_page_shows_place_and_reason_in_words(f0, lease, client):
    full_pool(f0, lease)
    first = lease(f0.gamma, 2, at("09:10"), priority="learning")
    second = lease(f0.alpha, 1, at("09:20"))
    assert queue_positions(f0.model) == {second.pk: 1, first.pk: 2}  # experiment first
    client.force_login(f0.gary)
    page = client.get(reverse("rental:lease", kwargs={"pk": first.pk})).content.decode()
    assert "Place 2 of 2 in the A100 80GB queue." in page
    assert "The pool has 0 of 8 GPUs free" in page
    assert "as soon as 2 GPUs of the pool are free" in page
    assert not re.search(r"no_capacity|over_ceiling|reclaiming", page)


def test_the_lease_page_shows_when_a_reclaiming_lease_starts(f0, lease, client):
    lease(f0.beta, 4, at("09:00"))
    lease(f0.gamma, 4, at("09:00"))
    want = lease(f0.alpha, 2, at("10:00"))
    client.force_login(f0.alice)
    page = client.get(reverse("rental:lease", kwargs={"pk": want.pk})).content.decode()
    assert "It starts at 2026-04-06 10:02:00 UTC" in page
    victim = Reservation.objects.filter(notice_due_at__isnull=False).first()
    client.force_login(f0.gary)
    page = client.get(reverse("rental:lease", kwargs={"pk": victim.pk})).content.decode()
    assert f"Preempted for lease #{want.pk}; ends at 2026-04-06 10:02:00 UTC." in page


def test_a_lease_whose_project_changed_does_not_block_those_behind(f0, lease):
    from rental.models import Pool, Quota

    Pool.objects.filter(pk=f0.pool.pk).update(capacity=5)
    lease(f0.beta, 3, at("09:00"), priority="production")
    alpha = lease(f0.alpha, 2, at("09:00"), priority="production")
    production = lease(f0.beta, 1, at("09:05"), priority="production")  # fits G, no room
    behind = lease(f0.gamma, 1, at("09:06"))  # burst, behind it in Q5 order
    assert (production.status, behind.status) == (Status.QUEUED, Status.QUEUED)
    assert production.notice_due_at is None and production.reclaim_due_at is None
    Quota.objects.filter(project=f0.beta).update(guaranteed=3)  # now over its guarantee
    ending.end_reservation(actor=f0.alice, reservation=alpha, now=at("10:00"))
    admitted = queue.admit_queued(gpu_model=f0.model, now=at("10:00"))
    assert behind.pk in [x.pk for x in admitted]
    assert fresh(production).status == Status.QUEUED
