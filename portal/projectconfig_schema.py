"""The shape of a project's configuration document, checked field by field.

Every error names its YAML path (``quotas[0].ceiling: must be ≥ guaranteed``) so a person
can find the line. Only shapes, types and references are checked here; the rules (Q1, who
may change what) are the services' when the plan is applied.
"""

from decimal import Decimal, InvalidOperation
from typing import Any

import yaml
from django.contrib.auth import get_user_model
from django.utils.translation import gettext as _

from portal.errors import InvalidInput
from portal.models import Membership

TOP_KEYS = ("project", "name", "quotas", "budget", "members", "default_image", "volumes")
QUOTA_KEYS = ("gpu_model", "guaranteed", "ceiling", "weight", "auto_approve")
AUTO_KEYS = ("max_gpus", "max_hours", "gpus_cap", "hours_cap")
# The admin's caps on the limits: applied only when the document names them, so a
# document written before they were exported leaves them as they are.
CAP_KEYS = ("gpus_cap", "hours_cap")
BUDGET_KEYS = ("monthly_amount", "cap_policy", "thresholds")
MEMBER_KEYS = ("username", "role")
MAX_INT = 1_000_000
MAX_DOCUMENT = 256 * 1024


def fail(path: str, message: str) -> InvalidInput:
    return InvalidInput(f"{path}: {message}", code="invalid_config", field=path)


def _mapping(value: Any, path: str, keys: tuple[str, ...], required: tuple[str, ...]) -> dict:
    if not isinstance(value, dict):
        raise fail(path or "document", _("must be a mapping"))
    for key in value:
        if key not in keys:
            raise fail(f"{path}.{key}" if path else str(key), _("unknown key"))
    for key in required:
        if key not in value:
            raise fail(f"{path}.{key}" if path else key, _("is required"))
    return value


def _count(value: Any, path: str, *, optional: bool = False) -> int | None:
    if value is None and optional:
        return None
    if isinstance(value, bool) or not isinstance(value, int):
        raise fail(path, _("must be a whole number"))
    if not 0 <= value <= MAX_INT:
        raise fail(path, _("must be from 0 to %(max)s") % {"max": MAX_INT})
    return value


def _decimal(value: Any, path: str, *, places: int) -> Decimal:
    if isinstance(value, bool) or not isinstance(value, int | float | str):
        raise fail(path, _("must be a number"))
    try:
        number = Decimal(str(value))
    except InvalidOperation:
        raise fail(path, _("must be a number")) from None
    if not number.is_finite() or number < 0 or number > Decimal(10) ** 12:
        raise fail(path, _("must be a number from 0 to 10¹²"))
    return number.quantize(Decimal(1).scaleb(-places))


def _text(value: Any, path: str, *, max_length: int = 120) -> str:
    if not isinstance(value, str) or not value or len(value) > max_length or "\x00" in value:
        raise fail(path, _("must be a text of 1 to %(max)s characters") % {"max": max_length})
    return value


def load(doc: str) -> Any:
    """YAML text → Python data (safe loader only), or an error naming the line."""
    if not isinstance(doc, str) or "\x00" in doc:
        raise fail("document", _("must be YAML text"))
    if len(doc) > MAX_DOCUMENT:
        raise fail("document", _("is longer than %(max)s bytes") % {"max": MAX_DOCUMENT})
    try:
        return yaml.safe_load(doc)
    except yaml.YAMLError as error:
        mark = getattr(error, "problem_mark", None)
        where = _("line %(line)s") % {"line": mark.line + 1} if mark else ""
        raise fail("document", _("is not valid YAML %(where)s") % {"where": where}) from None


def validate(data: Any, *, gpu_models: dict[str, Any]) -> dict[str, Any]:
    """Checked, normalised configuration; ``gpu_models`` maps names to GpuModel rows."""
    _mapping(data, "", TOP_KEYS, ("project",))
    result: dict[str, Any] = {"project": _text(data["project"], "project", max_length=50)}
    if "name" in data:
        result["name"] = _text(data["name"], "name")
    quotas = data.get("quotas") or []
    if not isinstance(quotas, list):
        raise fail("quotas", _("must be a list"))
    result["quotas"] = []
    seen: set[str] = set()
    for index, item in enumerate(quotas):
        path = f"quotas[{index}]"
        _mapping(item, path, QUOTA_KEYS, ("gpu_model", "guaranteed", "ceiling"))
        name = _text(item["gpu_model"], f"{path}.gpu_model", max_length=60)
        if name not in gpu_models:
            raise fail(f"{path}.gpu_model", _("unknown GPU model “%(name)s”") % {"name": name})
        if name in seen:
            raise fail(f"{path}.gpu_model", _("is listed twice"))
        seen.add(name)
        guaranteed = _count(item["guaranteed"], f"{path}.guaranteed")
        ceiling = _count(item["ceiling"], f"{path}.ceiling")
        if ceiling < guaranteed:
            raise fail(f"{path}.ceiling", _("must be ≥ guaranteed"))
        weight = _decimal(item.get("weight", "1"), f"{path}.weight", places=3)
        if weight <= 0:
            raise fail(f"{path}.weight", _("must be more than zero"))
        auto = item.get("auto_approve") or {}
        _mapping(auto, f"{path}.auto_approve", AUTO_KEYS, ())
        quota = {
            "gpu_model": name,
            "guaranteed": guaranteed,
            "ceiling": ceiling,
            "weight": weight,
            "max_gpus": _count(
                auto.get("max_gpus"), f"{path}.auto_approve.max_gpus", optional=True
            ),
            "max_hours": _count(
                auto.get("max_hours"), f"{path}.auto_approve.max_hours", optional=True
            ),
        }
        for key in CAP_KEYS:
            if key in auto:
                quota[key] = _count(auto[key], f"{path}.auto_approve.{key}", optional=True)
        for limit, cap in (("max_gpus", "gpus_cap"), ("max_hours", "hours_cap")):
            if None not in (quota[limit], quota.get(cap)) and quota[limit] > quota[cap]:
                raise fail(
                    f"{path}.auto_approve.{limit}",
                    _("must be ≤ %(cap)s (auto_approve.%(key)s)") % {"cap": quota[cap], "key": cap},
                )
        result["quotas"].append(quota)
    result["budget"] = _budget(data.get("budget"))
    result["members"] = _members(data.get("members") or [])
    if data.get("default_image") is not None:
        raise fail("default_image", _("is not stored by the portal yet; leave it empty (null)"))
    volumes = data.get("volumes") or []
    if not isinstance(volumes, list):
        raise fail("volumes", _("must be a list"))
    result["volumes"] = volumes
    return result


def _budget(value: Any) -> dict[str, Any] | None:
    if value is None:
        return None
    _mapping(value, "budget", BUDGET_KEYS, ("monthly_amount",))
    thresholds = value.get("thresholds") or []
    if not isinstance(thresholds, list):
        raise fail("budget.thresholds", _("must be a list"))
    cleaned = []
    for index, item in enumerate(thresholds):
        path = f"budget.thresholds[{index}]"
        _mapping(item, path, ("percent", "kind"), ("percent", "kind"))
        percent = _count(item["percent"], f"{path}.percent")
        if not 1 <= percent <= 1000:
            raise fail(f"{path}.percent", _("must be from 1 to 1000"))
        if item["kind"] not in ("actual", "forecast"):
            raise fail(f"{path}.kind", _("must be “actual” or “forecast”"))
        cleaned.append({"percent": percent, "kind": item["kind"]})
    policy = value.get("cap_policy", "refuse_new")
    if policy not in ("refuse_new", "stop_burst"):
        raise fail("budget.cap_policy", _("must be “refuse_new” or “stop_burst”"))
    return {
        "monthly_amount": _decimal(value["monthly_amount"], "budget.monthly_amount", places=2),
        "cap_policy": policy,
        "thresholds": sorted(cleaned, key=lambda item: (item["kind"], item["percent"])),
    }


def _members(value: Any) -> list[dict[str, Any]]:
    if not isinstance(value, list):
        raise fail("members", _("must be a list"))
    names = []
    for index, item in enumerate(value):
        path = f"members[{index}]"
        _mapping(item, path, MEMBER_KEYS, MEMBER_KEYS)
        names.append(_text(item["username"], f"{path}.username", max_length=150))
        if item["role"] not in Membership.Role.values:
            raise fail(f"{path}.role", _("must be “manager” or “engineer”"))
    users = {
        u.get_username(): u
        for u in get_user_model().objects.filter(**{"username__in": names, "is_active": True})
    }
    members, seen = [], set()
    for index, (name, item) in enumerate(zip(names, value, strict=True)):
        if name not in users:
            raise fail(f"members[{index}].username", _("unknown user “%(name)s”") % {"name": name})
        if name in seen:
            raise fail(f"members[{index}].username", _("is listed twice"))
        seen.add(name)
        members.append({"username": name, "user": users[name], "role": item["role"]})
    return members
