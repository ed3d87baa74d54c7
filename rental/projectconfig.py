"""Rental's section of a project's configuration document (``portal/projectconfig.py``):
``quotas``, ``default_image`` and ``volumes``, named in ``PORTAL_PROJECT_CONFIG_SECTIONS``.

Quotas are written per GPU model (G, L, weight, auto-approve limits and the admin's caps
on them) and applied through the quota services, so with their rules: a change of G, L
or the weight needs an admin (Q1 refusals carry their figures), the limits a manager,
the caps an admin. A quota is never removed by a document. The portal keeps no default
image per project yet (``default_image`` must be null), and data volumes are cloud
resources made on the Volumes page, so they are exported for reading and a document that
changes them is refused.
"""

from decimal import Decimal
from typing import Any

from django.utils.translation import gettext as _

from portal.errors import DomainError
from portal.models import Project
from portal.projectconfig import SOURCE, arrow, prefixed
from portal.projectconfig_schema import count, decimal, fail, mapping, text
from rental.loans import quota_requests, quotas
from rental.models import DataVolume, GpuModel, Quota

KEYS = ("quotas", "default_image", "volumes")
QUOTA_KEYS = ("gpu_model", "guaranteed", "ceiling", "weight", "auto_approve")
AUTO_KEYS = ("max_gpus", "max_hours", "gpus_cap", "hours_cap")
# The admin's caps on the limits: applied only when the document names them, so a
# document written before they were exported leaves them as they are.
CAP_KEYS = ("gpus_cap", "hours_cap")


def read(project: Project | None) -> dict[str, Any]:
    """The project's quotas (by GPU model name), default image and data volumes."""
    return {
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
        "default_image": None,
        "volumes": _volumes(project),
    }


def validate(key: str, value: Any) -> Any:
    """``quotas``: a list of quotas, each with its GPU model's row (``model``) for
    applying; ``default_image``: None; ``volumes``: the list as written."""
    if key == "quotas":
        return _validate_quotas(value)
    if key == "default_image":
        if value is not None:
            raise fail("default_image", _("is not stored by the portal yet; leave it empty (null)"))
        return None
    if key == "volumes":
        volumes = value or []
        if not isinstance(volumes, list):
            raise fail("volumes", _("must be a list"))
        return volumes
    raise KeyError(key)


def changes(key: str, want: Any, *, project: Project | None) -> list[str]:
    """Quotas added or changed (in the document's order), then those the document
    leaves out; ``volumes: changed`` when the volumes differ."""
    if key == "quotas":
        return _quota_changes(project, want)
    if key == "volumes" and want != _volumes(project):
        return [_("volumes: changed")]
    return []


def apply(key: str, want: Any, *, project: Project, actor: Any) -> None:
    """Quotas: refuse a removal, then set each changed quota (or only its limits), then
    the caps the document names; volumes: refuse any change. The default image is null."""
    if key == "quotas":
        _apply_quotas(project, want, actor=actor)
    elif key == "volumes" and want != _volumes(project):
        raise fail(
            "volumes",
            _(
                "data volumes are made and deleted on the project's Volumes page; "
                "configuration does not change them yet"
            ),
        )


def _quota_rows(project: Project | None) -> dict[str, Quota]:
    if project is None:
        return {}
    return {
        q.gpu_model.name: q
        for q in Quota.objects.filter(project=project).select_related("gpu_model")
    }


def _volumes(project: Project | None) -> list[dict[str, Any]]:
    if project is None:
        return []
    return [
        {"name": v.name, "zone": v.zone, "size_gb": v.size_gb}
        for v in DataVolume.objects.filter(project=project).order_by("name", "pk")
    ]


def _caps(quota: Quota) -> dict[str, int | None]:
    """The admin's caps on a quota's auto-approve limits, by their document keys."""
    return {"gpus_cap": quota.auto_approve_gpus_cap, "hours_cap": quota.auto_approve_hours_cap}


def _validate_quotas(value: Any) -> list[dict[str, Any]]:
    items = value or []
    if not isinstance(items, list):
        raise fail("quotas", _("must be a list"))
    gpu_models = {m.name: m for m in GpuModel.objects.all()}
    result = []
    seen: set[str] = set()
    for index, item in enumerate(items):
        path = f"quotas[{index}]"
        mapping(item, path, QUOTA_KEYS, ("gpu_model", "guaranteed", "ceiling"))
        name = text(item["gpu_model"], f"{path}.gpu_model", max_length=60)
        if name not in gpu_models:
            raise fail(f"{path}.gpu_model", _("unknown GPU model “%(name)s”") % {"name": name})
        if name in seen:
            raise fail(f"{path}.gpu_model", _("is listed twice"))
        seen.add(name)
        guaranteed = count(item["guaranteed"], f"{path}.guaranteed")
        ceiling = count(item["ceiling"], f"{path}.ceiling")
        if ceiling < guaranteed:
            raise fail(f"{path}.ceiling", _("must be ≥ guaranteed"))
        weight = decimal(
            item.get("weight", "1"), f"{path}.weight", places=3, below=Decimal(10) ** 5
        )
        if weight <= 0:
            raise fail(f"{path}.weight", _("must be more than zero"))
        auto = item.get("auto_approve") or {}
        mapping(auto, f"{path}.auto_approve", AUTO_KEYS, ())
        quota = {
            "gpu_model": name,
            "model": gpu_models[name],
            "guaranteed": guaranteed,
            "ceiling": ceiling,
            "weight": weight,
            "max_gpus": count(auto.get("max_gpus"), f"{path}.auto_approve.max_gpus", optional=True),
            "max_hours": count(
                auto.get("max_hours"), f"{path}.auto_approve.max_hours", optional=True
            ),
        }
        for key in CAP_KEYS:
            if key in auto:
                quota[key] = count(auto[key], f"{path}.auto_approve.{key}", optional=True)
        for limit, cap in (("max_gpus", "gpus_cap"), ("max_hours", "hours_cap")):
            if None not in (quota[limit], quota.get(cap)) and quota[limit] > quota[cap]:
                raise fail(
                    f"{path}.auto_approve.{limit}",
                    _("must be ≤ %(cap)s (auto_approve.%(key)s)") % {"cap": quota[cap], "key": cap},
                )
        result.append(quota)
    return result


def _quota_changes(project: Project | None, want_quotas: list[dict[str, Any]]) -> list[str]:
    changes: list[str] = []
    current = _quota_rows(project)
    for index, want in enumerate(want_quotas):
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
                changes.append(f"{path}.{name} ({want['gpu_model']}): {arrow(old, new)}")
    wanted = {q["gpu_model"] for q in want_quotas}
    for name in sorted(set(current) - wanted):
        changes.append(_("quotas: remove %(model)s") % {"model": name})
    return changes


def _apply_quotas(project: Project, want_quotas: list[dict[str, Any]], *, actor: Any) -> None:
    current = _quota_rows(project)
    wanted = {q["gpu_model"] for q in want_quotas}
    for name in sorted(set(current) - wanted):
        raise fail(
            "quotas",
            _(
                "removing the quota for %(model)s is not supported; "
                "set its guaranteed and ceiling to 0"
            )
            % {"model": name},
        )
    for index, want in enumerate(want_quotas):
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
                    gpu_model=want["model"],
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
            _apply_caps(project, want, actor=actor)
        except DomainError as error:
            raise prefixed(error, path) from None


def _apply_caps(project: Project, want: dict[str, Any], *, actor: Any) -> None:
    """The admin's caps, when the document names them and they change (admins only:
    the service refuses anyone else)."""
    if not any(key in want for key in CAP_KEYS):
        return
    quota = Quota.objects.get(project=project, gpu_model=want["model"])
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
