"""Bad input found by probing answers 400 or a clear refusal, never a 500."""

import pytest
from django.urls import reverse

from portal.errors import QuotaExceeded
from rental.loans import admission
from rental.models import Quota, Reservation


@pytest.mark.parametrize(
    "url",
    [
        "/leases/?project=%00",
        "/audit/?verb=%00",
        "/admin/rental/reservation/?status__exact=%00",
        "/admin/portal/auditevent/?q=%00",
    ],
)
def test_it_answers_a_nul_byte_in_a_query_parameter_with_400(f0, client, url):
    client.force_login(f0.admin)
    response = client.get(url)
    assert response.status_code == 400
    assert "NUL" in response.content.decode()


def test_it_answers_a_nul_byte_in_a_form_field_with_400_and_writes_nothing(f0, client):
    client.force_login(f0.alice)
    response = client.post(
        reverse("rental:lease_new"),
        {"project": f0.alpha.pk, "gpu_model": f0.model.pk, "gpu_count": 1, "purpose": "a\x00b"},
    )
    assert response.status_code == 400
    assert Reservation.objects.count() == 0


def test_it_answers_the_api_in_its_error_shape(f0, client):
    client.force_login(f0.alice)
    response = client.get("/api/v1/me?x=%00")
    assert response.status_code == 400
    assert response.json()["code"] == "invalid"


def test_it_answers_a_huge_gpu_count_on_the_estimate_with_a_field_error(f0, client):
    client.force_login(f0.alice)
    response = client.post(
        reverse("rental:lease_estimate"),
        {
            "project": f0.alpha.pk,
            "gpu_model": f0.model.pk,
            "gpu_count": "190000000000000000000000000",
            "duration_hours": "1",
        },
    )
    assert response.status_code == 200
    assert "GPUs: ask for at most 1024." in response.content.decode()
    assert Reservation.objects.count() == 0


def test_it_limits_how_many_requests_one_person_has_waiting(f0, settings):
    settings.PORTAL_MAX_PENDING_PER_USER = 2
    Quota.objects.filter(project=f0.alpha).update(max_hours_per_lease=1)

    def ask():
        return admission.submit_reservation(
            actor=f0.alice,
            project=f0.alpha,
            gpu_model=f0.model,
            gpu_count=1,
            duration_hours=4,
            priority="experiment",
            market="on_demand",
        )

    assert ask().status == Reservation.Status.PENDING_APPROVAL
    assert ask().status == Reservation.Status.PENDING_APPROVAL
    with pytest.raises(QuotaExceeded) as refused:
        ask()
    assert refused.value.code == "too_many_pending"
    assert refused.value.figures == {"pending": 2, "limit": 2}
    assert "(2)" in refused.value.message
    assert Reservation.objects.filter(requester=f0.alice).count() == 2
