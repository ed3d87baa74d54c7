"""The session's user, read on every request in one written-out statement.

Every page starts by reading its user, whether the user is in finance (``access.is_finance``),
how many notifications are unread (the navigation's bell) and the user's role in each active
project (``access.roles``: the navigation and every permission check). Through the ORM that
was two queries, and building and compiling the annotated one cost more than running it
(1.1 of 1.7 ms on the bench machine), on every request. So the statement is written out
here, like the pool lock's (``rental.loans.standing``): the user's row, then one row per
membership of an active project. ``tests/portal/test_session_user.py`` holds it
to the same answers as the ORM's queries.

A user read otherwise (a service token's account calling the API, a member looked up) has
its roles read by ``roles``, written out for the same reason: the ORM built and compiled its
union in 0.7 of the 1.0 ms it took. A service token's account has no session
(``login_throttle.ThrottledModelBackend``); its role is an engineer's in its token's
project while the token is usable, and it is a member of nothing.

Both statements are plain SQL that PostgreSQL and SQLite (the demo) read alike.
"""

from functools import cache
from typing import Any

from django.contrib.auth import get_user_model
from django.db import connection
from django.utils import timezone

from portal.models import FINANCE_GROUP, Membership
from portal.sql_rows import columns, instance, select_list

# What each request sets on its user beside the model's fields.
FLAGS = ("_portal_is_finance", "_portal_unread", "_portal_is_token")


# A person's memberships of active projects: their roles, in both statements below.
MEMBERSHIPS = (
    "SELECT {blanks}m.project_id, m.role FROM portal_membership m"
    " JOIN portal_project p ON p.id = m.project_id"
    " WHERE m.user_id = %s AND p.is_active"
)


@cache
def _sql() -> str:
    """The user's row with its flags, then one row per membership of an active project
    (the user's columns and flags NULL there): the flags are counted once, whatever the
    number of memberships."""
    table = get_user_model()._meta.db_table
    blanks = "NULL, " * (len(columns(get_user_model())) + len(FLAGS))
    return (
        f"SELECT {select_list('u', get_user_model())},"
        " EXISTS (SELECT 1 FROM auth_user_groups ug"
        " JOIN auth_group g ON g.id = ug.group_id"
        " WHERE ug.user_id = u.id AND g.name = %s),"
        " (SELECT COUNT(*) FROM portal_notification n"
        " WHERE n.user_id = u.id AND n.read_at IS NULL),"
        " EXISTS (SELECT 1 FROM portal_servicetoken t WHERE t.account_id = u.id),"
        " NULL, NULL"
        f" FROM {table} u WHERE u.id = %s"
        f" UNION ALL {MEMBERSHIPS.format(blanks=blanks)}"
    )


def read(user_id: Any) -> Any:
    """The user of ``user_id`` with ``_portal_is_finance``, ``_portal_unread``,
    ``_portal_is_token`` (a service token's account) and ``_portal_roles`` (project id →
    role, ``access.roles``) set, or None."""
    with connection.cursor() as cursor:
        cursor.execute(_sql(), [FINANCE_GROUP, user_id, user_id])
        rows = cursor.fetchall()
    names = columns(get_user_model())
    width, key = len(names), names.index(get_user_model()._meta.pk.attname)
    found = [row for row in rows if row[key] is not None]  # the user's row: its id
    if not found:
        return None
    user = instance(get_user_model(), names, found[0][:width])
    is_finance, unread, is_token = found[0][width : width + len(FLAGS)]
    user._portal_is_finance = bool(is_finance)
    user._portal_unread = unread
    user._portal_is_token = bool(is_token)
    user._portal_roles = {row[-2]: row[-1] for row in rows if row[key] is None}
    return user


ROLES_SQL = (
    MEMBERSHIPS.format(blanks="") + " UNION SELECT t.project_id, %s FROM portal_servicetoken t"
    " JOIN portal_project p ON p.id = t.project_id"
    " WHERE t.account_id = %s AND p.is_active AND t.revoked_at IS NULL AND t.expires_at > %s"
)


def roles(user_id: Any) -> dict[int, str]:
    """Project id → role of the user of ``user_id`` (``access.roles``): its memberships of
    active projects, or its usable service token's project."""
    engineer = Membership.Role.ENGINEER.value
    with connection.cursor() as cursor:
        cursor.execute(ROLES_SQL, [user_id, engineer, user_id, timezone.now()])
        return dict(cursor.fetchall())
