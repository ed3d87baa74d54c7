"""The admission-check hook (``PORTAL_ADMISSION_CHECKS``): rental asks every named check
and refuses with its code and message; nothing is written. Billing's budget cap plugs in
here without rental importing billing."""

import pytest
from django.urls import reverse

from portal.errors import DomainError
from rental.loans import admission, due, ending, queue
from rental.models import Reservation
from tests.rental.loans.conftest import at

Status = Reservation.Status

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
        "tests.rental.loans.test_admission_checks.allow",
        "tests.rental.loans.test_admission_checks.refuse_burst",
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
    # By default billing's budget cap and GPU-hour hard stop; rental names no check itself.
    assert settings.PORTAL_ADMISSION_CHECKS == [
        "billing.admission.budget_cap",
        "billing.admission.gpu_hour_cap",
    ]
    lease(f0.gamma, 2, at("10:00"))
    assert CALLS == []


# --- Asked again when a waiting lease is admitted later --------------------------------

REFUSING: set[str] = set()


def switchable(**kwargs):
    """Refuses the tiers (or "project:tier") in REFUSING, as the budget cap does once a
    project's money has run out."""
    CALLS.append(kwargs)
    if kwargs["tier"] in REFUSING or f"{kwargs['project'].slug}:{kwargs['tier']}" in REFUSING:
        return ("budget_cap", f"{kwargs['project'].slug} has spent its budget for the month.")
    return None


@pytest.fixture
def switch(settings):
    settings.PORTAL_ADMISSION_CHECKS = ["tests.rental.loans.test_admission_checks.switchable"]
    REFUSING.clear()
    yield REFUSING
    REFUSING.clear()


def fresh(made):
    return Reservation.objects.get(pk=made.pk)


def full_pool(f0, lease):
    """beta 4 and alpha 2 guaranteed, gamma 2 burst: nothing a burst request may take."""
    lease(f0.beta, 4, at("09:00"))
    lease(f0.alpha, 2, at("09:00"))
    return lease(f0.gamma, 2, at("09:00"))


def test_a_queued_lease_is_asked_again_and_stays_queued_with_the_reason(f0, lease, switch, client):
    running = full_pool(f0, lease)
    waiting = lease(f0.gamma, 2, at("09:10"))  # burst, the pool is full
    assert waiting.status == Status.QUEUED
    switch.add("burst")  # gamma's budget runs out while it waits
    ending.end_reservation(actor=f0.gary, reservation=running, now=at("10:00"))
    assert queue.admit_queued(gpu_model=f0.model, now=at("10:00")) == []
    held = fresh(waiting)
    assert (held.status, held.status_code) == (Status.QUEUED, "check:budget_cap")
    assert held.status_message == "gamma has spent its budget for the month."
    assert not held.instances.exists()
    # The check was told about the lease as it would start now, for the time it asked.
    assert CALLS[-1]["tier"] == "burst"
    assert (CALLS[-1]["starts_at"], CALLS[-1]["ends_at"]) == (at("10:00"), at("18:00"))
    assert CALLS[-1]["is_reservation"] is False
    client.force_login(f0.gary)
    page = client.get(reverse("rental:lease", args=[waiting.pk])).content.decode()
    assert "gamma has spent its budget for the month." in page
    assert "once the reason above no longer holds" in page
    assert "check:" not in page and "budget_cap" not in page
    # The budget is raised: the next sweep asks again and the lease starts in its place.
    switch.clear()
    due.process_due(now=at("10:05"))
    started = fresh(waiting)
    assert (started.status, started.tier, started.status_code) == (
        Status.PROVISIONING,
        "burst",
        "",
    )
    assert started.start == at("10:05")


def test_a_held_lease_does_not_block_those_behind(f0, lease, switch):
    running = full_pool(f0, lease)
    held = lease(f0.gamma, 2, at("09:10"))
    behind = lease(f0.alpha, 1, at("09:20"))  # alpha's burst, behind gamma's in Q5 order
    switch.add("gamma:burst")
    ending.end_reservation(actor=f0.gary, reservation=running, now=at("10:00"))
    admitted = queue.admit_queued(gpu_model=f0.model, now=at("10:00"))
    assert [x.pk for x in admitted] == [behind.pk]
    assert fresh(held).status_code == "check:budget_cap"


def test_a_refused_guaranteed_lease_preempts_nobody(f0, lease, switch):
    lease(f0.beta, 4, at("09:00"))
    spot = lease(f0.gamma, 4, at("09:00"), market="spot")
    switch.add("guaranteed")
    with pytest.raises(DomainError):
        lease(f0.alpha, 2, at("09:10"))  # refused at submission, before any reclaim
    assert fresh(spot).notice_due_at is None
    # A guaranteed-eligible lease already waiting (queued before the spot lease came):
    waiting = Reservation.objects.create(
        project=f0.alpha,
        requester=f0.alice,
        gpu_model=f0.model,
        gpu_count=2,
        offering=f0.offering,
        instance_count=2,
        market="on_demand",
        priority="experiment",
        image=f0.image,
        start=at("08:50"),
        end=at("10:50"),
        submitted_at=at("08:50"),
        status=Status.QUEUED,
        tier="guaranteed",
        status_code="no_capacity",
    )
    queue.admit_queued(gpu_model=f0.model, now=at("09:12"))
    assert fresh(waiting).status_code == "check:budget_cap"
    assert fresh(spot).notice_due_at is None  # the queue took nothing back for it
    switch.clear()
    queue.admit_queued(gpu_model=f0.model, now=at("09:13"))
    assert fresh(spot).notice_due_at == at("09:15:00")
    assert fresh(waiting).reclaim_due_at == at("09:15:00")


def test_an_approved_request_waits_while_a_check_refuses(f0, lease, switch):
    from rental.models import Quota

    Quota.objects.filter(project=f0.alpha).update(max_gpus_per_lease=1)
    asked = lease(f0.alpha, 2, at("09:00"))  # beyond the auto-approve limits
    assert asked.status == Status.PENDING_APPROVAL
    switch.add("guaranteed")
    approved = admission.approve_reservation(
        actor=f0.alpha_manager, reservation=asked, now=at("09:05")
    )
    assert (approved.status, approved.status_code) == (Status.QUEUED, "check:budget_cap")
    assert approved.approved_at == at("09:05")
    switch.clear()
    due.process_due(now=at("09:06"))
    assert fresh(asked).status == Status.PROVISIONING


def test_a_booking_waiting_at_its_start_is_not_asked_again(f0, lease, switch):
    booking = lease(f0.gamma, 2, at("09:00"), start=at("12:00"), hours=2)
    assert booking.status == Status.SCHEDULED
    Reservation.objects.filter(pk=booking.pk).update(status=Status.QUEUED)
    switch.update({"reserved", "burst", "guaranteed"})
    CALLS.clear()
    queue.admit_queued(gpu_model=f0.model, now=at("12:00"))
    assert fresh(booking).status == Status.PROVISIONING
    assert CALLS == []
