"""``/api/v1/leases/{id}/…``: a manager's decision, cancelling, ending, extending,
stopping and resuming a lease, and watching its pool, through the services the lease
pages call; refusals with their code and nothing written. Asking and reading are in
test_leases.py."""

from datetime import timedelta

import pytest
from django.urls import reverse

from portal.models import AuditEvent, Membership
from rental.models import AvailabilityWatch, Instance, Quota, Reservation
from tests import factories
from tests.api.leases_world import client_for, running_lease
from tests.api.test_leases import act, detail, pending, submit

Status = Reservation.Status
LIST = reverse("api:lease-list")

pytestmark = pytest.mark.django_db


# --- A manager's decision ----------------------------------------------------------------


def test_a_manager_approves_a_waiting_request(f0):
    lease = pending(f0)
    assert client_for(f0.alice).post(act(lease, "approve"), format="json").status_code == 404
    answer = client_for(f0.alpha_manager).post(
        act(lease, "approve"), {"comment": "deadline"}, format="json"
    )
    assert answer.status_code == 200, answer.content
    assert answer.json()["status"] == "provisioning"
    assert len(answer.json()["instances"]) == 1
    lease.refresh_from_db()
    assert (lease.approved_by, lease.decision_comment) == (f0.alpha_manager, "deadline")
    assert AuditEvent.objects.get(verb="lease.approved").source == "api"
    again = client_for(f0.alpha_manager).post(act(lease, "approve"), format="json")
    assert again.status_code == 409 and again.json()["code"] == "invalid_transition"


def test_a_rejection_needs_a_comment(f0):
    lease = pending(f0)
    manager = client_for(f0.alpha_manager)
    for body in ({}, {"comment": "  "}, {"comment": "x" * 2001}, {"comment": "no\x00"}):
        answer = manager.post(act(lease, "reject"), body, format="json")
        assert answer.status_code == 400 and "comment" in answer.json()["errors"], body
    assert Reservation.objects.get(pk=lease.pk).status == Status.PENDING_APPROVAL
    answer = manager.post(act(lease, "reject"), {"comment": "Not this month"}, format="json")
    assert answer.status_code == 200
    assert (answer.json()["status"], answer.json()["decision_comment"]) == (
        "rejected",
        "Not this month",
    )
    assert AuditEvent.objects.get(verb="lease.rejected").source == "api"


# --- The requester's actions -------------------------------------------------------------


def test_the_requester_cancels_a_waiting_request_but_not_a_running_lease(f0):
    lease = pending(f0)
    answer = client_for(f0.alice).post(act(lease, "cancel"), format="json")
    assert answer.status_code == 200 and answer.json()["status"] == "cancelled"
    assert AuditEvent.objects.get(verb="lease.ended").source == "api"
    running = running_lease(f0)
    refused = client_for(f0.alice).post(act(running, "cancel"), format="json")
    assert refused.status_code == 409 and refused.json()["code"] == "not_cancellable"
    assert Reservation.objects.get(pk=running.pk).status == Status.ACTIVE


def test_only_the_requester_and_managers_end_a_lease(f0):
    lease = running_lease(f0)
    colleague = factories.user("cleo")
    factories.member(colleague, f0.alpha)
    assert client_for(colleague).get(detail(lease)).status_code == 200
    assert client_for(colleague).post(act(lease, "end"), format="json").status_code == 404
    fiona = factories.user("fiona", finance=True)
    assert client_for(fiona).post(act(lease, "end"), format="json").status_code == 404
    assert Reservation.objects.get(pk=lease.pk).status == Status.ACTIVE
    answer = client_for(f0.alice).post(act(lease, "end"), format="json")
    assert answer.status_code == 200 and answer.json()["status"] == "ending"
    assert Instance.objects.filter(reservation=lease, state="stopping").count() == 1
    twice = client_for(f0.alice).post(act(lease, "end"), format="json")
    assert twice.status_code == 409


def test_it_extends_within_the_limits_and_sends_the_rest_to_a_manager(f0):
    Quota.objects.filter(project=f0.alpha).update(max_hours_per_lease=10)
    lease = running_lease(f0, hours=8)
    old_end = lease.end
    client = client_for(f0.alice)
    for body in (
        {},
        {"hours": "soon"},
        {"hours": 1},
        {"hours": "1000000000"},
        {"hours": "-1"},
        {"hours": "0"},
        {"hours": "0.0001"},
    ):
        refused = client.post(act(lease, "extend"), body, format="json")
        assert refused.status_code == 400, body
        assert set(refused.json()["errors"]) == {"hours"}, refused.json()
    answer = client.post(act(lease, "extend"), {"hours": "1"}, format="json")
    assert answer.status_code == 200, answer.content
    lease.refresh_from_db()
    assert lease.end == old_end + timedelta(hours=1) and lease.extension_until is None
    answer = client.post(act(lease, "extend"), {"hours": "2.5"}, format="json")
    assert answer.status_code == 200
    lease.refresh_from_db()
    assert lease.end == old_end + timedelta(hours=1)
    assert lease.extension_until == old_end + timedelta(hours=3.5)
    assert answer.json()["extension_until"] is not None
    assert AuditEvent.objects.filter(verb="lease.extension_asked", source="api").exists()

    decide = act(lease, "decide-extension")
    assert client.post(decide, {"decision": "approve"}, format="json").status_code == 404
    manager = client_for(f0.alpha_manager)
    assert manager.post(decide, {"decision": "maybe"}, format="json").status_code == 400
    answer = manager.post(decide, {"decision": "approve", "comment": "ok"}, format="json")
    assert answer.status_code == 200 and answer.json()["extension_until"] is None
    lease.refresh_from_db()
    assert lease.end == old_end + timedelta(hours=3.5)
    assert AuditEvent.objects.get(verb="lease.extension_approved").source == "api"


def test_it_refuses_an_extension_past_the_maximum_with_its_code(f0, settings):
    lease = running_lease(f0, hours=8)
    answer = client_for(f0.alice).post(
        act(lease, "extend"), {"hours": str(settings.PORTAL_MAX_LEASE_HOURS)}, format="json"
    )
    assert answer.status_code == 409
    assert (answer.json()["code"], answer.json()["field"]) == ("over_max_lease", "hours")
    assert "errors" not in answer.json()
    assert Reservation.objects.get(pk=lease.pk).end == lease.end


def test_it_stops_resumes_and_ends_a_stopped_lease(f0):
    lease = running_lease(f0)
    colleague = factories.user("cleo")
    factories.member(colleague, f0.alpha)
    refused = client_for(colleague).post(act(lease, "stop"), format="json")
    assert refused.status_code == 403 and refused.json()["code"] == "not_permitted"
    client = client_for(f0.alice)
    answer = client.post(act(lease, "stop"), format="json")
    assert answer.status_code == 200 and answer.json()["status"] == "stopped"
    assert Instance.objects.get(reservation=lease).state == Instance.State.STOPPED
    assert AuditEvent.objects.get(verb="lease.stopped").source == "api"
    answer = client.post(act(lease, "resume"), format="json")
    assert answer.status_code == 200 and answer.json()["status"] == "provisioning"
    assert AuditEvent.objects.get(verb="lease.resumed").source == "api"
    Reservation.objects.filter(pk=lease.pk).update(status=Status.STOPPED)
    Instance.objects.filter(reservation=lease).update(state=Instance.State.STOPPED)
    answer = client.post(act(lease, "end-stopped"), format="json")
    assert answer.status_code == 200 and answer.json()["status"] == "ending"
    assert AuditEvent.objects.filter(verb="lease.ended", source="api").exists()
    wrong = client.post(act(lease, "stop"), format="json")
    assert wrong.status_code == 409 and wrong.json()["code"] == "invalid_transition"


def test_it_refuses_to_resume_without_room_with_the_reason(f0):
    lease = running_lease(f0, gpus=2)
    client = client_for(f0.alice)
    assert client.post(act(lease, "stop"), format="json").status_code == 200
    submit(f0, f0.beta, 4)
    submit(f0, f0.gamma, 4)
    answer = client.post(act(lease, "resume"), format="json")
    assert answer.status_code == 409
    assert answer.json()["code"] == "no_capacity"
    assert Reservation.objects.get(pk=lease.pk).status == Status.STOPPED


def test_it_watches_the_pool_for_the_leases_gpus(f0):
    lease = pending(f0)
    outsider = factories.user("cleo")
    factories.member(outsider, f0.alpha)
    assert client_for(outsider).post(act(lease, "watch"), format="json").status_code == 404
    answer = client_for(f0.alice).post(act(lease, "watch"), format="json")
    assert answer.status_code == 201
    watch = AvailabilityWatch.objects.get()
    assert (watch.user, watch.gpu_model, watch.count) == (f0.alice, f0.model, 1)
    assert answer.json()["id"] == watch.pk and answer.json()["count"] == 1


def test_an_engineer_who_left_the_project_cannot_act(f0):
    lease = running_lease(f0)
    Membership.objects.filter(user=f0.alice).delete()
    client = client_for(f0.alice)
    assert client.get(detail(lease)).status_code == 404
    assert client.post(act(lease, "end"), format="json").status_code == 404
