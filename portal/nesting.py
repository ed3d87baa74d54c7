"""How deep a document may nest. No input the portal takes nests more than a few levels
(a budget's thresholds: a list of mappings), while Python reads and walks nested data
recursively: 10,000 levels of ``[`` would end in a RecursionError, a server error. So a
JSON body or a YAML document deeper than ``MAX_DEPTH`` is refused as bad input, naming
the rule, before anything walks it."""

from typing import Any

from django import forms
from django.core.exceptions import ValidationError
from django.forms.fields import InvalidJSONInput
from django.utils.translation import gettext as _

MAX_DEPTH = 32


def too_deep(data: Any, *, limit: int = MAX_DEPTH) -> bool:
    """Whether lists and mappings in ``data`` nest more than ``limit`` levels (a scalar
    is 0 levels, ``[1]`` one, ``{"a": [1]}`` two). Walked without recursion, and each
    list or mapping once per depth (YAML's aliases share one many times)."""
    stack: list[tuple[Any, int]] = [(data, 1)]
    deepest: dict[int, int] = {}
    while stack:
        value, depth = stack.pop()
        if isinstance(value, dict):
            children: Any = value.values()
        elif isinstance(value, list | tuple):
            children = value
        else:
            continue
        if depth > limit:
            return True
        if deepest.get(id(value), 0) >= depth:
            continue
        deepest[id(value)] = depth
        stack.extend((child, depth + 1) for child in children)
    return False


def too_deep_message() -> str:
    return _("It nests more than %(most)s levels deep.") % {"most": MAX_DEPTH}


class ShallowJSONField(forms.JSONField):
    """Django's JSON form field (the admin's), refusing a value nested past ``MAX_DEPTH``
    on its field where Python's reader would fail with a server error."""

    def to_python(self, value: Any) -> Any:
        try:
            converted = super().to_python(value)
        except RecursionError:
            raise ValidationError(too_deep_message(), code="too_deep") from None
        if too_deep(converted):
            raise ValidationError(too_deep_message(), code="too_deep")
        return converted

    def bound_data(self, data: Any, initial: Any) -> Any:
        try:
            return super().bound_data(data, initial)
        except RecursionError:  # shown again as typed, beside its error
            return InvalidJSONInput(data)
