"""The audit log: one row per state change, written inside the change's transaction."""

from typing import Any

from django.db.models import Model
from django.utils import timezone

from portal.models import AuditEvent, Project


def record(
    *,
    actor: Any,
    verb: str,
    obj: Model,
    source: str,
    project: Project | int | None = None,
    before: dict[str, Any] | None = None,
    after: dict[str, Any] | None = None,
    at: Any = None,
) -> AuditEvent:
    """Write one audit event. ``actor`` is a user or None for the system."""
    project_id = project if isinstance(project, int) or project is None else project.pk
    return AuditEvent.objects.create(
        at=at or timezone.now(),
        actor=actor if getattr(actor, "is_authenticated", False) else None,
        verb=verb,
        object_type=obj._meta.label_lower,
        object_id=str(obj.pk),
        project_id=project_id,
        before=_jsonable(before or {}),
        after=_jsonable(after or {}),
        source=source,
    )


def _jsonable(data: dict[str, Any]) -> dict[str, Any]:
    return {key: _json_value(value) for key, value in data.items()}


def _json_value(value: Any) -> Any:
    """Numbers, booleans and None as they are, lists and mappings item by item (so the
    audit page can list them), anything else (Decimal, datetime, a model) as its text."""
    if isinstance(value, int | float | bool | type(None)):
        return value
    if isinstance(value, list | tuple):
        return [_json_value(item) for item in value]
    if isinstance(value, dict):
        return {str(key): _json_value(item) for key, item in value.items()}
    return str(value)
