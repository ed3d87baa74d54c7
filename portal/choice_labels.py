"""A model field's choice label, read from a table made once per field.

Django's ``get_FOO_display`` builds a dict of all the field's choices on every call and
hashes each lazy label to do so, which translates every one of them: a page of 25
leases with their status and tier pills translated about a thousand labels it never
showed, a fifth of the page's time. Here the table maps values to the lazy labels, and
only the label shown is translated, in the language of the request."""

from functools import cache
from typing import Any

from django.db import models
from django.utils.encoding import force_str


@cache
def _labels(model: type[models.Model], name: str) -> dict[Any, Any]:
    return dict(model._meta.get_field(name).flatchoices)


def choice_label(obj: models.Model, name: str) -> Any:
    """What ``obj.get_<name>_display()`` says: the label of the field's value, or the
    value itself when it is not one of the choices."""
    value = getattr(obj, name)
    return force_str(_labels(type(obj), name).get(value, value), strings_only=True)
