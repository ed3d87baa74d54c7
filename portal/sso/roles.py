"""A person's roles from their groups at the identity provider, set at every login.

The group roles (``GroupRole`` rows, and ``PORTAL_OIDC_ADMIN_GROUPS`` /
``PORTAL_OIDC_FINANCE_GROUPS``) say what the person's groups give; ``sync_roles`` makes
what groups gave exactly that: memberships added, changed and removed, admin and finance
rights given and taken back, each change one audit event. Whatever was given by hand
(no ``GrantedMembership`` / ``GrantedRole`` row) is left as it is, even where a group
would give another role in the same project: the hand-given role stands.
"""

from collections.abc import Iterable
from dataclasses import dataclass, field
from datetime import datetime
from typing import Any

from django.conf import settings
from django.contrib.auth.models import Group
from django.db import transaction
from django.utils import timezone

from portal import audit
from portal.models import FINANCE_GROUP, AuditEvent, Membership
from portal.sso.models import GrantedMembership, GrantedRole, GroupRole

SOURCE = AuditEvent.Source.WEB


@dataclass
class Wanted:
    """What a set of groups gives: project id → (role, the groups that give it), and
    admin / finance → the groups that give it."""

    projects: dict[int, tuple[str, list[str]]] = field(default_factory=dict)
    rights: dict[str, list[str]] = field(default_factory=dict)


def wanted(groups: Iterable[str]) -> Wanted:
    """What ``groups`` give. Two groups giving one project: manager wins over engineer."""
    groups = sorted(set(groups))
    result = Wanted()
    for role, names in (
        (GroupRole.Role.ADMIN, settings.PORTAL_OIDC_ADMIN_GROUPS),
        (GroupRole.Role.FINANCE, settings.PORTAL_OIDC_FINANCE_GROUPS),
    ):
        given = [name for name in groups if name in names]
        if given:
            result.rights[role] = given
    for row in GroupRole.objects.filter(group__in=groups).order_by("group"):
        if row.project_id is None:
            result.rights.setdefault(row.role, [])
            if row.group not in result.rights[row.role]:
                result.rights[row.role].append(row.group)
            continue
        role, given = result.projects.get(row.project_id, (row.role, []))
        if row.role == GroupRole.Role.MANAGER:
            role = Membership.Role.MANAGER
        result.projects[row.project_id] = (role, [*given, row.group])
    return result


@transaction.atomic
def sync_roles(*, user: Any, groups: Iterable[str], now: datetime | None = None) -> int:
    """Set what ``user``'s groups give them to exactly what ``groups`` say; the number
    of changes (each one audit event, by the system, with the groups that caused it)."""
    now = now or timezone.now()
    want = wanted(groups)
    changes = _sync_memberships(user, want.projects, now)
    changes += _sync_rights(user, want.rights, now)
    return changes


def _sync_memberships(user: Any, want: dict[int, tuple[str, list[str]]], now: datetime) -> int:
    have = {
        m.project_id: m
        for m in Membership.objects.select_for_update().filter(user=user).select_related("project")
    }
    grants = {g.membership_id: g for g in GrantedMembership.objects.filter(membership__user=user)}
    changes = 0
    for project_id, (role, groups) in sorted(want.items()):
        membership = have.get(project_id)
        if membership is None:
            membership = Membership.objects.create(
                user=user, project_id=project_id, role=role, created_at=now
            )
            GrantedMembership.objects.create(membership=membership, groups=groups, granted_at=now)
            _record_set(user, membership, {}, groups, now)
            changes += 1
            continue
        grant = grants.get(membership.pk)
        if grant is None:
            continue  # given by hand: the hand-given role stands
        if grant.groups != groups:
            grant.groups = groups
            grant.save(update_fields=["groups"])
        if membership.role != role:
            before = {"role": membership.role}
            membership.role = role
            membership.save(update_fields=["role"])
            _record_set(user, membership, before, groups, now)
            changes += 1
    for project_id, membership in sorted(have.items()):
        grant = grants.get(membership.pk)
        if grant is None or project_id in want:
            continue
        audit.record(
            actor=None,
            verb="membership.removed",
            obj=membership,
            project=project_id,
            source=SOURCE,
            at=now,
            before={"user": user.get_username(), "role": membership.role, "groups": grant.groups},
        )
        membership.delete()
        changes += 1
    return changes


def _record_set(user: Any, membership: Membership, before: dict, groups: list, now) -> None:
    audit.record(
        actor=None,
        verb="membership.set",
        obj=membership,
        project=membership.project_id,
        source=SOURCE,
        at=now,
        before=before,
        after={"user": user.get_username(), "role": membership.role, "groups": groups},
    )


def _sync_rights(user: Any, want: dict[str, list[str]], now: datetime) -> int:
    grants = {g.role: g for g in GrantedRole.objects.select_for_update().filter(user=user)}
    changes = 0
    for role in GrantedRole.Role.values:
        grant, groups = grants.get(role), want.get(role)
        admin = role == GrantedRole.Role.ADMIN
        if groups and grant is None:
            if _has_right(user, role):
                continue  # given by hand: it stays, and stays the hand's
            _set_right(user, role, True)
            GrantedRole.objects.create(user=user, role=role, groups=groups, granted_at=now)
            verb = "user.admin_granted" if admin else "user.finance_granted"
        elif groups and grant is not None:
            if grant.groups != groups:
                grant.groups = groups
                grant.save(update_fields=["groups"])
            continue
        elif grant is not None:
            _set_right(user, role, False)
            groups = grant.groups
            grant.delete()
            verb = "user.admin_revoked" if admin else "user.finance_revoked"
        else:
            continue
        audit.record(
            actor=None,
            verb=verb,
            obj=user,
            source=SOURCE,
            at=now,
            after={"user": user.get_username(), "groups": groups},
        )
        changes += 1
    return changes


def _has_right(user: Any, role: str) -> bool:
    if role == GrantedRole.Role.ADMIN:
        return bool(user.is_staff)
    return user.groups.filter(name=FINANCE_GROUP).exists()


def _set_right(user: Any, role: str, on: bool) -> None:
    if role == GrantedRole.Role.ADMIN:
        # Admins of the portal are staff with every permission in the Django admin.
        user.is_staff = user.is_superuser = on
        user.save(update_fields=["is_staff", "is_superuser"])
    elif on:
        user.groups.add(Group.objects.get_or_create(name=FINANCE_GROUP)[0])
    else:
        user.groups.remove(*Group.objects.filter(name=FINANCE_GROUP))
    for cached in ("_portal_is_finance", "_portal_roles"):
        user.__dict__.pop(cached, None)
