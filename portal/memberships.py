"""Who belongs to a project and in which role: one audited service for every change."""

from datetime import datetime

from django.db import transaction
from django.utils import timezone
from django.utils.translation import gettext as _

from portal import access, audit
from portal.errors import InvalidInput, NotPermitted
from portal.models import Membership, Project
from portal.service_tokens import is_service_account


@transaction.atomic
def set_membership(
    *, actor, project: Project, user, role: str, now: datetime | None = None, source: str = "web"
) -> Membership:
    """Add a member or change their role (managers of the project and admins)."""
    if not access.can_manage(actor, project):
        raise NotPermitted(_("Only a manager of the project changes its members."))
    if role not in Membership.Role.values:
        raise InvalidInput(_("A role is “manager” or “engineer”."), field="role")
    if is_service_account(user):  # its reach is its token's (portal/service_tokens.py)
        raise NotPermitted(_("A service token is no person and joins no project."))
    now = now or timezone.now()
    membership = Membership.objects.select_for_update().filter(project=project, user=user).first()
    before = {"role": membership.role} if membership else {}
    if membership is None:
        membership = Membership.objects.create(
            project=project, user=user, role=role, created_at=now
        )
    elif membership.role != role:
        membership.role = role
        membership.save(update_fields=["role"])
    else:
        return membership
    audit.record(
        actor=actor,
        verb="membership.set",
        obj=membership,
        project=project,
        source=source,
        at=now,
        before=before,
        after={"user": user.get_username(), "role": role},
    )
    return membership


@transaction.atomic
def remove_membership(
    *, actor, project: Project, user, now: datetime | None = None, source: str = "web"
) -> None:
    """Take a member out of the project (managers of the project and admins)."""
    if not access.can_manage(actor, project):
        raise NotPermitted(_("Only a manager of the project changes its members."))
    membership = Membership.objects.select_for_update().filter(project=project, user=user).first()
    if membership is None:
        return
    audit.record(
        actor=actor,
        verb="membership.removed",
        obj=membership,
        project=project,
        source=source,
        at=now or timezone.now(),
        before={"user": user.get_username(), "role": membership.role},
    )
    membership.delete()
