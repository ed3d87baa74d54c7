"""A driver's per-account options: what each driver declares it takes (its entry in the
registry's ``DRIVERS``), the one check of a value typed by an admin against that
declaration, and the frozen form a driver receives in ``AccountConfig.options``.

Options are settings, not secrets: where the cloud should put a launch (Alibaba Cloud's
security group and vSwitches), never credentials.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from enum import StrEnum
from typing import Any

from django.utils.functional import Promise
from django.utils.translation import gettext as _

MAX_NAME_LENGTH = 64
MAX_VALUE_LENGTH = 128
MAX_ENTRIES = 100


class OptionKind(StrEnum):
    """The JSON shape of an option's value."""

    TEXT = "string"  # one string
    MAP = "object"  # an object of strings: key (matching ``key_pattern``) → value


@dataclass(frozen=True)
class AccountOption:
    """One option a driver takes: its name, its shape, the pattern its strings (an
    object's values) must match, whether an account of the driver must set it, and
    words for the admin (``help``, marked for translation)."""

    name: str
    kind: OptionKind
    pattern: str
    help: str | Promise
    required: bool = False
    key_pattern: str = ""  # an object's keys
    example: str = ""  # a JSON value, shown beside the help

    def matches(self, text: str, *, key: bool = False) -> bool:
        wanted = self.key_pattern if key else self.pattern
        return bool(re.fullmatch(wanted, text)) and len(text) <= MAX_VALUE_LENGTH


class OptionProblem(ValueError):
    """A value that breaks a driver's option declaration; ``path`` names where
    (``options``, ``options.security_group_id``, ``options.vswitch_ids.cn-hangzhou-h``)."""

    def __init__(self, path: str, message: str) -> None:
        super().__init__(f"{path}: {message}")
        self.path, self.message = path, message


def check_options(declared: tuple[AccountOption, ...], value: Any) -> dict[str, Any]:
    """``value`` as a driver's options: a JSON object whose names are among ``declared``,
    each of its declared shape and pattern, every required one present. Returns it
    cleaned (strings stripped, empty ones left out); raises ``OptionProblem`` naming the
    first bad option."""
    if value is None or value == "":
        value = {}
    if not isinstance(value, dict):
        raise OptionProblem("options", _("Give a JSON object of option names and values."))
    by_name = {option.name: option for option in declared}
    cleaned: dict[str, Any] = {}
    for name, given in sorted(value.items()):  # the first bad one, whatever the order
        option = by_name.get(name)
        if option is None:
            known = ", ".join(by_name) or _("none")
            raise OptionProblem(
                f"options.{str(name)[:MAX_NAME_LENGTH]}",
                _("This driver takes no such option (it takes: %(known)s).") % {"known": known},
            )
        checked = _check_one(option, given)
        if checked:
            cleaned[name] = checked
    for option in declared:
        if option.required and option.name not in cleaned:
            raise OptionProblem(
                f"options.{option.name}", _("This option is required for this driver.")
            )
    return cleaned


def _check_one(option: AccountOption, given: Any) -> Any:
    path = f"options.{option.name}"
    if option.kind == OptionKind.TEXT:
        if not isinstance(given, str):
            raise OptionProblem(path, _("Give a string."))
        text = given.strip()
        if text and not option.matches(text):
            raise OptionProblem(path, _bad_value(text, option.pattern))
        return text
    if not isinstance(given, dict):
        raise OptionProblem(path, _("Give a JSON object."))
    if len(given) > MAX_ENTRIES:
        raise OptionProblem(path, _("Give at most %(count)d entries.") % {"count": MAX_ENTRIES})
    cleaned: dict[str, str] = {}
    for key, item in given.items():
        key_text = str(key).strip()
        if not option.matches(key_text, key=True):
            raise OptionProblem(path, _bad_value(key_text[:MAX_NAME_LENGTH], option.key_pattern))
        where = f"{path}.{key_text}"
        if not isinstance(item, str):
            raise OptionProblem(where, _("Give a string."))
        if not option.matches(item.strip()):
            raise OptionProblem(where, _bad_value(item.strip(), option.pattern))
        cleaned[key_text] = item.strip()
    return cleaned


def _bad_value(text: str, pattern: str) -> str:
    return _("“%(value)s” does not match %(pattern)s.") % {
        "value": text[:MAX_VALUE_LENGTH],
        "pattern": pattern,
    }


def frozen(value: Any) -> Any:
    """``value`` (JSON) made immutable and hashable: objects become tuples of (key,
    value) pairs sorted by key, lists tuples."""
    if isinstance(value, dict):
        return tuple(sorted((str(key), frozen(item)) for key, item in value.items()))
    if isinstance(value, list | tuple):
        return tuple(frozen(item) for item in value)
    return value
