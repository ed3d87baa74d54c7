"""Who sees what, beyond the statuses of the generated matrix (tests/access): a lease is
listed for those who may see it, a manager's inbox holds only their projects' requests,
and decisions and ending are refused to who may not make them, with nothing changed."""

import pytest
from django.urls import reverse

from rental.loans import admission
from rental.models import Quota, Reservation
from tests import factories

SECRET_PURPOSE = "train-the-secret-model"


@pytest.fixture
def world(f0, t0):
    Quota.objects.filter(project=f0.alpha).update(max_hours_per_lease=8)
    lease = admission.submit_reservation(
        actor=f0.alice,
        project=f0.alpha,
        gpu_model=f0.model,
        gpu_count=1,
        duration_hours=12,
        priority="experiment",
        market="on_demand",
        purpose=SECRET_PURPOSE,
    )
    assert lease.status == Reservation.Status.PENDING_APPROVAL
    finance = factories.user("fiona", finance=True)
    users = {
        "engineer": f0.alice,
        "other_engineer": f0.bob,
        "manager": f0.alpha_manager,
        "admin": f0.admin,
        "finance": finance,
        "anonymous": None,
    }
    return f0, lease, users


def test_it_shows_the_lease_in_the_lists_of_those_who_may_see_it(world, client):
    _f0, lease, users = world
    for role in ("engineer", "manager", "admin"):
        client.force_login(users[role])
        listed = client.get(reverse("rental:leases")).content.decode()
        assert f'href="{lease.get_absolute_url()}"' in listed, role
    client.force_login(users["manager"])
    inbox = client.get(reverse("rental:approvals")).content.decode()
    assert f'href="{lease.get_absolute_url()}"' in inbox


def test_it_keeps_other_projects_requests_out_of_a_managers_inbox(world, client):
    f0, _lease, _users = world
    beta_manager = factories.user("bea")
    factories.member(beta_manager, f0.beta, "manager")
    client.force_login(beta_manager)
    response = client.get(reverse("rental:approvals"))
    assert response.status_code == 200
    assert f'href="{_lease.get_absolute_url()}"' not in response.content.decode()


@pytest.mark.parametrize("role", ["engineer", "other_engineer", "finance"])
def test_it_refuses_decisions_to_non_managers(world, client, role):
    _f0, lease, users = world
    client.force_login(users[role])
    for name in ("rental:lease_approve", "rental:lease_reject"):
        response = client.post(reverse(name, args=[lease.pk]), {"comment": "no"})
        assert response.status_code == 404, (role, name)
    assert Reservation.objects.get(pk=lease.pk).status == Reservation.Status.PENDING_APPROVAL


def test_it_lets_the_manager_approve(world, client):
    _f0, lease, users = world
    client.force_login(users["manager"])
    response = client.post(reverse("rental:lease_approve", args=[lease.pk]), {"comment": "ok"})
    assert response.status_code == 302
    lease.refresh_from_db()
    assert lease.status == Reservation.Status.PROVISIONING
    assert lease.approved_by == users["manager"]


def test_it_lets_the_manager_reject_with_a_comment_only(world, client):
    _f0, lease, users = world
    client.force_login(users["manager"])
    client.post(reverse("rental:lease_reject", args=[lease.pk]), {"comment": ""})
    assert Reservation.objects.get(pk=lease.pk).status == Reservation.Status.PENDING_APPROVAL
    client.post(reverse("rental:lease_reject", args=[lease.pk]), {"comment": "too long"})
    assert Reservation.objects.get(pk=lease.pk).status == Reservation.Status.REJECTED


@pytest.mark.parametrize("role", ["other_engineer", "finance"])
def test_it_refuses_to_end_a_lease_for_outsiders(world, client, role):
    _f0, lease, users = world
    client.force_login(users[role])
    response = client.post(reverse("rental:lease_end", args=[lease.pk]))
    assert response.status_code == 404
    assert Reservation.objects.get(pk=lease.pk).status == Reservation.Status.PENDING_APPROVAL


def test_it_lets_the_requester_end_a_lease(world, client):
    _f0, lease, users = world
    client.force_login(users["engineer"])
    response = client.post(reverse("rental:lease_end", args=[lease.pk]))
    assert response.status_code == 302
    assert Reservation.objects.get(pk=lease.pk).status == Reservation.Status.CANCELLED


def test_it_keeps_the_request_form_to_the_users_projects(world, client):
    f0, _lease, users = world
    client.force_login(users["other_engineer"])
    response = client.post(
        reverse("rental:lease_new"),
        {
            "project": f0.alpha.pk,
            "gpu_model": f0.model.pk,
            "gpu_count": 1,
            "duration_hours": 1,
            "priority": "experiment",
            "market": "on_demand",
        },
    )
    assert response.status_code == 400
    assert Reservation.objects.count() == 1


def test_it_answers_an_unknown_lease_with_404(world, client):
    _f0, _lease, users = world
    client.force_login(users["admin"])
    assert client.get(reverse("rental:lease", args=[999_999])).status_code == 404
