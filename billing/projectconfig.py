"""Billing's section of a project's configuration document (``portal/projectconfig.py``):
``budget`` and ``gpu_hour_allocations``, named in ``PORTAL_PROJECT_CONFIG_SECTIONS``.

The budget (monthly amount, cap policy, thresholds) is set through ``billing.budgets``,
so only a manager of the project (or an admin) sets it; a document never removes one
(``budget: null`` over a budget is refused: set its monthly amount to 0).

GPU-hour allocations (GA1–GA3) are a list per GPU model, set and removed through
``billing.allocations`` (the same right): a list is the whole set, so an allocation the
list leaves out is removed; a document without the key (or with ``null``) leaves them as
they are, so a document written before allocations existed changes none.
"""

from typing import Any

from django.utils.translation import gettext as _

from billing import allocations, budgets, selectors
from billing.models import GpuHourAllocation
from billing.thresholds import readable_thresholds
from portal.errors import DomainError
from portal.models import Project
from portal.projectconfig import arrow, prefixed
from portal.projectconfig_schema import count, decimal, fail, mapping, text
from rental.models import GpuModel

KEYS = ("budget", "gpu_hour_allocations")
BUDGET_KEYS = ("monthly_amount", "cap_policy", "thresholds")
THRESHOLD_KEYS = ("percent", "kind")
ALLOCATION = "gpu_hour_allocations"
ALLOCATION_KEYS = ("gpu_model", "monthly_hours", "hard_stop", "thresholds")


def read(project: Project | None) -> dict[str, Any]:
    """The project's budget as the document writes it (the amount as a string), or None;
    its GPU-hour allocations by GPU model name (the hours as a string)."""
    budget = _budget(project)
    return {
        ALLOCATION: [
            {**item, "monthly_hours": str(item["monthly_hours"])}
            for item in _allocations(project).values()
        ],
        "budget": None
        if budget is None
        else {
            "monthly_amount": str(budget["monthly_amount"]),
            "cap_policy": budget["cap_policy"],
            "thresholds": budget["thresholds"],
        },
    }


def _thresholds(value: Any, path: str) -> list[dict[str, Any]]:
    """Thresholds as a budget's: a list of {percent: 1–1000, kind: actual | forecast}."""
    thresholds = value or []
    if not isinstance(thresholds, list):
        raise fail(path, _("must be a list"))
    cleaned = []
    for index, item in enumerate(thresholds):
        where = f"{path}[{index}]"
        mapping(item, where, THRESHOLD_KEYS, THRESHOLD_KEYS)
        percent = count(item["percent"], f"{where}.percent")
        if not 1 <= percent <= 1000:
            raise fail(f"{where}.percent", _("must be from 1 to 1000"))
        if item["kind"] not in ("actual", "forecast"):
            raise fail(f"{where}.kind", _("must be “actual” or “forecast”"))
        cleaned.append({"percent": percent, "kind": item["kind"]})
    return sorted(cleaned, key=lambda item: (item["kind"], item["percent"]))


def validate(key: str, value: Any) -> Any:
    """``budget``: the budget with its amount a Decimal (2 places), its cap policy
    (``refuse_new`` unless given) and its thresholds sorted by kind and percent; None when
    absent. ``gpu_hour_allocations``: the allocations by GPU model name; None when
    absent (nothing changes)."""
    if key == ALLOCATION:
        return _validate_allocations(value)
    if value is None:
        return None
    mapping(value, "budget", BUDGET_KEYS, ("monthly_amount",))
    cleaned = _thresholds(value.get("thresholds"), "budget.thresholds")
    policy = value.get("cap_policy", "refuse_new")
    if policy not in ("refuse_new", "stop_burst"):
        raise fail("budget.cap_policy", _("must be “refuse_new” or “stop_burst”"))
    return {
        "monthly_amount": decimal(value["monthly_amount"], "budget.monthly_amount", places=2),
        "cap_policy": policy,
        "thresholds": cleaned,
    }


def _validate_allocations(value: Any) -> dict[str, dict[str, Any]] | None:
    if value is None:
        return None
    if not isinstance(value, list):
        raise fail(ALLOCATION, _("must be a list"))
    names = [item.get("gpu_model") if isinstance(item, dict) else None for item in value]
    known = set(
        GpuModel.objects.filter(name__in=[n for n in names if isinstance(n, str)]).values_list(
            "name", flat=True
        )
    )
    found: dict[str, dict[str, Any]] = {}
    for index, item in enumerate(value):
        path = f"{ALLOCATION}[{index}]"
        mapping(item, path, ALLOCATION_KEYS, ("gpu_model", "monthly_hours"))
        name = text(item["gpu_model"], f"{path}.gpu_model", max_length=100)
        if name not in known:
            raise fail(f"{path}.gpu_model", _("no GPU model has this name"))
        if name in found:
            raise fail(f"{path}.gpu_model", _("is listed twice"))
        hard_stop = item.get("hard_stop", False)
        if not isinstance(hard_stop, bool):
            raise fail(f"{path}.hard_stop", _("must be true or false"))
        found[name] = {
            "gpu_model": name,
            "monthly_hours": decimal(
                item["monthly_hours"],
                f"{path}.monthly_hours",
                places=2,
                below=allocations.HOURS_BELOW,
            ),
            "hard_stop": hard_stop,
            "thresholds": _thresholds(item.get("thresholds"), f"{path}.thresholds"),
        }
    return found


def changes(key: str, want: Any, *, project: Project | None) -> list[str]:
    """``budget: remove``, or each of the budget's fields that changes; each allocation
    added, changed or removed."""
    if key == ALLOCATION:
        return _allocation_changes(want, project=project)
    budget = _budget(project)
    if budget == want:
        return []
    if want is None:
        return [_("budget: remove")]
    lines = []
    for field in BUDGET_KEYS:
        old = None if budget is None else budget[field]
        if old != want[field]:
            lines.append(f"budget.{field}: {arrow(old, want[field])}")
    return lines


def apply(key: str, want: Any, *, project: Project, actor: Any) -> None:
    """Set the budget when it changes (a manager's right); refuse to remove one. Set each
    allocation that changes and remove those a list leaves out (a manager's right)."""
    if key == ALLOCATION:
        _apply_allocations(want, project=project, actor=actor)
        return
    budget = _budget(project)
    if want is None and budget is not None:
        raise fail("budget", _("removing a budget is not supported; set its monthly_amount to 0"))
    if want is not None and budget != want:
        try:
            budgets.set_budget(
                project=project,
                actor=actor,
                monthly_amount=want["monthly_amount"],
                thresholds=want["thresholds"],
                cap_policy=want["cap_policy"],
            )
        except DomainError as error:
            raise prefixed(error, "budget") from None


def _budget(project: Project | None) -> dict[str, Any] | None:
    if project is None:
        return None
    return selectors.budget_settings(project_id=project.pk)


def _allocations(project: Project | None) -> dict[str, dict[str, Any]]:
    """The project's allocations by GPU model name, as the document writes them."""
    if project is None:
        return {}
    return {
        row.gpu_model.name: {
            "gpu_model": row.gpu_model.name,
            "monthly_hours": row.monthly_hours,
            "hard_stop": row.hard_stop,
            "thresholds": readable_thresholds(row.thresholds)[0],
        }
        for row in GpuHourAllocation.objects.filter(project=project)
        .select_related("gpu_model")
        .order_by("gpu_model__name")
    }


def _allocation_changes(
    want: dict[str, dict[str, Any]] | None, *, project: Project | None
) -> list[str]:
    if want is None:
        return []
    have = _allocations(project)
    lines = []
    for name, item in want.items():
        old = have.get(name)
        if old is None:
            lines.append(
                _("%(key)s: add %(model)s (%(hours)s GPU-hours a month)")
                % {"key": ALLOCATION, "model": name, "hours": item["monthly_hours"]}
            )
            continue
        for field in ALLOCATION_KEYS[1:]:
            if old[field] != item[field]:
                lines.append(f"{ALLOCATION}[{name}].{field}: {arrow(old[field], item[field])}")
    for name in have:
        if name not in want:
            lines.append(_("%(key)s: remove %(model)s") % {"key": ALLOCATION, "model": name})
    return lines


def _apply_allocations(
    want: dict[str, dict[str, Any]] | None, *, project: Project, actor: Any
) -> None:
    if want is None:
        return
    have = _allocations(project)
    for index, (name, item) in enumerate(want.items()):
        if have.get(name) == item:
            continue
        try:
            allocations.set_allocation(
                project=project,
                actor=actor,
                gpu_model=name,
                monthly_hours=item["monthly_hours"],
                thresholds=item["thresholds"],
                hard_stop=item["hard_stop"],
            )
        except DomainError as error:
            raise prefixed(error, f"{ALLOCATION}[{index}]") from None
    for name in have:
        if name not in want:
            try:
                allocations.remove_allocation(project=project, actor=actor, gpu_model=name)
            except DomainError as error:
                raise prefixed(error, ALLOCATION) from None
