"""Moving or resizing a booking from its page and through the API (R2 on updates, R3):
the new window is admitted without counting the booking's own old one, a change that
does not fit is refused with the conflict and its figures and leaves the booking as it
was, and only who may act on the lease may change it."""

from datetime import timedelta

import pytest
from django.urls import reverse
from django.utils import timezone

from portal.models import AuditEvent
from rental.loans import admission
from rental.models import Reservation
from tests.api.leases_world import client_for

Status = Reservation.Status


@pytest.fixture
def monday():
    """09:00 UTC a week ahead: every booking here is in the future, as R1 wants."""
    return (timezone.now() + timedelta(days=7)).replace(hour=9, minute=0, second=0, microsecond=0)


def book(f0, project, gpus, start, hours):
    return admission.submit_reservation(
        actor=f0.engineer_of(project),
        project=project,
        gpu_model=f0.model,
        gpu_count=gpus,
        duration_hours=str(hours),
        priority="experiment",
        market="on_demand",
        start=start,
    )


def as_form(start, hours, gpus) -> dict:
    return {"start": start.strftime("%Y-%m-%dT%H:%M"), "duration_hours": hours, "gpu_count": gpus}


def test_it_moves_a_booking_from_its_page(f0, monday, client):
    alpha = book(f0, f0.alpha, 4, monday, 8)
    client.force_login(f0.alice)
    page = client.get(reverse("rental:lease", args=[alpha.pk])).content.decode()
    assert 'id="lease-reschedule"' in page
    later = monday + timedelta(hours=1)
    response = client.post(
        reverse("rental:lease_reschedule", args=[alpha.pk]), as_form(later, "8", 4), follow=True
    )
    alpha.refresh_from_db()
    assert (alpha.start, alpha.end, alpha.gpu_count) == (later, later + timedelta(hours=8), 4)
    assert "now runs" in response.content.decode()
    assert AuditEvent.objects.filter(verb="lease.rescheduled", source="web").exists()


def test_a_change_that_does_not_fit_is_refused_with_its_figures_and_changes_nothing(
    f0, monday, client
):
    alpha = book(f0, f0.alpha, 4, monday, 8)  # [09, 17): Σ E = 4 + 4 + 0 = 8
    gamma = book(f0, f0.gamma, 1, monday + timedelta(hours=8), 1)  # [17, 18)
    before = Reservation.objects.get(pk=gamma.pk)
    client.force_login(f0.gary)
    response = client.post(
        reverse("rental:lease_reschedule", args=[gamma.pk]),
        as_form(monday + timedelta(hours=7), "2", 1),  # [16, 18) meets alpha's [16, 17)
        follow=True,
    )
    assert "would need 9 of 8 GPUs" in response.content.decode()
    after = Reservation.objects.get(pk=gamma.pk)
    assert (after.start, after.end, after.gpu_count, after.updated_at) == (
        before.start,
        before.end,
        before.gpu_count,
        before.updated_at,
    )
    assert alpha.status == Status.SCHEDULED


def test_bad_input_is_named_and_changes_nothing(f0, monday, client):
    alpha = book(f0, f0.alpha, 4, monday, 8)
    client.force_login(f0.alice)
    for form, field, says in (
        ({"start": "next monday", "duration_hours": "8", "gpu_count": "4"}, "start", "date"),
        (as_form(monday, "0", 4), "duration_hours", "0.25"),
        (as_form(monday, "8", 10**9), "gpu_count", "1024"),
        (as_form(timezone.now() - timedelta(days=1), "8", 4), "start", "past"),
    ):
        response = client.post(reverse("rental:lease_reschedule", args=[alpha.pk]), form)
        assert response.status_code == 400  # the lease page again, the field marked
        error = response.content.decode().split(f'id="id_{field}_error">', 1)[1]
        assert says in error.split("</div>", 1)[0], form
    assert Reservation.objects.get(pk=alpha.pk).start == monday


def test_only_who_may_act_on_the_lease_may_move_it(f0, monday, client):
    alpha = book(f0, f0.alpha, 4, monday, 8)
    for outsider in (f0.bob, f0.gary):
        client.force_login(outsider)
        response = client.post(
            reverse("rental:lease_reschedule", args=[alpha.pk]),
            as_form(monday + timedelta(hours=1), "8", 4),
        )
        assert response.status_code == 404
    assert Reservation.objects.get(pk=alpha.pk).start == monday


def test_the_api_moves_and_refuses_with_the_conflict(f0, monday):
    alpha = book(f0, f0.alpha, 4, monday, 8)
    gamma = book(f0, f0.gamma, 1, monday + timedelta(hours=8), 1)
    url = f"/api/v1/leases/{gamma.pk}/reschedule"
    refused = client_for(f0.gary).post(
        url, {"start": (monday + timedelta(hours=7)).isoformat()}, format="json"
    )
    assert refused.status_code == 409
    assert refused.json()["code"] == "reservation_conflict"
    assert refused.json()["figures"]["needed"] == 9
    moved = client_for(f0.gary).post(
        url,
        {"start": (monday + timedelta(hours=9)).isoformat(), "duration_hours": "2"},
        format="json",
    )
    assert moved.status_code == 200, moved.content
    assert moved.json()["start"].startswith((monday + timedelta(hours=9)).strftime("%Y-%m-%dT%H"))
    gamma.refresh_from_db()
    assert gamma.end - gamma.start == timedelta(hours=2)
    booked = (gamma.start, gamma.end, gamma.gpu_count, gamma.updated_at)
    unchanged = client_for(f0.gary).post(url, {}, format="json")  # nothing to move
    assert unchanged.status_code == 200, unchanged.content
    gamma.refresh_from_db()
    assert (gamma.start, gamma.end, gamma.gpu_count, gamma.updated_at) == booked
    assert client_for(f0.alice).post(url, {"gpu_count": 2}, format="json").status_code == 404
    assert alpha.status == Status.SCHEDULED
