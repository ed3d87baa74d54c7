"""The admission-check hook (``PORTAL_ADMISSION_CHECKS``): rental asks every named check
and refuses with its code and message; nothing is written. Billing's budget cap plugs in
here without rental importing billing."""

import pytest
from django.urls import reverse

from portal.errors import DomainError
from rental.models import Reservation
from tests.loan.conftest import at

CALLS: list[dict] = []


def refuse_burst(**kwargs):
    CALLS.append(kwargs)
    if kwargs["tier"] in ("burst", "spot"):
        return ("budget_cap", f"{kwargs['project'].slug} has spent its budget for the month.")
    return None


def allow(**kwargs):
    CALLS.append(kwargs)
    return None


@pytest.fixture(autouse=True)
def _fresh_calls():
    CALLS.clear()


@pytest.fixture
def checks(settings):
    settings.PORTAL_ADMISSION_CHECKS = [
        "tests.loan.test_admission_checks.allow",
        "tests.loan.test_admission_checks.refuse_burst",
    ]


def test_it_passes_the_contracts_arguments(f0, lease, checks):
    made = lease(f0.alpha, 2, at("10:00"), hours=3)
    assert made.tier == "guaranteed"
    assert CALLS[0] == {
        "project": f0.alpha,
        "gpu_model": f0.model,
        "gpu_count": 2,
        "tier": "guaranteed",
        "market": "on_demand",
        "starts_at": at("10:00"),
        "ends_at": at("13:00"),
        "is_reservation": False,
        "now": at("10:00"),
    }


def test_a_refusing_check_refuses_with_its_code_and_writes_nothing(f0, lease, checks):
    lease(f0.alpha, 2, at("10:00"))
    with pytest.raises(DomainError) as refused:
        lease(f0.alpha, 2, at("10:01"))  # burst
    assert (refused.value.code, refused.value.status) == ("budget_cap", 409)
    assert refused.value.message == "alpha has spent its budget for the month."
    assert Reservation.objects.count() == 1


def test_the_form_shows_the_refusal(f0, client, checks):
    client.force_login(f0.gary)
    response = client.post(
        reverse("rental:lease_new"),
        {
            "project": f0.gamma.pk,
            "gpu_model": f0.model.pk,
            "gpu_count": "1",
            "duration_hours": "2",
            "priority": "experiment",
            "market": "on_demand",
        },
    )
    assert response.status_code == 409
    assert "gamma has spent its budget for the month." in response.content.decode()
    assert not Reservation.objects.exists()


def test_only_the_configured_checks_are_asked(f0, lease, settings):
    # By default the one check is billing's budget cap; rental names no check itself.
    assert settings.PORTAL_ADMISSION_CHECKS == ["billing.admission.budget_cap"]
    lease(f0.gamma, 2, at("10:00"))
    assert CALLS == []
