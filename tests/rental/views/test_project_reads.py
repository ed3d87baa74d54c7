"""A project's page reads written out (``rental.project_reads``) give what the ORM's queries
they replace give: its quotas with their standing (``selectors.project_quota_use``), its
newest leases in progress, its quota changes and its members; and the page drawn from
either reads the same, word for word."""

import re
from datetime import timedelta
from decimal import Decimal

import pytest
from django.urls import reverse
from django.utils import timezone

from portal.models import Membership
from rental import project_reads, selectors
from rental.models import Quota, QuotaRequest, Reservation
from tests import factories
from tests.billing.helpers import lease

# Every status and tier, several sizes and two models, one without a pool; the requests
# and members of both projects, two of them at the same moment.
STATUSES = [status for status, _label in Reservation.Status.choices]
TIERS = ["guaranteed", "burst", "spot", ""]


@pytest.fixture
def world(f0):
    bare = factories.gpu_model("L4 24GB")
    Quota.objects.create(
        project=f0.alpha, gpu_model=bare, guaranteed=0, ceiling=2, weight=Decimal("0.5")
    )
    Quota.objects.filter(project=f0.alpha, gpu_model=f0.model).update(
        guaranteed=1, ceiling=2, max_gpus_per_lease=2, auto_approve_hours_cap=12
    )
    now = timezone.now()
    for n, status in enumerate(STATUSES * 2):
        for where in (f0.alpha, f0.beta):
            made = lease(
                f0, where, status=status, gpus=1 + n % 3, tier=TIERS[n % 4], requester=f0.alice
            )
            moved = {"submitted_at": now - timedelta(minutes=n // 3)}
            if n % 5 == 0:
                moved.update(gpu_model=bare)
            if status == "active" and n % 2 == 0:
                moved.update(approved_at=now - timedelta(hours=n), approved_by=f0.alpha_manager)
            Reservation.objects.filter(pk=made.pk).update(**moved)
    for n in range(5):
        QuotaRequest.objects.create(
            project=(f0.alpha, f0.beta)[n % 2],
            gpu_model=(f0.model, bare)[n % 2],
            requested_by=(f0.alice, f0.alpha_manager)[n % 2],
            guaranteed=n if n % 3 else None,
            ceiling=n + 4,
            reason=f"reason {n}",
            status=("pending", "approved", "rejected")[n % 3],
        )
    QuotaRequest.objects.update(created_at=now)
    for n in range(4):
        person = factories.user(("dora", "carl", "bea", "abe")[n])  # not in the order made
        person.first_name, person.last_name = ("Ann", "")[n % 2], ("", "Lee")[n % 2]
        person.save()
        factories.member(person, f0.alpha, ("manager", "engineer")[n % 2])
    return f0


def lease_row(found: Reservation) -> tuple:
    values = tuple(getattr(found, name) for name in project_reads.LEASE_COLUMNS)
    return (*values, found.gpu_model.name, found.requester_name)


def asked_row(found: QuotaRequest) -> tuple:
    values = tuple(getattr(found, f.attname) for f in QuotaRequest._meta.concrete_fields)
    person = tuple(getattr(found.requested_by, name) for name in project_reads.PERSON_COLUMNS)
    return (*values, found.gpu_model.name, *person)


def member_row(found: Membership) -> tuple:
    person = tuple(getattr(found.user, name) for name in project_reads.PERSON_COLUMNS)
    return (found.pk, found.user_id, found.project_id, found.role, *person)


def quota_row(found: selectors.QuotaUse) -> tuple:
    values = tuple(getattr(found.quota, f.attname) for f in Quota._meta.concrete_fields)
    return (*values, found.quota.gpu_model.name, found.status)


@pytest.mark.django_db
def test_the_quotas_and_their_standing_are_the_orms(world):
    for project in (world.alpha, world.beta, world.gamma):
        written = [quota_row(row) for row in project_reads.quota_use(project)]
        assert written == [quota_row(row) for row in selectors.project_quota_use(project)]
    standing = [row.status for row in project_reads.quota_use(world.alpha)]
    assert {status.pool_capacity for status in standing} == {0, 8}
    assert any(status.approved_beyond for status in standing)
    assert all(status.pool_running > status.used for status in standing)


@pytest.mark.django_db
def test_the_leases_in_progress_are_the_orms(world):
    for project in (world.alpha, world.beta, world.gamma):
        for limit in (1, 3, 100):
            written = [lease_row(row) for row in project_reads.leases_in_progress(project, limit)]
            orm = project_reads.leases_in_progress_orm(project, limit)
            assert written == [lease_row(row) for row in orm]
            assert len(written) == min(limit, len(orm))


@pytest.mark.django_db
def test_the_quota_changes_and_the_members_are_the_orms(world):
    for project in (world.alpha, world.beta, world.gamma):
        written = [asked_row(row) for row in project_reads.quota_requests(project)]
        assert written == [asked_row(row) for row in project_reads.quota_requests_orm(project)]
        written = [member_row(row) for row in project_reads.members(project)]
        assert written == [member_row(row) for row in project_reads.members_orm(project)]
    assert len(project_reads.members(world.alpha)) == 6


def page_text(client, slug: str) -> str:
    text = client.get(reverse("rental:project", args=[slug])).content.decode()
    return re.sub(r'name="csrfmiddlewaretoken" value="[^"]*"|"X-CSRFToken": "[^"]*"', "", text)


@pytest.mark.django_db
@pytest.mark.parametrize("who", ["alpha_manager", "alice", "admin"])
def test_the_page_reads_the_same_from_the_orm(world, client, monkeypatch, who):
    client.force_login(getattr(world, who))
    written = page_text(client, world.alpha.slug)
    monkeypatch.setattr(project_reads, "written_out", lambda: False)
    assert page_text(client, world.alpha.slug) == written
    assert "L4 24GB" in written and "reason 4" in written
