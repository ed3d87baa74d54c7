"""The request form books ahead, the pool page shows a pool at a glance and its week,
and bad input on these pages is a field error, never a 500."""

from datetime import timedelta

from django.urls import reverse
from django.utils import timezone

from rental.loans import admission
from rental.models import Pool, Reservation
from tests.rental.loans.conftest import at

Status = Reservation.Status


def form(f0, **changes):
    return {
        "project": f0.alpha.pk,
        "gpu_model": f0.model.pk,
        "gpu_count": "4",
        "duration_hours": "8",
        "priority": "experiment",
        "market": "on_demand",
        **changes,
    }


def test_the_form_books_a_future_slot(f0, client):
    client.force_login(f0.alice)
    response = client.post(
        reverse("rental:lease_new"), form(f0, start_mode="later", start_at="2099-04-06T09:00")
    )
    lease = Reservation.objects.get()
    assert response.status_code == 302
    assert (lease.status, lease.is_reservation, lease.start.isoformat()) == (
        Status.SCHEDULED,
        True,
        "2099-04-06T09:00:00+00:00",
    )


def test_the_estimate_previews_a_booking_and_its_conflict(f0, client):
    client.force_login(f0.alice)
    ok = client.post(
        reverse("rental:lease_estimate"),
        form(f0, start_mode="later", start_at="2099-04-06T09:00"),
        HTTP_HX_REQUEST="true",
    ).content.decode()
    assert 'data-outcome="scheduled"' in ok
    client.post(
        reverse("rental:lease_new"), form(f0, start_mode="later", start_at="2099-04-06T09:00")
    )
    client.force_login(f0.gary)
    clash = client.post(
        reverse("rental:lease_estimate"),
        form(
            f0,
            project=f0.gamma.pk,
            gpu_count="1",
            duration_hours="2",
            start_mode="later",
            start_at="2099-04-06T16:00",
        ),
        HTTP_HX_REQUEST="true",
    ).content.decode()
    assert 'data-outcome="refused"' in clash
    assert "[16:00, 17:00) would need 9 of 8 GPUs" in clash


def test_bad_dates_are_field_errors(f0, client):
    client.force_login(f0.alice)
    for changes, field in (
        ({"start_mode": "later", "start_at": "next monday"}, "start_at"),
        ({"start_mode": "later", "start_at": ""}, "start_at"),
        ({"start_mode": "later", "start_at": "2001-01-01T09:00"}, "start"),
    ):
        response = client.post(reverse("rental:lease_new"), form(f0, **changes))
        assert response.status_code == 400, changes
        page = response.content.decode()
        assert f'id="error-{field}"' in page or 'id="form-errors"' in page
    assert not Reservation.objects.exists()


def test_the_pool_page_shows_the_glance_and_the_week(f0, client):
    admission.submit_reservation(
        actor=f0.alice,
        project=f0.alpha,
        gpu_model=f0.model,
        gpu_count=4,
        duration_hours=8,
        priority="experiment",
        market="on_demand",
        start=at("09:00"),
        now=at("12:00", day=3),
    )
    client.force_login(f0.bob)
    page = client.get(
        reverse("rental:pool", kwargs={"pk": f0.pool.pk}), {"week": "2026-04-08"}
    ).content.decode()
    assert "Week of 2026-04-06" in page
    # Monday 09:00–16:00: alpha's 4 exceed its G 2 by 2; Σ G = 6, so 0 free.
    assert 'id="week-20260406-09" data-reserved="2" data-free="0"' in page
    assert 'id="week-20260406-17" data-reserved="0" data-free="2"' in page
    assert 'id="pool-guaranteed">6<' in page
    assert "alice" not in page and "alpha" not in page  # aggregates only


def test_the_pool_page_says_when_it_is_degraded(f0, client):
    Pool.objects.filter(pk=f0.pool.pk).update(capacity=5)
    client.force_login(f0.admin)
    page = client.get(reverse("rental:pool", kwargs={"pk": f0.pool.pk}), {"week": "bad"})
    assert page.status_code == 200
    assert 'id="pool-degraded"' in page.content.decode()


def test_outsiders_do_not_see_pools(f0, client):
    client.force_login(f0.outsider)
    assert client.get(reverse("rental:pool", kwargs={"pk": f0.pool.pk})).status_code == 404
    assert client.get(reverse("rental:pools")).status_code == 404


def test_the_estimate_says_a_booking_over_the_ceiling_goes_to_the_manager(f0, client):
    """L over time: alpha (L 6) runs 4 GPUs for a long lease; booking 4 more during it
    waits for a manager, and the estimate says so before the engineer sends it."""
    client.force_login(f0.alice)
    client.post(reverse("rental:lease_new"), form(f0, duration_hours="48"))
    assert Reservation.objects.get().status == Status.PROVISIONING
    later = form(f0, start_mode="later", start_at="2099-04-06T09:00")
    preview = client.post(
        reverse("rental:lease_estimate"), later, HTTP_HX_REQUEST="true"
    ).content.decode()
    assert 'data-outcome="scheduled"' in preview  # the long lease is over by 2099
    soon = (timezone.now() + timedelta(days=1)).strftime("%Y-%m-%dT%H:00")
    preview = client.post(
        reverse("rental:lease_estimate"),
        form(f0, start_mode="later", start_at=soon),
        HTTP_HX_REQUEST="true",
    ).content.decode()
    assert 'data-outcome="approval"' in preview
    assert "it would run 8 GPUs, its ceiling is 6" in preview
    client.post(reverse("rental:lease_new"), form(f0, start_mode="later", start_at=soon))
    booked = Reservation.objects.get(is_reservation=True)
    assert (booked.status, booked.status_code) == (Status.PENDING_APPROVAL, "over_ceiling")


def test_a_booking_start_refused_by_the_rules_is_an_error_on_the_start_field(f0, client):
    client.force_login(f0.alice)
    for start, message in (
        ("2020-04-06T09:00", "The start is in the past."),
        ("9999-12-31T23:00", "The start is too far ahead."),
    ):
        response = client.post(
            reverse("rental:lease_new"), form(f0, start_mode="later", start_at=start)
        )
        assert response.status_code in (200, 400)
        errors = response.context["form"].errors
        assert errors.get("start_at") == [message], errors
        assert "__all__" not in errors
    assert not Reservation.objects.exists()
