"""Which identity-provider group gives which role: one audited service for each change,
used by the admin pages and by a project's configuration document (``idp_groups``).
Only admins change them (a group can make its people admins or managers)."""

from datetime import datetime
from typing import Any

from django.db import transaction
from django.utils import timezone
from django.utils.translation import gettext as _

from portal import access, audit
from portal.errors import InvalidInput, NotPermitted
from portal.models import Project
from portal.sso.models import GroupRole


def _check(actor: Any, group: str, role: str, project: Project | None) -> str:
    if not access.is_admin(actor):
        raise NotPermitted(_("Only admins change which groups give which roles."))
    group = (group or "").strip()
    if not group or len(group) > 200 or "\x00" in group:
        raise InvalidInput(_("A group is a name of 1 to 200 characters."), field="group")
    if role not in GroupRole.Role.values:
        raise InvalidInput(
            _("A role is “engineer”, “manager”, “admin” or “finance”."), field="role"
        )
    if role in GroupRole.PROJECT_ROLES and project is None:
        raise InvalidInput(_("An engineer or manager role needs a project."), field="project")
    if role not in GroupRole.PROJECT_ROLES and project is not None:
        raise InvalidInput(_("Admin and finance are not roles in a project."), field="project")
    return group


@transaction.atomic
def add_group_role(
    *,
    actor: Any,
    group: str,
    role: str,
    project: Project | None = None,
    source: str = "admin",
    now: datetime | None = None,
) -> GroupRole:
    """People in ``group`` get ``role`` (in ``project``) from their next login on. A group
    has one role per project: a new one replaces the old."""
    group = _check(actor, group, role, project)
    now = now or timezone.now()
    same = GroupRole.objects.select_for_update().filter(group=group, project=project)
    if project is None:
        same = same.filter(role=role)
    existing = same.first()
    if existing is not None and existing.role == role:
        return existing
    if existing is not None:
        remove_group_role(actor=actor, row=existing, source=source, now=now)
    row = GroupRole.objects.create(group=group, role=role, project=project, created_at=now)
    audit.record(
        actor=actor,
        verb="group_role.added",
        obj=row,
        project=project,
        source=source,
        at=now,
        after={"group": group, "role": role},
    )
    return row


@transaction.atomic
def remove_group_role(
    *, actor: Any, row: GroupRole, source: str = "admin", now: datetime | None = None
) -> None:
    """People in the row's group lose its role at their next login (unless another of
    their groups gives it)."""
    if not access.is_admin(actor):
        raise NotPermitted(_("Only admins change which groups give which roles."))
    audit.record(
        actor=actor,
        verb="group_role.removed",
        obj=row,
        project=row.project_id,
        source=source,
        at=now or timezone.now(),
        before={"group": row.group, "role": row.role},
    )
    row.delete()
