"""``/api/v1/projects`` and ``/api/v1/projects/{slug}/members``: who sees which project,
and members changed by managers and admins through the audited membership service."""

import pytest
from rest_framework.test import APIClient

from portal.models import AuditEvent, Membership
from tests import factories


def as_user(user) -> APIClient:
    client = APIClient()
    client.force_login(user)
    return client


def members_url(slug: str, pk: int | None = None) -> str:
    return f"/api/v1/projects/{slug}/members" + (f"/{pk}" if pk else "")


def test_it_lists_the_projects_a_member_belongs_to_with_their_role(f0):
    response = as_user(f0.alice).get("/api/v1/projects")
    assert response.status_code == 200
    assert response.json()["results"] == [
        {
            "slug": "alpha",
            "name": "Alpha",
            "cost_center": "",
            "is_active": True,
            "created_at": response.json()["results"][0]["created_at"],
            "role": "engineer",
            "members": 2,
        }
    ]
    manager = as_user(f0.alpha_manager).get("/api/v1/projects/alpha").json()
    assert manager["role"] == "manager"


def test_admins_and_finance_see_every_project_without_a_role(f0):
    fiona = factories.user("fiona", finance=True)
    for user in (f0.admin, fiona):
        results = as_user(user).get("/api/v1/projects").json()["results"]
        assert [p["slug"] for p in results] == ["alpha", "beta", "gamma"]
        assert {p["role"] for p in results} == {None}


def test_an_outsider_gets_404_for_a_project_and_its_members(f0):
    client = as_user(f0.bob)
    assert client.get("/api/v1/projects/alpha").status_code == 404
    assert client.get(members_url("alpha")).status_code == 404
    assert (
        client.post(members_url("alpha"), {"username": "bob", "role": "manager"}).status_code == 404
    )
    assert not Membership.objects.filter(user=f0.bob, project=f0.alpha).exists()
    assert as_user(f0.outsider).get("/api/v1/projects").json()["results"] == []


def test_it_filters_and_orders_projects(f0):
    f0.gamma.is_active = False
    f0.gamma.save()
    client = as_user(f0.admin)
    active = client.get("/api/v1/projects?is_active=false").json()["results"]
    assert [p["slug"] for p in active] == ["gamma"]
    ordered = client.get("/api/v1/projects?ordering=-slug").json()["results"]
    assert [p["slug"] for p in ordered] == ["gamma", "beta", "alpha"]


def test_members_read_the_member_list(f0):
    response = as_user(f0.alice).get(members_url("alpha"))
    assert response.status_code == 200
    rows = response.json()["results"]
    assert [(m["username"], m["role"], m["project"]) for m in rows] == [
        ("alice", "engineer", "alpha"),
        ("alma", "manager", "alpha"),
    ]
    assert as_user(f0.alice).get(members_url("alpha") + "?role=manager").json()["count"] == 1


def test_a_manager_adds_a_member_changes_a_role_and_removes_them(f0):
    client = as_user(f0.alpha_manager)
    added = client.post(members_url("alpha"), {"username": "bob", "role": "engineer"})
    assert added.status_code == 201
    membership = Membership.objects.get(user=f0.bob, project=f0.alpha)
    assert added.json()["id"] == membership.pk and added.json()["role"] == "engineer"
    changed = client.patch(members_url("alpha", membership.pk), {"role": "manager"})
    assert changed.status_code == 200 and changed.json()["role"] == "manager"
    membership.refresh_from_db()
    assert membership.role == "manager"
    again = client.post(members_url("alpha"), {"username": "bob", "role": "engineer"})
    assert again.status_code == 200
    assert client.delete(members_url("alpha", membership.pk)).status_code == 204
    assert not Membership.objects.filter(pk=membership.pk).exists()
    verbs = list(
        AuditEvent.objects.filter(project=f0.alpha).order_by("id").values_list("verb", "source")
    )
    assert verbs == [
        ("membership.set", "api"),
        ("membership.set", "api"),
        ("membership.set", "api"),
        ("membership.removed", "api"),
    ]


def test_an_engineer_and_finance_do_not_change_members(f0):
    fiona = factories.user("fiona", finance=True)
    alma = Membership.objects.get(user=f0.alpha_manager)
    for user in (f0.alice, fiona):
        client = as_user(user)
        body = {"username": "bob", "role": "engineer"}
        assert client.post(members_url("alpha"), body).status_code == 404
        assert client.patch(members_url("alpha", alma.pk), {"role": "engineer"}).status_code == 404
        assert client.delete(members_url("alpha", alma.pk)).status_code == 404
    alma.refresh_from_db()
    assert alma.role == "manager"
    assert Membership.objects.filter(project=f0.alpha).count() == 2
    assert not AuditEvent.objects.exists()


def test_a_manager_cannot_reach_another_projects_membership(f0):
    gary = Membership.objects.get(user=f0.gary)
    client = as_user(f0.alpha_manager)
    assert client.patch(members_url("alpha", gary.pk), {"role": "manager"}).status_code == 404
    assert client.delete(members_url("gamma", gary.pk)).status_code == 404
    gary.refresh_from_db()
    assert gary.role == "engineer"


def test_an_admin_manages_any_projects_members(f0):
    response = as_user(f0.admin).post(members_url("gamma"), {"username": "olga", "role": "manager"})
    assert response.status_code == 201
    assert Membership.objects.get(user=f0.outsider).role == "manager"


@pytest.mark.parametrize(
    ("body", "field"),
    [
        ({"username": "bob", "role": "owner"}, "role"),
        ({"username": "bob"}, "role"),
        ({"username": "b" * 151, "role": "engineer"}, "username"),
        ({"username": "bo\u0000b", "role": "engineer"}, "username"),
        ({"username": 7, "role": ["engineer"]}, "role"),
    ],
)
def test_it_refuses_bad_input_and_writes_nothing(f0, body, field):
    response = as_user(f0.alpha_manager).post(members_url("alpha"), body, format="json")
    assert response.status_code == 400
    assert field in response.json()["errors"]
    assert Membership.objects.filter(project=f0.alpha).count() == 2
    assert not AuditEvent.objects.exists()


def test_an_unknown_or_inactive_user_is_a_404_naming_the_username(f0):
    """A username names someone: one with no active user is not found, as an id would be."""
    f0.bob.is_active = False
    f0.bob.save()
    client = as_user(f0.alpha_manager)
    for username in ("nobody", "bob"):
        response = client.post(members_url("alpha"), {"username": username, "role": "engineer"})
        assert response.status_code == 404, response.content
        assert (response.json()["code"], response.json()["field"]) == ("not_found", "username")
        assert "errors" not in response.json()
    assert not Membership.objects.filter(user=f0.bob, project=f0.alpha).exists()
    assert Membership.objects.filter(project=f0.alpha).count() == 2
    assert not AuditEvent.objects.exists()


def test_a_patch_without_a_role_changes_nothing(f0):
    alice = Membership.objects.get(user=f0.alice)
    response = as_user(f0.alpha_manager).patch(members_url("alpha", alice.pk), {}, format="json")
    assert response.status_code == 200, response.content
    assert response.json()["role"] == "engineer"
    alice.refresh_from_db()
    assert alice.role == "engineer"
    assert not AuditEvent.objects.exists()


@pytest.mark.parametrize("count", [2, 15])
def test_the_lists_are_a_fixed_number_of_queries(f0, count, django_assert_num_queries):
    for index in range(count):
        project = factories.project(f"p{index:02}")
        factories.member(f0.alice, project)
        factories.member(factories.user(f"u{index:02}"), f0.alpha)
    client = as_user(f0.alice)
    client.get("/api/v1/projects")
    with django_assert_num_queries(4):
        projects = client.get("/api/v1/projects?page_size=200").json()
    assert projects["count"] == count + 1
    with django_assert_num_queries(5):
        members = client.get(members_url("alpha") + "?page_size=200").json()
    assert members["count"] == count + 2


def test_a_body_that_is_not_json_is_400_and_writes_nothing(f0):
    client = as_user(f0.alpha_manager)
    response = client.post(members_url("alpha"), "{oops", content_type="application/json")
    assert response.status_code == 400
    assert client.post(members_url("alpha"), ["bob"], format="json").status_code == 400
    alice = Membership.objects.get(user=f0.alice)
    patch = client.patch(members_url("alpha", alice.pk), {"role": None}, format="json")
    assert patch.status_code == 400
    alice.refresh_from_db()
    assert alice.role == "engineer"
    assert Membership.objects.filter(project=f0.alpha).count() == 2
