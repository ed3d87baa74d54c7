"""The request form: the HTMX estimate previews admission, and bad input is answered on
its field with nothing written (Q2, R1)."""

import re

import pytest
from django.urls import reverse

from rental.loans import admission
from rental.models import Quota, Reservation
from tests import factories


@pytest.fixture
def form_data(f0):
    return {
        "project": f0.alpha.pk,
        "gpu_model": f0.model.pk,
        "gpu_count": "2",
        "duration_hours": "3",
        "priority": "experiment",
        "market": "on_demand",
        "purpose": "tests",
    }


def outcome(response) -> str:
    return re.search(r'data-outcome="([a-z]+)"', response.content.decode())[1]


def total(response) -> str:
    return re.search(r'id="estimate-total">([^<]*)<', response.content.decode())[1]


def estimate(client, data, **changes):
    return client.post(
        reverse("rental:lease_estimate"), {**data, **changes}, HTTP_HX_REQUEST="true"
    )


def test_it_estimates_price_and_tier(f0, client, form_data):
    client.force_login(f0.alice)
    response = estimate(client, form_data)
    assert response.status_code == 200
    assert (outcome(response), total(response)) == ("guaranteed", "$15.00")
    assert outcome(estimate(client, form_data, gpu_count="4")) == "burst"
    spot = estimate(client, form_data, market="spot")
    assert (outcome(spot), total(spot)) == ("spot", "$6.00")
    assert not Reservation.objects.exists()  # an estimate writes nothing


def test_it_previews_the_manager_and_the_refusal(f0, client, form_data, t0):
    # The guarantee is held by a production lease: no lower-priority lease of the
    # project could give it back (Q6), so another production lease is refused.
    for priority in ("production", "experiment", "experiment"):
        admission.submit_reservation(
            actor=f0.alice,
            project=f0.alpha,
            gpu_model=f0.model,
            gpu_count=2,
            duration_hours=1,
            priority=priority,
            market="on_demand",
        )
    client.force_login(f0.alice)
    assert outcome(estimate(client, form_data, gpu_count="1")) == "approval"
    refused = estimate(client, form_data, gpu_count="1", priority="production")
    assert outcome(refused) == "refused"
    assert "production_over_guarantee" in refused.content.decode()


def test_it_submits_and_redirects_to_the_lease(f0, client, form_data):
    client.force_login(f0.alice)
    response = client.post(reverse("rental:lease_new"), form_data)
    lease = Reservation.objects.get()
    assert response.status_code == 302
    assert response["Location"] == lease.get_absolute_url()
    assert (lease.gpu_count, lease.tier, lease.requester) == (2, "guaranteed", f0.alice)


@pytest.mark.parametrize(
    ("field", "value"),
    [
        ("gpu_count", "7"),
        ("gpu_count", "-1"),
        ("duration_hours", "0"),
        ("duration_hours", "lots"),
        ("duration_hours", "9999"),
        ("priority", "urgent"),
        ("market", "cheap"),
        ("gpu_model", "999999"),
        ("project", "oops"),
    ],
)
def test_it_names_the_field_and_writes_nothing(f0, client, form_data, field, value):
    client.force_login(f0.alice)
    response = client.post(reverse("rental:lease_new"), {**form_data, field: value})
    assert response.status_code in (400, 409)
    assert f'id="error-{field}"' in response.content.decode()
    assert not Reservation.objects.exists()


def test_it_refuses_production_over_the_guarantee_on_the_priority_field(f0, client, form_data):
    client.force_login(f0.alice)
    response = client.post(
        reverse("rental:lease_new"), {**form_data, "gpu_count": "3", "priority": "production"}
    )
    assert response.status_code == 409
    assert 'id="error-priority"' in response.content.decode()
    assert not Reservation.objects.exists()


def test_a_new_form_starts_on_a_model_one_gpu_can_be_launched_on(f0, client):
    """alpha has quotas for two models; "A10 24GB" (first by name) is sold only as
    8-GPU instances, so the form opens on A100 80GB, whose 1-GPU offering fits its
    first values, instead of on a refusal."""
    small = factories.gpu_model("A10 24GB")
    factories.offering(f0.account, small, instance_type="test.a10x8", gpus=8)
    Quota.objects.create(project=f0.alpha, gpu_model=small, guaranteed=0, ceiling=8)
    client.force_login(f0.alice)
    page = client.get(reverse("rental:lease_new"))
    form = page.context["form"]
    assert [m.name for m in form.fields["gpu_model"].queryset] == ["A10 24GB", "A100 80GB"]
    assert form.current_gpu_model == f0.model and form.initial["gpu_model"] == f0.model
    assert outcome(page) != "refused"
