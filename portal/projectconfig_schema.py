"""The shape of a project's configuration document, checked field by field.

Every error names its YAML path (``quotas[0].ceiling: must be ≥ guaranteed``) so a person
can find the line. Only shapes, types and references are checked here; the rules (Q1, who
may change what) are the services' when the plan is applied.

The portal checks the document's top level and its own keys (``project``, ``name``,
``members``); every other key of ``TOP_KEYS`` belongs to a section module of another app
(``Section``, named in ``PORTAL_PROJECT_CONFIG_SECTIONS``), which checks it with the
helpers here (``fail``, ``mapping``, ``count``, ``decimal``, ``text``).
"""

from collections.abc import Mapping
from decimal import Decimal, InvalidOperation
from typing import Any, Protocol

import yaml
from django.utils.translation import gettext as _

from portal.errors import Conflict
from portal.models import Membership, Project
from portal.nesting import MAX_DEPTH, too_deep
from portal.service_tokens import people

TOP_KEYS = (
    "project",
    "name",
    "quotas",
    "budget",
    "gpu_hour_allocations",
    "members",
    "idp_groups",
    "default_image",
    "volumes",
)
# The keys the portal handles itself; a section module owns each of the others.
PORTAL_KEYS = ("project", "name", "members")
MEMBER_KEYS = ("username", "role")
MAX_INT = 1_000_000
MAX_DOCUMENT = 256 * 1024


class Section(Protocol):
    """What a module named in ``PORTAL_PROJECT_CONFIG_SECTIONS`` provides (a module meets
    this protocol with functions of these names). ``key`` is always one of ``KEYS``; the
    portal calls each in the order of ``TOP_KEYS``."""

    KEYS: tuple[str, ...]
    """The top-level keys of the document this section owns."""

    def read(self, project: Project | None) -> dict[str, Any]:
        """The current value of each of ``KEYS`` for ``project`` as the exported document
        writes it (plain YAML data); for None, a project not yet created, the values of
        a project that has none of this section's rows."""
        ...

    def validate(self, key: str, value: Any) -> Any:
        """The raw value of ``key`` in the document (None when the key is absent) checked
        and normalised; errors are ``fail(path, message)`` naming the YAML path."""
        ...

    def changes(self, key: str, want: Any, *, project: Project | None) -> list[str]:
        """The changes ``want`` (``validate``'s value) makes to ``project`` (None: to be
        created), one line each, in the order they are applied."""
        ...

    def apply(self, key: str, want: Any, *, project: Project, actor: Any) -> None:
        """Make the changes through the services (so their access rules), inside the
        portal's transaction, the project's row locked; a refusal is a ``DomainError``
        naming the YAML path, and undoes the whole document."""
        ...


def fail(path: str, message: str) -> Conflict:
    """A document the configuration's rules refuse, naming the YAML path. The API takes
    any text as a document (its schema cannot describe this one's), so the refusal is a
    rule's, 409 ``invalid_config``, not a malformed request's 400."""
    return Conflict(f"{path}: {message}", code="invalid_config", field=path)


def mapping(value: Any, path: str, keys: tuple[str, ...], required: tuple[str, ...]) -> dict:
    """``value`` if it is a mapping of only ``keys`` with every one of ``required``."""
    if not isinstance(value, dict):
        raise fail(path or "document", _("must be a mapping"))
    for key in value:
        if key not in keys:
            raise fail(f"{path}.{key}" if path else str(key), _("unknown key"))
    for key in required:
        if key not in value:
            raise fail(f"{path}.{key}" if path else key, _("is required"))
    return value


def count(value: Any, path: str, *, optional: bool = False) -> int | None:
    """A whole number from 0 to ``MAX_INT`` (or None, when ``optional``)."""
    if value is None and optional:
        return None
    if isinstance(value, bool) or not isinstance(value, int):
        raise fail(path, _("must be a whole number"))
    if not 0 <= value <= MAX_INT:
        raise fail(path, _("must be from 0 to %(max)s") % {"max": MAX_INT})
    return value


def decimal(value: Any, path: str, *, places: int, below: Decimal = Decimal(10) ** 12) -> Decimal:
    """A number from 0 up to (not including) ``below``, rounded to ``places`` decimal
    places: ``below`` is what the column holds (10¹² for 14 digits with two decimals)."""
    if isinstance(value, bool) or not isinstance(value, int | float | str):
        raise fail(path, _("must be a number"))
    try:
        number = Decimal(str(value))
    except InvalidOperation:
        raise fail(path, _("must be a number")) from None
    # Rounded first: 999999999999.995 rounds to 10^12, which the column cannot hold.
    if number.is_finite() and 0 <= number < below:
        number = number.quantize(Decimal(1).scaleb(-places))
    if not number.is_finite() or number < 0 or number >= below:
        most = below - Decimal(1).scaleb(-places)
        raise fail(path, _("must be a number from 0 to %(max)s") % {"max": f"{most:,}"})
    return number


def text(value: Any, path: str, *, max_length: int = 120) -> str:
    """A non-empty text of at most ``max_length`` characters."""
    if not isinstance(value, str) or not value or len(value) > max_length or "\x00" in value:
        raise fail(path, _("must be a text of 1 to %(max)s characters") % {"max": max_length})
    return value


def load(doc: str) -> Any:
    """YAML text → Python data (safe loader only), or an error naming the line."""
    if not isinstance(doc, str) or "\x00" in doc:
        raise fail("document", _("must be YAML text"))
    if len(doc) > MAX_DOCUMENT:
        raise fail("document", _("is longer than %(max)s bytes") % {"max": MAX_DOCUMENT})
    nested_too_deep = fail(
        "document", _("nests more than %(most)s levels deep") % {"most": MAX_DEPTH}
    )
    try:
        data = yaml.safe_load(doc)
    except yaml.YAMLError as error:
        mark = getattr(error, "problem_mark", None)
        where = _("line %(line)s") % {"line": mark.line + 1} if mark else ""
        raise fail("document", _("is not valid YAML %(where)s") % {"where": where}) from None
    except RecursionError:  # the YAML reader recurses as deep as the document nests
        raise nested_too_deep from None
    if too_deep(data):
        raise nested_too_deep
    return data


def validate(data: Any, *, sections: Mapping[str, Section]) -> dict[str, Any]:
    """Checked, normalised configuration, key by key in the order of ``TOP_KEYS``;
    ``sections`` maps each key the portal does not handle to the module that owns it."""
    mapping(data, "", TOP_KEYS, ("project",))
    result: dict[str, Any] = {}
    for key in TOP_KEYS:
        if key == "project":
            result["project"] = text(data["project"], "project", max_length=50)
        elif key == "name":
            if "name" in data:
                result["name"] = text(data["name"], "name")
        elif key == "members":
            result["members"] = _members(data.get("members") or [])
        else:
            result[key] = sections[key].validate(key, data.get(key))
    return result


def _members(value: Any) -> list[dict[str, Any]]:
    if not isinstance(value, list):
        raise fail("members", _("must be a list"))
    names = []
    for index, item in enumerate(value):
        path = f"members[{index}]"
        mapping(item, path, MEMBER_KEYS, MEMBER_KEYS)
        names.append(text(item["username"], f"{path}.username", max_length=150))
        if item["role"] not in Membership.Role.values:
            raise fail(f"{path}.role", _("must be “manager” or “engineer”"))
    users = {
        u.get_username(): u for u in people().filter(**{"username__in": names, "is_active": True})
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
