"""What a project's page reads, in written-out statements: its quotas with their standing,
its newest leases in progress, its quota changes and its members.

Through the ORM, building and compiling these four queries cost about three times as much
as running them: 8 of 12 ms in one process at 200,000 leases, on every view of the page.
So, like the projects list's rows (``rental.project_rows``), they are written out here.
Each function's ORM query stays beside its statement: it is what
``tests/rental/views/test_project_reads.py`` holds the statement to, and what reads
elsewhere than PostgreSQL. SQLite (the demo) hands plain SQL its dates without their time
zone and its decimals as floats; the ORM converts them.

The statements read through the indexes the ORM's queries did: the holding leases by
model and project (``lease_holding_gpus``), a project's leases newest first, and each
requester's name by its key (a join would hash every user).
"""

from collections.abc import Sequence
from functools import cache
from typing import Any

from django.contrib.auth import get_user_model
from django.db import connection
from django.db.models import OuterRef, Subquery

from portal.models import Membership, Project
from portal.sql_rows import columns, instance, select_list, written_out
from rental import selectors
from rental.models import GpuModel, Pool, Quota, QuotaRequest, Reservation, Tier

# The columns a lease row of the page draws (of 34): each one more is compiled, sent and
# parsed for every row, ten of them dates.
LEASE_COLUMNS = (
    "id",
    "project_id",
    "requester_id",
    "gpu_model_id",
    "gpu_count",
    "market",
    "priority",
    "tier",
    "status",
    "end",
    "submitted_at",
)
# A quota change's requester and a member: what the page says of them.
PERSON_COLUMNS = ("username", "first_name", "last_name")
QUOTA_REQUESTS_SHOWN = 20


def _q(name: str) -> str:
    return connection.ops.quote_name(name)


def _read(sql: str, params: Sequence[Any]) -> list[tuple]:
    with connection.cursor() as cursor:
        cursor.execute(sql, params)
        return cursor.fetchall()


def _user_table() -> str:
    return _q(get_user_model()._meta.db_table)


def _user_column(name: str) -> str:
    return _q(get_user_model()._meta.get_field(name).column)


def _person(alias: str) -> str:
    """A person's ``PERSON_COLUMNS`` under the user table's ``alias``."""
    return ", ".join(f"{alias}.{_user_column(name)}" for name in PERSON_COLUMNS)


class _GpuModels(dict):
    """The GPU models a statement's rows name, one instance each (its id and name): a
    page's rows share a few models."""

    def named(self, pk: int, name: str) -> GpuModel:
        if pk not in self:
            self[pk] = instance(GpuModel, ("id", "name"), (pk, name))
        return self[pk]


# --- Quotas -------------------------------------------------------------------------------


@cache
def _quotas_sql() -> str:
    holding = ", ".join(["%s"] * len(Reservation.HOLDING))
    lease_table = _q(Reservation._meta.db_table)

    def running(more: str) -> str:
        return (
            f"COALESCE((SELECT SUM(r.gpu_count) FROM {lease_table} r"
            f" WHERE r.gpu_model_id = q.gpu_model_id AND r.status IN ({holding}){more}), 0)"
        )

    return (
        f"SELECT {select_list('q', Quota)}, g.{_q('name')}, pl.{_q('capacity')},"
        f" {running('')},"
        f" {running(' AND r.project_id = q.project_id AND r.tier = %s')},"
        f" {running(' AND r.project_id = q.project_id AND r.tier <> %s')}"
        f" FROM {_q(Quota._meta.db_table)} q"
        f" JOIN {_q(GpuModel._meta.db_table)} g ON g.id = q.gpu_model_id"
        f" LEFT JOIN {_q(Pool._meta.db_table)} pl ON pl.gpu_model_id = g.id"
        f" WHERE q.project_id = %s ORDER BY g.{_q('name')}, q.id"
    )


def quota_use(project: Project) -> list[selectors.QuotaUse]:
    """Every quota of the project with its standing (``selectors.project_quota_use``)."""
    if not written_out():
        return selectors.project_quota_use(project)
    statuses = [str(status) for status in Reservation.HOLDING]
    params = [*statuses, *statuses, str(Tier.GUARANTEED), *statuses, str(Tier.SPOT), project.pk]
    width, quotas, capacities = len(columns(Quota)), [], {}
    for row in _read(_quotas_sql(), params):
        quota = instance(Quota, columns(Quota), row[:width])
        name, capacity, quota.pool_running, quota.used_guaranteed, quota.used = row[width:]
        quota.gpu_model = instance(GpuModel, ("id", "name"), (quota.gpu_model_id, name))
        capacities[quota.gpu_model_id] = capacity or 0
        quotas.append(quota)
    return selectors.quota_uses(project, quotas, capacities)


# --- Leases in progress -------------------------------------------------------------------


def leases_in_progress_orm(project: Project, limit: int) -> list[Reservation]:
    requester = get_user_model().objects.filter(pk=OuterRef("requester_id"))
    return list(
        Reservation.objects.filter(project=project, status__in=selectors.IN_PROGRESS)
        .select_related("gpu_model")
        .only(*LEASE_COLUMNS, "gpu_model__name")
        .annotate(requester_name=Subquery(requester.values(get_user_model().USERNAME_FIELD)))
        .order_by("-submitted_at", "-pk")[:limit]
    )


@cache
def _leases_sql() -> str:
    statuses = ", ".join(["%s"] * len(selectors.IN_PROGRESS))
    columns = ", ".join(f"r.{_q(name)}" for name in LEASE_COLUMNS)
    username = _user_column(get_user_model().USERNAME_FIELD)
    return (
        f"SELECT {columns}, g.{_q('name')},"
        f" (SELECT u.{username} FROM {_user_table()} u WHERE u.id = r.requester_id)"
        f" FROM {_q(Reservation._meta.db_table)} r"
        f" JOIN {_q(GpuModel._meta.db_table)} g ON g.id = r.gpu_model_id"
        f" WHERE r.project_id = %s AND r.status IN ({statuses})"
        " ORDER BY r.submitted_at DESC, r.id DESC LIMIT %s"
    )


def leases_in_progress(project: Project, limit: int) -> list[Reservation]:
    """The project's newest ``limit`` leases in progress, each with its GPU model's name
    and ``requester_name``, the columns a row draws only (``LEASE_COLUMNS``)."""
    if not written_out():
        return leases_in_progress_orm(project, limit)
    params = [project.pk, *(str(status) for status in selectors.IN_PROGRESS), limit]
    width, leases, models = len(LEASE_COLUMNS), [], _GpuModels()
    for row in _read(_leases_sql(), params):
        lease = instance(Reservation, LEASE_COLUMNS, row[:width])
        name, lease.requester_name = row[width:]
        lease.gpu_model = models.named(lease.gpu_model_id, name)
        leases.append(lease)
    return leases


# --- Quota changes ------------------------------------------------------------------------


def quota_requests_orm(project: Project) -> list[QuotaRequest]:
    return list(
        QuotaRequest.objects.filter(project=project)
        .select_related("gpu_model", "requested_by")
        .only(*columns(QuotaRequest), "gpu_model__name", *_requester_fields())
        .order_by("-created_at", "-pk")[:QUOTA_REQUESTS_SHOWN]
    )


def _requester_fields() -> list[str]:
    return [f"requested_by__{name}" for name in PERSON_COLUMNS]


@cache
def _quota_requests_sql() -> str:
    return (
        f"SELECT {select_list('c', QuotaRequest)}, g.{_q('name')}, {_person('u')}"
        f" FROM {_q(QuotaRequest._meta.db_table)} c"
        f" JOIN {_q(GpuModel._meta.db_table)} g ON g.id = c.gpu_model_id"
        f" JOIN {_user_table()} u ON u.id = c.requested_by_id"
        " WHERE c.project_id = %s ORDER BY c.created_at DESC, c.id DESC LIMIT %s"
    )


def quota_requests(project: Project) -> list[QuotaRequest]:
    """The project's newest quota changes, each with its GPU model's name and who asked."""
    if not written_out():
        return quota_requests_orm(project)
    width, found, models = len(columns(QuotaRequest)), [], _GpuModels()
    for row in _read(_quota_requests_sql(), [project.pk, QUOTA_REQUESTS_SHOWN]):
        asked = instance(QuotaRequest, columns(QuotaRequest), row[:width])
        asked.gpu_model = models.named(asked.gpu_model_id, row[width])
        asked.requested_by = instance(
            get_user_model(), ("id", *PERSON_COLUMNS), (asked.requested_by_id, *row[width + 1 :])
        )
        found.append(asked)
    return found


# --- Members ------------------------------------------------------------------------------


def members_orm(project: Project) -> list[Membership]:
    return list(
        Membership.objects.filter(project=project)
        .select_related("user")
        .only("project", "role", *(f"user__{name}" for name in PERSON_COLUMNS))
        .order_by("role", "user__username", "pk")
    )


@cache
def _members_sql() -> str:
    return (
        f"SELECT m.id, m.user_id, m.project_id, m.role, {_person('u')}"
        f" FROM {_q(Membership._meta.db_table)} m JOIN {_user_table()} u ON u.id = m.user_id"
        f" WHERE m.project_id = %s ORDER BY m.role, u.{_user_column('username')}, m.id"
    )


def members(project: Project) -> list[Membership]:
    """The project's members by role, then name, each with the name the page shows."""
    if not written_out():
        return members_orm(project)
    found = []
    for row in _read(_members_sql(), [project.pk]):
        membership = instance(Membership, ("id", "user_id", "project_id", "role"), row[:4])
        membership.user = instance(get_user_model(), ("id", *PERSON_COLUMNS), (row[1], *row[4:]))
        found.append(membership)
    return found
