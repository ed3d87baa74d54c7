"""The projects list's written-out statement (``rental.project_rows``) gives what the ORM's
overview (``selectors.projects_overview``) gives, in the list's order, page by page: every
project column, the members, the leases holding GPUs and their GPUs; for every project and
for a person's own; and the list shows it for every kind of person."""

import pytest
from django.urls import reverse

from portal import access
from portal.models import Membership, Project
from rental import project_rows, selectors
from rental.models import Reservation
from rental.project_rows import ProjectRows
from rental.views.projects import PROJECTS_PER_PAGE
from tests import factories
from tests.billing.helpers import lease

FIELDS = [field.attname for field in Project._meta.concrete_fields]
FIGURES = ["members_count", "live_leases", "running_gpus"]


def orm_rows(among) -> list[tuple]:
    """The ORM's overview in the list's order, the reference."""
    projects = Project.objects.all() if among is None else Project.objects.filter(pk__in=among)
    ordered = selectors.projects_overview(projects).order_by("-is_active", "name", "pk")
    return [row_of(project) for project in ordered]


def row_of(project: Project) -> tuple:
    return tuple(getattr(project, name) for name in [*FIELDS, *FIGURES])


@pytest.fixture
def world(f0):
    """Projects active and inactive, two of one name, with members and leases in every
    status and of several sizes."""
    extra = [factories.project(f"p{n}", name=("Zeta", "Eta", "Eta", "Theta")[n]) for n in range(4)]
    Project.objects.filter(pk__in=[extra[1].pk, extra[3].pk]).update(is_active=False)
    Project.objects.filter(pk=f0.gamma.pk).update(cost_center="CC-7")
    for n, project in enumerate([f0.alpha, f0.beta, *extra]):
        for m in range(n % 3):
            factories.member(factories.user(f"m{n}-{m}"), project)
    statuses = [status for status, _label in Reservation.Status.choices]
    for n, status in enumerate(statuses):
        for where in (f0.alpha, f0.beta, extra[n % 4]):
            lease(f0, where, status=status, gpus=1 + n % 4, requester=f0.alice)
    return f0


@pytest.mark.django_db
def test_every_window_of_every_project_is_the_orms(world):
    expected = orm_rows(None)
    rows = ProjectRows(None)
    assert rows.count() == len(expected) == Project.objects.count()
    assert any(row[-2] for row in expected) and any(not row[-1] for row in expected)
    for size in (1, 2, 3, len(expected) + 1):
        found = []
        for start in range(0, len(expected) + size, size):
            found += [row_of(project) for project in rows[start : start + size]]
        assert found == expected, size


@pytest.mark.django_db
def test_a_persons_projects_are_the_orms(world):
    for person in (world.alice, world.bob, world.alpha_manager, world.outsider):
        among = access.roles(person)
        rows = ProjectRows(among)
        assert rows.count() == len(among)
        assert [row_of(project) for project in rows[0:10]] == orm_rows(among)
    assert ProjectRows([])[0:10] == []


@pytest.mark.django_db
def test_the_list_shows_each_person_the_rows_the_orm_gives(world, client):
    Membership.objects.create(user=world.alice, project=world.beta, role="manager")
    finance = factories.user("fiona", finance=True)
    for person in (world.admin, finance, world.alice, world.outsider):
        client.force_login(person)
        among = None if access.sees_everything(person) else access.roles(person)
        expected = orm_rows(among)
        shown = []
        for number in range(1, 1 + max(1, -(-len(expected) // PROJECTS_PER_PAGE))):
            page = client.get(reverse("rental:projects"), {"page": number})
            assert page.status_code == 200
            shown += [(row_of(project), role) for project, role in page.context["rows"]]
        roles = access.roles(person)
        assert shown == [(row, roles.get(row[0])) for row in expected], person


@pytest.mark.django_db
def test_elsewhere_than_postgresql_the_list_reads_the_orm(world, monkeypatch):
    monkeypatch.setattr(project_rows, "written_out", lambda: False)
    among = access.roles(world.alice)
    assert [row_of(project) for project in ProjectRows(None)[1:4]] == orm_rows(None)[1:4]
    assert [row_of(project) for project in ProjectRows(among)[0:10]] == orm_rows(among)
