"""Who may do what (DESIGN.md §5): an engineer acts only on their own leases, a manager on
any lease of the project; a manager does not approve their own request while another
manager or an admin could; finance never sees how to reach an instance."""

import pytest
from django.urls import reverse

from portal.errors import NotPermitted
from portal.models import AuditEvent
from rental.loans import admission, ending
from rental.models import Quota, Reservation
from tests import factories

Status = Reservation.Status


def ask(f0, who, *, hours=12):
    Quota.objects.filter(project=f0.alpha).update(max_hours_per_lease=8)
    return admission.submit_reservation(
        actor=who,
        project=f0.alpha,
        gpu_model=f0.model,
        gpu_count=1,
        duration_hours=hours,
        priority="experiment",
        market="on_demand",
    )


def test_it_keeps_an_engineer_off_a_colleagues_lease(f0, client):
    lease = ask(f0, f0.alice)
    colleague = factories.user("carl")
    factories.member(colleague, f0.alpha)
    client.force_login(colleague)
    response = client.post(reverse("rental:lease_end", args=[lease.pk]))
    assert response.status_code == 404
    assert Reservation.objects.get(pk=lease.pk).status == Status.PENDING_APPROVAL
    with pytest.raises(NotPermitted):
        ending.end_reservation(actor=colleague, reservation=lease)


def test_it_lets_a_manager_end_any_lease_of_the_project(f0, client):
    lease = ask(f0, f0.alice)
    client.force_login(f0.alpha_manager)
    response = client.post(reverse("rental:lease_end", args=[lease.pk]))
    assert response.status_code == 302
    assert Reservation.objects.get(pk=lease.pk).status == Status.CANCELLED


def test_it_refuses_a_managers_own_request_while_an_admin_exists(f0):
    lease = ask(f0, f0.alpha_manager)
    assert lease.status == Status.PENDING_APPROVAL
    with pytest.raises(NotPermitted) as refused:
        admission.approve_reservation(actor=f0.alpha_manager, reservation=lease)
    assert refused.value.code == "self_approval"
    assert Reservation.objects.get(pk=lease.pk).status == Status.PENDING_APPROVAL
    assert not AuditEvent.objects.filter(verb="lease.approved").exists()


def test_it_lets_another_manager_approve(f0):
    lease = ask(f0, f0.alpha_manager)
    second = factories.user("mona")
    factories.member(second, f0.alpha, "manager")
    admission.approve_reservation(actor=second, reservation=lease)
    event = AuditEvent.objects.get(verb="lease.approved")
    assert "self_approved" not in event.after
    assert Reservation.objects.get(pk=lease.pk).approved_by == second


def test_it_allows_a_self_approval_when_nobody_else_can_and_marks_it(f0):
    f0.admin.is_active = False
    f0.admin.save()
    lease = ask(f0, f0.alpha_manager)
    admission.approve_reservation(actor=f0.alpha_manager, reservation=lease)
    assert Reservation.objects.get(pk=lease.pk).status != Status.PENDING_APPROVAL
    assert AuditEvent.objects.get(verb="lease.approved").after["self_approved"] is True


def test_it_hides_connection_details_from_finance(f0, client):
    lease = ask(f0, f0.alice, hours=1)
    instance = lease.instances.first()
    assert instance is not None
    instance.state = "running"
    instance.public_address = "203.0.113.77"
    instance.private_address = "10.1.2.3"
    instance.ssh_user = "ubuntu"
    instance.save()
    finance = factories.user("fiona", finance=True)
    client.force_login(finance)
    for name in ("rental:lease", "rental:lease_status_partial"):
        page = client.get(reverse(name, args=[lease.pk]))
        assert page.status_code == 200
        body = page.content.decode()
        assert "203.0.113.77" not in body and "10.1.2.3" not in body, name
        assert "ssh ubuntu@" not in body
    client.force_login(f0.alice)
    assert (
        "ssh ubuntu@203.0.113.77"
        in client.get(reverse("rental:lease", args=[lease.pk])).content.decode()
    )
