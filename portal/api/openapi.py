"""The schema says what the API takes, as precisely as the checks behind it.

A client, or a generator of requests, that keeps to the schema is never refused with a
400: what the schema cannot say (that an id names a row, a rule on the portal's state)
is a 404 or a 409 (``portal.api.errors``). drf-spectacular's own mapping leaves four
gaps, closed here for request bodies:

- a text field takes any character, where every text of a body is held to the text rule
  (no control or bidirectional character: ``PortalViewSet.validated``, ``portal.text``),
  and DRF refuses a required text that is only spaces: a pattern says both;
- a decimal's pattern takes ``""``, ``"-"`` and ``"."`` and a sign below the field's
  least value, and ``\\d`` is any Unicode digit: the pattern is the field's own;
- a slug has no pattern;
- a list of nested objects has no ``maxItems``, one that may not be empty no
  ``minItems``.

And for query strings (a hook, since filters are not serializer fields): a filter's text
is at least one character (an empty filter is a 400, ``portal.api.filters``) and no
string holds NUL (``portal.middleware.RejectNulBytesMiddleware``).
"""

from decimal import Decimal
from typing import Any

from drf_spectacular.openapi import AutoSchema
from rest_framework import serializers

from portal.text import ALLOWED, NOT_BLANK

# Any text the rule takes; "" is the other branch of the oneOf drf-spectacular writes
# for a text that may be blank (which is why this one must not match "").
TEXT = f"^{ALLOWED}+$"
FILLED_TEXT = f"^{ALLOWED}*{NOT_BLANK}{ALLOWED}*$"  # and at least one visible character
QUERY_TEXT = "^[^\\u0000]+$"  # a filter's value: something, and no NUL


def decimal_pattern(field: serializers.DecimalField) -> str:
    """The texts ``field`` takes: digits (ASCII), at most its whole and decimal places,
    at least one digit, a minus sign only where its least value is below 0, and not zero
    only where its least value is above it."""
    whole, places = field.max_whole_digits, field.decimal_places
    digits = f"[0-9]{{1,{whole}}}" if whole else "0?"
    fraction = f"(?:\\.[0-9]{{0,{places}}})?" if places else ""
    number = f"(?:{digits}{fraction}" + (f"|\\.[0-9]{{1,{places}}})" if places else ")")
    least = field.min_value
    sign = "-?" if least is None or Decimal(least) < 0 else ""
    positive = "(?=[^1-9]*[1-9])" if least is not None and Decimal(least) > 0 else ""
    return f"^{positive}{sign}{number}$"


class PortalAutoSchema(AutoSchema):
    def _map_serializer_field(self, field, direction, bypass_extensions=False):
        schema = super()._map_serializer_field(field, direction, bypass_extensions)
        if direction != "request" or field.read_only:
            return schema
        if isinstance(field, serializers.DecimalField) and schema.get("type") == "string":
            schema["pattern"] = decimal_pattern(field)
        elif isinstance(field, serializers.SlugField) and "pattern" not in schema:
            schema["pattern"] = r"^[-\w]+$" if field.allow_unicode else r"^[-a-zA-Z0-9_]+$"
        elif schema.get("type") == "string" and not {"format", "enum", "pattern"} & set(schema):
            # DRF takes "" only for a text that allows it blank (a relation's "" is null).
            blank = isinstance(field, serializers.CharField) and field.allow_blank
            schema["pattern"] = TEXT if blank else FILLED_TEXT
        elif schema.get("type") == "array":
            least = getattr(field, "min_length", None)
            if not getattr(field, "allow_empty", True):
                least = max(least or 0, 1)
            if least:
                schema.setdefault("minItems", least)
            most = getattr(field, "max_length", None)  # a list of nested objects has none
            if most is not None:
                schema.setdefault("maxItems", most)
        return schema


def describe_query_strings(result: dict[str, Any], generator, request, public) -> dict[str, Any]:
    """A postprocessing hook: each query parameter's text is one character or more with
    no NUL; ``ordering`` may be empty (then the list's own order)."""
    for operations in result.get("paths", {}).values():
        for operation in operations.values():
            if not isinstance(operation, dict):
                continue
            for parameter in operation.get("parameters", []):
                schema = parameter.get("schema", {})
                if parameter.get("in") != "query" or schema.get("type") != "string":
                    continue
                if {"format", "enum", "pattern"} & set(schema):
                    continue
                schema["pattern"] = (
                    "^[^\\u0000]*$" if parameter["name"] == "ordering" else QUERY_TEXT
                )
    return result
