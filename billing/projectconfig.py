"""Billing's section of a project's configuration document (``portal/projectconfig.py``):
``budget``, named in ``PORTAL_PROJECT_CONFIG_SECTIONS``.

The budget (monthly amount, cap policy, thresholds) is set through ``billing.budgets``,
so only a manager of the project (or an admin) sets it; a document never removes one
(``budget: null`` over a budget is refused: set its monthly amount to 0).
"""

from typing import Any

from django.utils.translation import gettext as _

from billing import budgets, selectors
from portal.errors import DomainError
from portal.models import Project
from portal.projectconfig import arrow, prefixed
from portal.projectconfig_schema import count, decimal, fail, mapping

KEYS = ("budget",)
BUDGET_KEYS = ("monthly_amount", "cap_policy", "thresholds")
THRESHOLD_KEYS = ("percent", "kind")


def read(project: Project | None) -> dict[str, Any]:
    """The project's budget as the document writes it (the amount as a string), or None."""
    budget = _budget(project)
    return {
        "budget": None
        if budget is None
        else {
            "monthly_amount": str(budget["monthly_amount"]),
            "cap_policy": budget["cap_policy"],
            "thresholds": budget["thresholds"],
        }
    }


def validate(key: str, value: Any) -> dict[str, Any] | None:
    """The budget with its amount a Decimal (2 places), its cap policy (``refuse_new``
    unless given) and its thresholds sorted by kind and percent; None when absent."""
    if value is None:
        return None
    mapping(value, "budget", BUDGET_KEYS, ("monthly_amount",))
    thresholds = value.get("thresholds") or []
    if not isinstance(thresholds, list):
        raise fail("budget.thresholds", _("must be a list"))
    cleaned = []
    for index, item in enumerate(thresholds):
        path = f"budget.thresholds[{index}]"
        mapping(item, path, THRESHOLD_KEYS, THRESHOLD_KEYS)
        percent = count(item["percent"], f"{path}.percent")
        if not 1 <= percent <= 1000:
            raise fail(f"{path}.percent", _("must be from 1 to 1000"))
        if item["kind"] not in ("actual", "forecast"):
            raise fail(f"{path}.kind", _("must be “actual” or “forecast”"))
        cleaned.append({"percent": percent, "kind": item["kind"]})
    policy = value.get("cap_policy", "refuse_new")
    if policy not in ("refuse_new", "stop_burst"):
        raise fail("budget.cap_policy", _("must be “refuse_new” or “stop_burst”"))
    return {
        "monthly_amount": decimal(value["monthly_amount"], "budget.monthly_amount", places=2),
        "cap_policy": policy,
        "thresholds": sorted(cleaned, key=lambda item: (item["kind"], item["percent"])),
    }


def changes(key: str, want: dict[str, Any] | None, *, project: Project | None) -> list[str]:
    """``budget: remove``, or each of the budget's fields that changes."""
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


def apply(key: str, want: dict[str, Any] | None, *, project: Project, actor: Any) -> None:
    """Set the budget when it changes (a manager's right); refuse to remove one."""
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
