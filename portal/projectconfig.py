"""Project configuration as code: one YAML document per project, exported and applied.

``export_project`` writes quotas per GPU model (G, L, weight, auto-approve limits), the
budget with its thresholds, members and roles, the default image and data volumes.
``plan`` checks a document (errors name the YAML path) and lists the changes; ``apply``
makes them through the same services, and so the same access rules, as the web: a change
of G needs an admin (Q1 refusals carry their figures), budgets a manager, and the whole
document goes in one transaction or not at all. A plan is also tried inside a rolled-back
transaction, so a dry run reports the same refusals an apply would meet and writes nothing.

Extension points: the portal keeps no default image per project yet (``default_image``
must be null), and data volumes are cloud resources made on the Volumes page, so they are
exported for reading and a document that changes them is refused.
"""

from dataclasses import dataclass, field
from typing import Any

import yaml
from django.db import transaction
from django.utils.translation import gettext as _

from portal import access, audit, memberships
from portal.errors import DomainError, NotPermitted
from portal.models import Membership, Project
from portal.projectconfig_schema import CAP_KEYS, fail, load, validate

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


def _quota_rows(project: Project | None) -> dict[str, Any]:
    if project is None:
        return {}
    from rental.models import Quota

    return {
        q.gpu_model.name: q
        for q in Quota.objects.filter(project=project).select_related("gpu_model")
    }


def _volumes(project: Project | None) -> list[dict[str, Any]]:
    if project is None:
        return []
    from rental.models import DataVolume

    return [
        {"name": v.name, "zone": v.zone, "size_gb": v.size_gb}
        for v in DataVolume.objects.filter(project=project).order_by("name", "pk")
    ]


def _members(project: Project | None) -> list[dict[str, str]]:
    if project is None:
        return []
    rows = Membership.objects.filter(project=project).select_related("user")
    return sorted(
        ({"username": m.user.get_username(), "role": m.role} for m in rows),
        key=lambda item: item["username"],
    )


def _budget(project: Project | None) -> dict[str, Any] | None:
    if project is None:
        return None
    from billing import selectors as billing_selectors  # billing imports portal, not back

    return billing_selectors.budget_settings(project_id=project.pk)


def document(project: Project) -> dict[str, Any]:
    """The configuration as plain data, keys in a stable order."""
    budget = _budget(project)
    return {
        "project": project.slug,
        "name": project.name,
        "quotas": [
            {
                "gpu_model": name,
                "guaranteed": q.guaranteed,
                "ceiling": q.ceiling,
                "weight": str(q.weight),
                "auto_approve": {
                    "max_gpus": q.max_gpus_per_lease,
                    "max_hours": q.max_hours_per_lease,
                    "gpus_cap": q.auto_approve_gpus_cap,
                    "hours_cap": q.auto_approve_hours_cap,
                },
            }
            for name, q in sorted(_quota_rows(project).items())
        ],
        "budget": None
        if budget is None
        else {
            "monthly_amount": str(budget["monthly_amount"]),
            "cap_policy": budget["cap_policy"],
            "thresholds": budget["thresholds"],
        },
        "members": _members(project),
        "default_image": None,
        "volumes": _volumes(project),
    }


def dump(data: dict[str, Any]) -> str:
    return yaml.safe_dump(data, sort_keys=False, allow_unicode=True, default_flow_style=False)


def export_project(project: Project) -> str:
    """One YAML document describing the project's configuration."""
    return dump(document(project))


def _arrow(old: Any, new: Any) -> str:
    return f"{'—' if old is None else old} → {'—' if new is None else new}"


def plan(doc: str, *, actor, project: Project | None = None) -> Plan:
    """Check a document and list its changes; ``project`` pins the slug (the API's URL)."""
    from rental.models import GpuModel

    data = load(doc)
    gpu_models = {m.name: m for m in GpuModel.objects.all()}
    config = validate(data, gpu_models=gpu_models)
    config["gpu_models"] = gpu_models
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


def _caps(quota) -> dict[str, int | None]:
    """The admin's caps on a quota's auto-approve limits, by their document keys."""
    return {"gpus_cap": quota.auto_approve_gpus_cap, "hours_cap": quota.auto_approve_hours_cap}


def _diff(project: Project | None, config: dict[str, Any]) -> list[str]:
    changes: list[str] = []
    if project is None:
        changes.append(_("project: create “%(slug)s”") % {"slug": config["project"]})
    elif "name" in config and config["name"] != project.name:
        changes.append(_("name: %(change)s") % {"change": _arrow(project.name, config["name"])})
    current = _quota_rows(project)
    for index, want in enumerate(config["quotas"]):
        path = f"quotas[{index}]"
        have = current.get(want["gpu_model"])
        if have is None:
            changes.append(
                _("%(path)s: add %(model)s with G %(g)s, L %(l)s, weight %(w)s")
                % {
                    "path": path,
                    "model": want["gpu_model"],
                    "g": want["guaranteed"],
                    "l": want["ceiling"],
                    "w": want["weight"],
                }
            )
            continue
        pairs = (
            ("guaranteed", have.guaranteed, want["guaranteed"]),
            ("ceiling", have.ceiling, want["ceiling"]),
            ("weight", have.weight, want["weight"]),
            ("auto_approve.max_gpus", have.max_gpus_per_lease, want["max_gpus"]),
            ("auto_approve.max_hours", have.max_hours_per_lease, want["max_hours"]),
            *(
                (f"auto_approve.{key}", have_cap, want[key])
                for key, have_cap in _caps(have).items()
                if key in want
            ),
        )
        for name, old, new in pairs:
            if old != new:
                changes.append(f"{path}.{name} ({want['gpu_model']}): {_arrow(old, new)}")
    wanted = {q["gpu_model"] for q in config["quotas"]}
    for name in sorted(set(current) - wanted):
        changes.append(_("quotas: remove %(model)s") % {"model": name})
    budget, want_budget = _budget(project), config["budget"]
    if budget != want_budget:
        if want_budget is None:
            changes.append(_("budget: remove"))
        else:
            for key in ("monthly_amount", "cap_policy", "thresholds"):
                old = None if budget is None else budget[key]
                if old != want_budget[key]:
                    changes.append(f"budget.{key}: {_arrow(old, want_budget[key])}")
    have_members = {m["username"]: m["role"] for m in _members(project)}
    want_members = {m["username"]: m["role"] for m in config["members"]}
    for name in sorted(set(have_members) | set(want_members)):
        old, new = have_members.get(name), want_members.get(name)
        if old != new:
            changes.append(f"members[{name}]: {_arrow(old, new)}")
    if config["volumes"] != _volumes(project):
        changes.append(_("volumes: changed"))
    return changes


def _prefixed(error: DomainError, path: str) -> DomainError:
    where = f"{path}.{error.field}" if error.field else path
    return type(error)(
        f"{where}: {error.message}", code=error.code, field=where, figures=error.figures
    )


@transaction.atomic
def apply(plan: Plan, *, actor) -> Project:
    """Make the plan's changes, all or nothing, through the services the web uses."""
    return _apply(plan, actor=actor)


def _apply_caps(actor, project: Project, gpu_model, want: dict[str, Any]) -> None:
    """The admin's caps, when the document names them and they change (admins only:
    the service refuses anyone else)."""
    from rental.loans import quota_requests
    from rental.models import Quota

    if not any(key in want for key in CAP_KEYS):
        return
    quota = Quota.objects.get(project=project, gpu_model=gpu_model)
    have = _caps(quota)
    wanted = {key: want.get(key, have[key]) for key in have}
    if wanted != have:
        quota_requests.set_auto_approve_caps(
            actor=actor,
            quota=quota,
            gpus_cap=wanted["gpus_cap"],
            hours_cap=wanted["hours_cap"],
            source=SOURCE,
        )


def _apply(plan: Plan, *, actor) -> Project:
    from billing import budgets
    from rental.loans import quota_requests, quotas

    config = plan.config
    project = Project.objects.select_for_update().filter(slug=plan.slug).first()
    if project is None:
        if not access.is_admin(actor):
            raise NotPermitted(_("Only admins create projects."), field="project")
        project = Project.objects.create(slug=plan.slug, name=config.get("name") or plan.slug)
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
    if config.get("name") and config["name"] != project.name:
        if not access.is_admin(actor):
            raise NotPermitted(_("name: only admins rename a project."), field="name")
        before = {"name": project.name}
        project.name = config["name"]
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
    current = _quota_rows(project)
    wanted = {q["gpu_model"] for q in config["quotas"]}
    for name in sorted(set(current) - wanted):
        raise fail(
            "quotas",
            _(
                "removing the quota for %(model)s is not supported; "
                "set its guaranteed and ceiling to 0"
            )
            % {"model": name},
        )
    for index, want in enumerate(config["quotas"]):
        path = f"quotas[{index}]"
        have = current.get(want["gpu_model"])
        try:
            if have is None or (have.guaranteed, have.ceiling, have.weight) != (
                want["guaranteed"],
                want["ceiling"],
                want["weight"],
            ):
                quotas.set_quota(
                    actor=actor,
                    project=project,
                    gpu_model=config["gpu_models"][want["gpu_model"]],
                    guaranteed=want["guaranteed"],
                    ceiling=want["ceiling"],
                    weight=want["weight"],
                    max_gpus_per_lease=want["max_gpus"],
                    max_hours_per_lease=want["max_hours"],
                    source=SOURCE,
                )
            elif (have.max_gpus_per_lease, have.max_hours_per_lease) != (
                want["max_gpus"],
                want["max_hours"],
            ):
                quota_requests.set_auto_approve_limits(
                    actor=actor,
                    quota=have,
                    max_gpus=want["max_gpus"],
                    max_hours=want["max_hours"],
                    source=SOURCE,
                )
            _apply_caps(actor, project, config["gpu_models"][want["gpu_model"]], want)
        except DomainError as error:
            raise _prefixed(error, path) from None
    want_budget = config["budget"]
    budget = _budget(project)
    if want_budget is None and budget is not None:
        raise fail("budget", _("removing a budget is not supported; set its monthly_amount to 0"))
    if want_budget is not None and budget != want_budget:
        try:
            budgets.set_budget(
                project=project,
                actor=actor,
                monthly_amount=want_budget["monthly_amount"],
                thresholds=want_budget["thresholds"],
                cap_policy=want_budget["cap_policy"],
            )
        except DomainError as error:
            raise _prefixed(error, "budget") from None
    have_members = {
        m.user.get_username(): m
        for m in Membership.objects.filter(project=project).select_related("user")
    }
    for index, want in enumerate(config["members"]):
        try:
            memberships.set_membership(
                actor=actor, project=project, user=want["user"], role=want["role"], source=SOURCE
            )
        except DomainError as error:
            raise _prefixed(error, f"members[{index}]") from None
    want_names = {m["username"] for m in config["members"]}
    for name in sorted(set(have_members) - want_names):
        memberships.remove_membership(
            actor=actor, project=project, user=have_members[name].user, source=SOURCE
        )
    if config["volumes"] != _volumes(project):
        raise fail(
            "volumes",
            _(
                "data volumes are made and deleted on the project's Volumes page; "
                "configuration does not change them yet"
            ),
        )
    return project
