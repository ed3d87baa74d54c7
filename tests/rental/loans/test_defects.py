"""Defects found while building the loan model: the dashboard's lease panel goes through
access, and a duration that rounds to zero seconds is a field error, never a 500."""

import pytest
from django.urls import reverse

from portal.errors import InvalidInput
from portal.models import Membership
from rental.loans import admission
from rental.models import Instance, Reservation


def submit(f0, **changes):
    args = {
        "actor": f0.alice,
        "project": f0.alpha,
        "gpu_model": f0.model,
        "gpu_count": 1,
        "duration_hours": 2,
        "priority": "experiment",
        "market": "on_demand",
    }
    return admission.submit_reservation(**{**args, **changes})


def test_it_hides_a_former_projects_lease_from_the_dashboard_panel(f0, client, t0):
    lease = submit(f0, now=t0)
    Instance.objects.filter(reservation=lease).update(
        state=Instance.State.RUNNING, public_address="203.0.113.77"
    )
    client.force_login(f0.alice)
    seen = client.get(reverse("rental:panel_leases"))
    assert f"#{lease.pk}" in seen.content.decode()

    Membership.objects.filter(user=f0.alice, project=f0.alpha).delete()
    f0.alice.refresh_from_db()
    client.force_login(f0.alice)
    hidden = client.get(reverse("rental:panel_leases"))
    assert hidden.status_code == 200
    assert "203.0.113.77" not in hidden.content.decode()
    assert f"#{lease.pk}" not in hidden.content.decode()


@pytest.mark.parametrize("hours", ["0.0001", "0.0002", 0.0002])
def test_it_refuses_a_duration_that_rounds_to_zero_seconds(f0, t0, hours):
    with pytest.raises(InvalidInput) as refused:
        submit(f0, duration_hours=hours, now=t0)
    assert refused.value.field == "duration_hours"
    assert refused.value.code == "too_short"
    assert not Reservation.objects.exists()


def test_it_accepts_one_second(f0, t0):
    lease = submit(f0, duration_hours="0.0003", now=t0)  # 1.08 s → 1 s
    assert (lease.end - lease.start).total_seconds() == 1


@pytest.mark.parametrize(
    ("change", "field"),
    [
        ({"gpu_count": 10**9}, "gpu_count"),
        ({"gpu_count": 0}, "gpu_count"),
        ({"gpu_count": True}, "gpu_count"),
        ({"duration_hours": "169"}, "duration_hours"),
        ({"duration_hours": "NaN"}, "duration_hours"),
        ({"duration_hours": "Infinity"}, "duration_hours"),
    ],
)
def test_it_answers_bad_input_on_its_field(f0, t0, change, field):
    with pytest.raises(InvalidInput) as refused:
        submit(f0, now=t0, **change)
    assert refused.value.field == field
    assert not Reservation.objects.exists()


@pytest.mark.parametrize(
    ("field", "value"),
    [("gpu_count", "1000000000"), ("duration_hours", "0.0001"), ("gpu_model", "abc")],
)
def test_the_form_answers_bad_input_without_a_server_error(f0, client, field, value):
    data = {
        "project": f0.alpha.pk,
        "gpu_model": f0.model.pk,
        "gpu_count": "1",
        "duration_hours": "2",
        "priority": "experiment",
        "market": "on_demand",
    }
    client.force_login(f0.alice)
    response = client.post(reverse("rental:lease_new"), {**data, field: value})
    assert response.status_code in (400, 409)
    assert f'id="error-{field}"' in response.content.decode()
    assert not Reservation.objects.exists()
