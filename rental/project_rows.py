"""The projects list's rows, a page at a time, in one written-out statement.

The list shows each project a person can see with its members, its leases holding GPUs
and the GPUs they hold: ``selectors.projects_overview``, three counting subqueries per
project. Through the ORM, building and compiling that query cost about a fifth of the
page, more than running it, on every page of the list. So, like the session's user
(``portal.session_user``), it is written out here; ``tests/rental/views/test_project_rows.py``
holds it to ``projects_overview``'s answers, page by page, for every kind of person.

The counts are read through the same indexes (the holding leases by project, rental
migration 0028; the memberships by project). Elsewhere than PostgreSQL (the demo's
SQLite) the list reads through ``projects_overview`` itself (``sql_rows.written_out``).
"""

from collections.abc import Collection
from functools import cache

from django.db import connection

from portal.models import Membership, Project
from portal.sql_rows import columns, instance, select_list, written_out
from rental import selectors
from rental.models import Reservation


@cache
def _sql(of_some: bool) -> str:
    """All projects, or (``of_some``) those whose ids are one array parameter, in the
    list's order: active before inactive, then by name."""
    quote = connection.ops.quote_name
    holding = ", ".join(["%s"] * len(Reservation.HOLDING))
    leases = (
        f" FROM {quote(Reservation._meta.db_table)} r"
        f" WHERE r.project_id = p.id AND r.status IN ({holding})"
    )
    # An array of the ids, as ``portal.sql_arrays.AnyOf`` sends them: one statement
    # whatever the number of a person's projects.
    where = " WHERE p.id = ANY(%s::bigint[])" if of_some else ""
    return (
        f"SELECT {select_list('p', Project)},"
        f" (SELECT COUNT(*) FROM {quote(Membership._meta.db_table)} m"
        " WHERE m.project_id = p.id),"
        f" (SELECT COUNT(*){leases}),"
        f" (SELECT COALESCE(SUM(r.gpu_count), 0){leases})"
        f" FROM {quote(Project._meta.db_table)} p{where}"
        " ORDER BY p.is_active DESC, p.name, p.id LIMIT %s OFFSET %s"
    )


class ProjectRows:
    """The projects a person sees, as a ``Paginator`` reads them: ``count()``, and a slice
    of projects, each with ``members_count``, ``live_leases`` and ``running_gpus``.
    ``among``: the ids of the person's projects, or None for every project."""

    def __init__(self, among: Collection[int] | None) -> None:
        self.among = None if among is None else sorted(among)

    def count(self) -> int:
        return Project.objects.count() if self.among is None else len(self.among)

    def __getitem__(self, window: slice) -> list[Project]:
        if self.among == [] or window.stop <= window.start:
            return []
        if not written_out():
            projects = Project.objects.all()
            if self.among is not None:
                projects = projects.filter(pk__in=self.among)
            ordered = selectors.projects_overview(projects).order_by("-is_active", "name", "pk")
            return list(ordered[window.start : window.stop])
        statuses = [str(status) for status in Reservation.HOLDING]
        params = [*statuses, *statuses] + ([] if self.among is None else [self.among])
        with connection.cursor() as cursor:
            cursor.execute(
                _sql(self.among is not None), [*params, window.stop - window.start, window.start]
            )
            rows = cursor.fetchall()
        width, found = len(columns(Project)), []
        for row in rows:
            project = instance(Project, columns(Project), row[:width])
            project.members_count, project.live_leases, project.running_gpus = row[width:]
            found.append(project)
        return found
