"""Project configuration as code: one YAML document per project, exported and applied.

``export_project`` writes quotas per GPU model (G, L, weight, auto-approve limits), the
budget with its thresholds, members and roles, the default image and data volumes.
``plan`` checks a document (errors name the YAML path) and lists the changes; ``apply``
makes them through the same services, and so the same access rules, as the web: a change
of G needs an admin (Q1 refusals carry their figures), budgets a manager, and the whole
document goes in one transaction or not at all. A plan is also tried inside a rolled-back
transaction, so a dry run reports the same refusals an apply would meet and writes nothing.

The portal owns the document: its keys' order (``TOP_KEYS``), ``project``, ``name`` and
``members``, the transaction, the dry run and the audit. Every other key belongs to a
section module of another app, named by dotted path in
``PORTAL_PROJECT_CONFIG_SECTIONS`` (rental's quotas, default image and volumes, billing's
budget), so that the portal imports neither app; ``portal.projectconfig_schema.Section``
says what such a module provides. Each step (checking, listing the changes, applying)
goes through ``TOP_KEYS`` in order and hands each key to its owner.

Extension points: the portal keeps no default image per project yet (``default_image``
must be null), and data volumes are cloud resources made on the Volumes page, so they are
exported for reading and a document that changes them is refused.
"""

from dataclasses import dataclass, field
from functools import cache
from importlib import import_module
from typing import Any

import yaml
from django.conf import settings
from django.core.exceptions import ImproperlyConfigured
from django.db import transaction
from django.utils.translation import gettext as _

from portal import access, audit, memberships
from portal.errors import DomainError, NotPermitted
from portal.models import Membership, Project
from portal.projectconfig_schema import PORTAL_KEYS, TOP_KEYS, Section, fail, load, validate

SOURCE = "config"


@dataclass
class Plan:
    """A checked document and the changes it makes, in the order they are applied."""

    slug: str
    config: dict[str, Any]
    changes: list[str] = field(default_factory=list)
    project: Project | None = None


class _DryRun(Exception):
    """Raised to roll the trial apply back."""


@cache
def _load_sections(paths: tuple[str, ...]) -> dict[str, Section]:
    owners: dict[str, Section] = {}
    for path in paths:
        module = import_module(path)
        keys = getattr(module, "KEYS", None)
        if not isinstance(keys, tuple | list) or not keys:
            raise ImproperlyConfigured(
                f"PORTAL_PROJECT_CONFIG_SECTIONS: {path} names no KEYS it owns."
            )
        for key in keys:
            if key not in TOP_KEYS or key in PORTAL_KEYS:
                raise ImproperlyConfigured(
                    f"PORTAL_PROJECT_CONFIG_SECTIONS: {path} claims {key!r}, which is not "
                    f"a key of the document a section may own ({', '.join(_section_keys())})."
                )
            if key in owners:
                raise ImproperlyConfigured(
                    f"PORTAL_PROJECT_CONFIG_SECTIONS: {key!r} is claimed by both "
                    f"{owners[key].__name__} and {path}."
                )
            owners[key] = module
    missing = [key for key in _section_keys() if key not in owners]
    if missing:
        raise ImproperlyConfigured(
            f"PORTAL_PROJECT_CONFIG_SECTIONS: no section owns {', '.join(map(repr, missing))}."
        )
    return owners


def _section_keys() -> tuple[str, ...]:
    return tuple(key for key in TOP_KEYS if key not in PORTAL_KEYS)


def sections() -> dict[str, Section]:
    """Each key of ``TOP_KEYS`` that the portal does not handle → the module, named in
    ``PORTAL_PROJECT_CONFIG_SECTIONS``, that owns it (loaded once; ImproperlyConfigured
    when a key has no owner or two)."""
    return _load_sections(tuple(settings.PORTAL_PROJECT_CONFIG_SECTIONS))


def _members(project: Project | None) -> list[dict[str, str]]:
    if project is None:
        return []
    rows = Membership.objects.filter(project=project).select_related("user")
    return sorted(
        ({"username": m.user.get_username(), "role": m.role} for m in rows),
        key=lambda item: item["username"],
    )


def document(project: Project) -> dict[str, Any]:
    """The configuration as plain data, keys in a stable order."""
    owners = sections()
    values: dict[str, Any] = {
        "project": project.slug,
        "name": project.name,
        "members": _members(project),
    }
    for section in dict.fromkeys(owners[key] for key in _section_keys()):
        values.update(section.read(project))
    return {key: values[key] for key in TOP_KEYS}


def dump(data: dict[str, Any]) -> str:
    return yaml.safe_dump(data, sort_keys=False, allow_unicode=True, default_flow_style=False)


def export_project(project: Project) -> str:
    """One YAML document describing the project's configuration."""
    return dump(document(project))


def arrow(old: Any, new: Any) -> str:
    """``old → new`` for a line of the changes, ``—`` standing for nothing."""
    return f"{'—' if old is None else old} → {'—' if new is None else new}"


def prefixed(error: DomainError, path: str) -> DomainError:
    """A service's refusal, its message and field put under the document's ``path``."""
    where = f"{path}.{error.field}" if error.field else path
    return type(error)(
        f"{where}: {error.message}", code=error.code, field=where, figures=error.figures
    )


def plan(doc: str, *, actor, project: Project | None = None) -> Plan:
    """Check a document and list its changes; ``project`` pins the slug (the API's URL)."""
    owners = sections()
    data = load(doc)
    config = validate(data, sections=owners)
    slug = config["project"]
    if project is not None and project.slug != slug:
        raise fail(
            "project", _("must be “%(slug)s”, the project of this address") % {"slug": project.slug}
        )
    if project is None:
        project = Project.objects.filter(slug=slug).first()
        if project is not None and not access.can_view_project(actor, project):
            project = None
            if not access.is_admin(actor):
                raise fail("project", _("unknown project “%(slug)s”") % {"slug": slug})
    if project is None and not access.is_admin(actor):
        raise fail("project", _("unknown project “%(slug)s”") % {"slug": slug})
    result = Plan(slug=slug, config=config, project=project)
    result.changes = _diff(project, config)
    try:
        with transaction.atomic():
            _apply(result, actor=actor)
            raise _DryRun
    except _DryRun:
        pass
    return result


def _diff(project: Project | None, config: dict[str, Any]) -> list[str]:
    owners = sections()
    changes: list[str] = []
    for key in TOP_KEYS:
        if key == "project":
            if project is None:
                changes.append(_("project: create “%(slug)s”") % {"slug": config["project"]})
        elif key == "name":
            if project is not None and "name" in config and config["name"] != project.name:
                changes.append(
                    _("name: %(change)s") % {"change": arrow(project.name, config["name"])}
                )
        elif key == "members":
            changes += _member_changes(project, config["members"])
        else:
            changes += owners[key].changes(key, config[key], project=project)
    return changes


def _member_changes(project: Project | None, want: list[dict[str, Any]]) -> list[str]:
    have_members = {m["username"]: m["role"] for m in _members(project)}
    want_members = {m["username"]: m["role"] for m in want}
    changes = []
    for name in sorted(set(have_members) | set(want_members)):
        old, new = have_members.get(name), want_members.get(name)
        if old != new:
            changes.append(f"members[{name}]: {arrow(old, new)}")
    return changes


@transaction.atomic
def apply(plan: Plan, *, actor) -> Project:
    """Make the plan's changes, all or nothing, through the services the web uses."""
    return _apply(plan, actor=actor)


def _apply(plan: Plan, *, actor) -> Project:
    owners = sections()
    config = plan.config
    project = _lock_or_create(plan, actor=actor)
    for key in TOP_KEYS:
        if key == "name":
            _rename(project, config.get("name"), actor=actor)
        elif key == "members":
            _apply_members(project, config["members"], actor=actor)
        elif key != "project":
            owners[key].apply(key, config[key], project=project, actor=actor)
    return project


def _lock_or_create(plan: Plan, *, actor) -> Project:
    """The plan's project, its row locked, created first when it is new (admins only)."""
    project = Project.objects.select_for_update().filter(slug=plan.slug).first()
    if project is None:
        if not access.is_admin(actor):
            raise NotPermitted(_("Only admins create projects."), field="project")
        project = Project.objects.create(slug=plan.slug, name=plan.config.get("name") or plan.slug)
        audit.record(
            actor=actor,
            verb="project.created",
            obj=project,
            project=project,
            source=SOURCE,
            after={"slug": project.slug, "name": project.name},
        )
    elif not access.can_manage(actor, project):
        raise NotPermitted(
            _("Only a manager of the project or an admin applies its configuration.")
        )
    return project


def _rename(project: Project, name: str | None, *, actor) -> None:
    if not name or name == project.name:
        return
    if not access.is_admin(actor):
        raise NotPermitted(_("name: only admins rename a project."), field="name")
    before = {"name": project.name}
    project.name = name
    project.save(update_fields=["name"])
    audit.record(
        actor=actor,
        verb="project.renamed",
        obj=project,
        project=project,
        source=SOURCE,
        before=before,
        after={"name": project.name},
    )


def _apply_members(project: Project, want: list[dict[str, Any]], *, actor) -> None:
    have_members = {
        m.user.get_username(): m
        for m in Membership.objects.filter(project=project).select_related("user")
    }
    for index, member in enumerate(want):
        try:
            memberships.set_membership(
                actor=actor,
                project=project,
                user=member["user"],
                role=member["role"],
                source=SOURCE,
            )
        except DomainError as error:
            raise prefixed(error, f"members[{index}]") from None
    want_names = {m["username"] for m in want}
    for name in sorted(set(have_members) - want_names):
        memberships.remove_membership(
            actor=actor, project=project, user=have_members[name].user, source=SOURCE
        )
