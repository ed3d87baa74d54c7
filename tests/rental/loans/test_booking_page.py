"""A booking's page says once, to the minute, when its GPUs are held; moved, it says the
new time (the lease list shows the same sentence)."""

from datetime import timedelta

import pytest
from django.urls import reverse
from django.utils import timezone

from rental.loans import admission


@pytest.fixture
def monday():
    """09:00 UTC a week ahead: a booking there is in the future, as R1 wants."""
    return (timezone.now() + timedelta(days=7)).replace(hour=9, minute=0, second=0, microsecond=0)


def book(f0, start):
    return admission.submit_reservation(
        actor=f0.alice,
        project=f0.alpha,
        gpu_model=f0.model,
        gpu_count=2,
        duration_hours="8",
        priority="experiment",
        market="on_demand",
        start=start,
    )


def test_it_says_once_when_a_booking_starts_without_seconds(f0, monday, client):
    lease = book(f0, monday)
    client.force_login(f0.alice)
    page = client.get(reverse("rental:lease", args=[lease.pk])).content.decode()
    sentence = f"Booked: the GPUs are held for it from {monday:%Y-%m-%d} 09:00 UTC."
    assert page.count(sentence) == 1
    assert f"{monday:%Y-%m-%d} 09:00:00" not in page
    assert "It starts at" not in page
    listing = client.get(reverse("rental:leases")).content.decode()
    assert sentence in listing


def test_a_moved_booking_says_its_new_start(f0, monday, client):
    lease = book(f0, monday)
    later = monday + timedelta(hours=3)
    client.force_login(f0.alice)
    client.post(
        reverse("rental:lease_reschedule", args=[lease.pk]),
        {"start": later.strftime("%Y-%m-%dT%H:%M"), "duration_hours": "8", "gpu_count": 2},
    )
    lease.refresh_from_db()
    assert lease.start == later
    page = client.get(reverse("rental:lease", args=[lease.pk])).content.decode()
    assert f"Booked: the GPUs are held for it from {later:%Y-%m-%d} 12:00 UTC." in page
    assert f"{monday:%Y-%m-%d} 09:00 UTC." not in page
