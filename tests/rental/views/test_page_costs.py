"""Every page costs what it shows, not the size of the history behind it: the same SQL
queries (session and user included, and the navigation's) with a short history and a
long one, at most 12, on the first page of a list and on its last."""

from datetime import timedelta

import pytest
from django.db import connection
from django.test import Client
from django.test.utils import CaptureQueriesContext
from django.urls import reverse
from django.utils import timezone

from portal.models import AuditEvent, Membership
from rental import selectors
from rental.loans import admission
from rental.models import Market, Priority, Reservation, Tier
from tests import factories

MOST_QUERIES = 12
HTMX = {"HX-Request": "true"}


def add_history(f0, how_many: int) -> None:
    """``how_many`` ended leases in alpha and beta, older than anything live, each with
    its audit event."""
    oldest = Reservation.objects.order_by("submitted_at").values_list("submitted_at", flat=True)
    before = (oldest.first() or timezone.now()) - timedelta(days=1)
    leases = Reservation.objects.bulk_create(
        Reservation(
            project=(f0.alpha, f0.beta)[n % 2],
            requester=(f0.alice, f0.bob)[n % 2],
            gpu_model=f0.model,
            gpu_count=1,
            offering=f0.offering,
            market=Market.ON_DEMAND,
            priority=Priority.EXPERIMENT,
            image=f0.image,
            start=before - timedelta(hours=n + 8),
            end=before - timedelta(hours=n),
            tier=Tier.GUARANTEED,
            status=Reservation.Status.ENDED,
            submitted_at=before - timedelta(hours=n + 8, minutes=5),
            ended_at=before - timedelta(hours=n),
        )
        for n in range(how_many)
    )
    AuditEvent.objects.bulk_create(
        AuditEvent(
            at=lease.submitted_at,
            actor=lease.requester,
            verb="lease.submitted",
            object_type="rental.reservation",
            object_id=str(lease.pk),
            project=lease.project,
            after={"gpu_count": 1},
            source="web",
        )
        for lease in leases
    )


@pytest.fixture
def site(f0, settings):
    """A running lease of alice's, one waiting for alma's approval (alma manages alpha
    and is an engineer in beta), and a short history."""
    settings.PORTAL_MAX_PENDING_PER_USER = 1000
    factories.member(f0.alpha_manager, f0.beta, Membership.Role.ENGINEER)
    running = admission.submit_reservation(
        actor=f0.alice,
        project=f0.alpha,
        gpu_model=f0.model,
        gpu_count=1,
        duration_hours=4,
        priority="learning",
        market="on_demand",
    )
    admission.submit_reservation(
        actor=f0.alice,
        project=f0.alpha,
        gpu_model=f0.model,
        gpu_count=6,  # above alpha's ceiling: waits for a manager
        duration_hours=4,
        priority="learning",
        market="on_demand",
    )
    add_history(f0, 12)
    return running


def pages(f0, lease) -> list[tuple[str, str, str, dict]]:
    """(who, method, url, data): every page and partial, as the people who see it."""
    estimate = {
        "project": f0.alpha.pk,
        "gpu_model": f0.model.pk,
        "gpu_count": "1",
        "duration_hours": "8",
        "priority": "experiment",
        "market": "on_demand",
    }
    rows = [
        ("admin", "get", reverse("rental:leases"), {}),
        ("admin", "get", reverse("rental:leases") + "?page=last", {}),
        ("admin", "get", reverse("rental:leases") + "?status=ended&page=last", {}),
        ("admin", "get", reverse("rental:leases") + "?status=active", {}),
        ("admin", "get", reverse("rental:leases") + f"?project={f0.beta.slug}", {}),
        ("admin", "get", reverse("rental:projects"), {}),
        ("admin", "get", reverse("rental:approvals"), {}),
        ("admin", "get", reverse("rental:approvals_count"), {}),
        ("admin", "get", reverse("rental:panel_approvals"), {}),
        ("admin", "get", reverse("rental:pools"), {}),
        ("admin", "get", reverse("rental:pool", args=[f0.pool.pk]), {}),
        ("admin", "get", reverse("rental:pool_queue", args=[f0.pool.pk]), {}),
        ("admin", "get", reverse("audit_log"), {}),
        ("admin", "get", reverse("audit_log") + "?page=last", {}),
        ("admin", "get", reverse("audit_log") + "?project=alpha&page=last", {}),
        ("admin", "get", reverse("rental:lease", args=[lease.pk]), {}),
        ("admin", "get", reverse("rental:project", args=[f0.alpha.slug]), {}),
    ]
    for who in ("manager", "engineer"):
        rows += [
            (who, "get", reverse("dashboard"), {}),
            (who, "get", reverse("rental:lease_new"), {}),
            (who, "get", reverse("rental:lease_new") + f"?project={f0.alpha.slug}", {}),
            (who, "post", reverse("rental:lease_estimate"), estimate),
            (who, "get", reverse("rental:leases"), {}),
            (who, "get", reverse("rental:leases") + "?page=last", {}),
            (who, "get", reverse("rental:leases") + "?status=ended&page=last", {}),
            (who, "get", reverse("rental:lease_list_partial"), {}),
            (who, "get", reverse("rental:project", args=[f0.alpha.slug]), {}),
            (who, "get", reverse("rental:projects"), {}),
            (who, "get", reverse("rental:panel_leases"), {}),
            (who, "get", reverse("rental:pools"), {}),
            (who, "get", reverse("rental:pool", args=[f0.pool.pk]), {}),
            (who, "get", reverse("rental:pool_queue", args=[f0.pool.pk]), {}),
            (who, "get", reverse("rental:lease", args=[lease.pk]), {}),
            (who, "get", reverse("rental:lease_status_partial", args=[lease.pk]), {}),
        ]
    rows += [
        ("manager", "get", reverse("rental:approvals"), {}),
        ("manager", "get", reverse("rental:approvals_count"), {}),
        ("manager", "get", reverse("rental:panel_approvals"), {}),
    ]
    return rows


def costs(clients, rows) -> dict[tuple[str, str], int]:
    found = {}
    for who, method, url, data in rows:
        client = clients[who]
        headers = HTMX if "/_" in url or "/panels/" in url or method == "post" else {}
        with CaptureQueriesContext(connection) as queries:
            answer = getattr(client, method)(url, data, headers=headers)
        assert answer.status_code == 200, (who, url)
        found[(who, url)] = len(queries)
    return found


@pytest.mark.django_db
def test_it_costs_every_page_the_same_queries_whatever_the_history(f0, site):
    people = {"admin": f0.admin, "manager": f0.alpha_manager, "engineer": f0.alice}
    clients = {}
    for who, person in people.items():
        clients[who] = Client()
        clients[who].force_login(person)
    rows = pages(f0, site)
    short = costs(clients, rows)
    add_history(f0, 130)  # more than two pages of leases and of events
    long = costs(clients, rows)
    assert long == short
    too_many = {page: n for page, n in long.items() if n > MOST_QUERIES}
    assert not too_many, f"more than {MOST_QUERIES} queries: {too_many}"


def test_the_in_progress_index_holds_the_statuses_the_panel_asks_for():
    index = next(
        index for index in Reservation._meta.indexes if index.name == "lease_requester_in_progress"
    )
    ((lookup, statuses),) = index.condition.children
    assert lookup == "status__in"
    assert tuple(statuses) == selectors.IN_PROGRESS


def test_the_holding_index_holds_the_statuses_the_running_sums_ask_for():
    index = next(index for index in Reservation._meta.indexes if index.name == "lease_holding_gpus")
    ((lookup, statuses),) = index.condition.children
    assert lookup == "status__in"
    assert tuple(statuses) == Reservation.HOLDING
    assert tuple(index.include) == ("gpu_count", "tier")


# The leases' indexes that no constraint holds: a test's transaction may drop them.
DROPPABLE = """
SELECT i.indexrelid::regclass::text FROM pg_index i
WHERE i.indrelid = 'rental_reservation'::regclass
  AND NOT EXISTS (SELECT 1 FROM pg_constraint c WHERE c.conindid = i.indexrelid)
"""


@pytest.mark.django_db
def test_the_running_sums_can_be_read_from_the_holding_index(f0, site):
    """The pool's running GPUs (quotas_in_use's sum) can be read through the partial index.
    Which index a tiny test table's plan picks depends on statistics earlier test files
    left, so the others are dropped for the test (its transaction puts them back) and the
    table scans turned off: what is left is the holding index, or a table scan."""
    with connection.cursor() as cursor:
        cursor.execute(DROPPABLE)
        for (name,) in cursor.fetchall():
            if name != "lease_holding_gpus":
                cursor.execute(f'DROP INDEX "{name}"')
        cursor.execute("SET LOCAL enable_seqscan = off")
        cursor.execute("SET LOCAL enable_bitmapscan = off")
    holding = Reservation.objects.filter(gpu_model=f0.model, status__in=Reservation.HOLDING)
    plan = holding.order_by().values("gpu_count").explain()  # a sum has no order
    assert "using lease_holding_gpus" in plan, plan
