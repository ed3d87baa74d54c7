"""Bad input found by probing answers 400 or a clear refusal, never a 500."""

import pytest
from django.urls import reverse

from portal.errors import QuotaExceeded
from rental.loans import admission
from rental.models import Quota, QuotaRequest, Reservation


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


def test_it_shows_the_sites_own_400_page_in_the_persons_language(f0, client):
    client.force_login(f0.alice)
    response = client.get("/leases/?project=%00", HTTP_ACCEPT_LANGUAGE="zh-hans")
    page = response.content.decode()
    assert response.status_code == 400
    assert 'class="mainnav"' in page  # the site's layout, navigation included
    assert "NUL" in page and "不允许" in page  # in Chinese, with a way back
    assert reverse("dashboard") in page


@pytest.mark.parametrize(
    ("typed", "says"),
    [
        ("a\x00b", "NUL"),
        ("fine-tune \u202eevil", "U+202E"),
        ("fine\x07tune", "U+0007"),
        ("x" * 301, "301"),
    ],
)
def test_it_refuses_a_bad_purpose_on_its_field_and_keeps_the_form(f0, client, typed, says):
    client.force_login(f0.alice)
    data = {"project": f0.alpha.pk, "gpu_model": f0.model.pk, "gpu_count": 1}
    data |= {"duration_hours": 2, "priority": "experiment", "market": "on_demand"}
    response = client.post(reverse("rental:lease_new"), {**data, "purpose": typed})
    assert response.status_code == 400  # the form again, its field marked
    assert says in str(response.context["form"].errors["purpose"])
    assert 'name="gpu_count"' in response.content.decode()  # the form, to fix and send
    assert Reservation.objects.count() == 0
    estimate = client.post(
        reverse("rental:lease_estimate"), {**data, "purpose": typed}, HTTP_HX_REQUEST="true"
    )
    assert estimate.status_code == 200 and "estimate" in estimate.content.decode()


@pytest.mark.parametrize(
    ("reason", "says"),
    [
        ("a\x00b", "NUL"),
        ("\u2067more\u2069", "U+2067"),
        ("w" * 5000, "5000"),
    ],
)
def test_it_refuses_a_bad_quota_change_reason_on_its_field(f0, client, reason, says):
    client.force_login(f0.alice)
    response = client.post(
        reverse("rental:quota_request_new", args=[f0.alpha.slug]),
        {"gpu_model": f0.model.pk, "ceiling": "6", "reason": reason},
    )
    assert response.status_code == 400  # the project page again, the reason's field marked
    assert says in str(response.context["quota_request_form"].errors["reason"])
    assert not QuotaRequest.objects.exists()


def test_it_refuses_bad_text_in_the_api_on_its_field(f0, client):
    client.force_login(f0.alice)
    response = client.post(
        "/api/v1/leases",
        {
            "project": f0.alpha.slug,
            "gpu_model": f0.model.pk,
            "gpu_count": 1,
            "duration_hours": 2,
            "priority": "experiment",
            "market": "on_demand",
            "purpose": "\u202egnp.exe",
        },
        content_type="application/json",
    )
    assert response.status_code == 400, response.content
    assert "purpose" in response.json().get("errors", {}) or response.json().get("field") == (
        "purpose"
    )
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
