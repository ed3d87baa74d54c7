"""The pool's week sweeps only the projects whose bookings in the week add up to more than
their guarantee; the steps are those of sweeping every booking."""

import random
from datetime import UTC, datetime, timedelta

import pytest
from django.db import connection
from django.test.utils import CaptureQueriesContext

from rental.loans import pool_week, reservations
from rental.models import Quota, Reservation
from tests.billing.helpers import lease

MONDAY = datetime(2026, 4, 6, tzinfo=UTC)


def booked_at_random(f0, rng, count):
    """Kept leases and bookings of every project over two weeks around MONDAY, some within
    their project's guarantee all week, some past it for a few hours."""
    projects = (f0.alpha, f0.beta, f0.gamma)
    for _ in range(count):
        start = MONDAY + timedelta(hours=rng.randint(-48, 9 * 24), minutes=rng.choice([0, 30]))
        booking = rng.random() < 0.4
        reservation = lease(
            f0,
            rng.choice(projects),
            tier=rng.choice(["guaranteed", "reserved"]),
            gpus=rng.randint(1, 3),
            start=start,
            end=start + timedelta(hours=rng.choice([1, 3, 8, 30, 200])),
            status=rng.choice(["scheduled", "queued"]) if booking else "active",
        )
        if booking:
            Reservation.objects.filter(pk=reservation.pk).update(is_reservation=True)


def every_booking(monkeypatch):
    """The week as sweeping every booking of the pool (what the filter must not change)."""
    monkeypatch.setattr(
        pool_week,
        "bookings_past_guarantee",
        lambda pool, since, until: reservations.bookings(pool),
    )


@pytest.mark.parametrize("seed", [1, 2, 3, 4])
def test_the_week_is_the_sweep_of_every_booking(f0, seed, monkeypatch):
    rng = random.Random(seed)
    Quota.objects.filter(gpu_model=f0.model).update(guaranteed=3)
    booked_at_random(f0, rng, rng.choice([6, 25, 60]))
    pool = f0.pool
    weeks = [MONDAY + timedelta(days=7 * shift) for shift in (-1, 0, 1)]
    filtered = [pool_week.week(pool, since=since) for since in weeks]
    swept = [
        len(pool_week.bookings_past_guarantee(pool, since=s, until=s + timedelta(days=7)))
        for s in weeks
    ]
    every_booking(monkeypatch)
    assert filtered == [pool_week.week(pool, since=since) for since in weeks]
    assert any(step["reserved"] for week in filtered for step in week) or seed == 1
    assert min(swept) < len(reservations.bookings(pool))


def test_projects_within_their_guarantee_are_not_read(f0):
    """Within G all week: its rows are not fetched; one GPU more and they are."""
    Quota.objects.filter(gpu_model=f0.model, project=f0.beta).update(guaranteed=4)
    for hours in range(4):
        lease(
            f0,
            f0.beta,
            start=MONDAY + timedelta(hours=hours),
            end=MONDAY + timedelta(hours=hours + 2),
            status="active",
        )
    until = MONDAY + timedelta(days=7)
    with CaptureQueriesContext(connection) as queries:
        assert pool_week.bookings_past_guarantee(f0.pool, since=MONDAY, until=until) == []
    assert len(queries) == 1
    lease(f0, f0.beta, start=MONDAY, end=until, status="active")
    assert len(pool_week.bookings_past_guarantee(f0.pool, since=MONDAY, until=until)) == 5
