"""A model field's choice label, read from a table made once per field and language.

Django's ``get_FOO_display`` builds a dict of all the field's choices on every call and
hashes each lazy label to do so, which translates every one of them: a page of 25
leases with their status and tier pills translated about a thousand labels it never
showed, a fifth of the page's time. Here a field's labels are translated once per
language a process draws them in (translations do not change while it runs), and a
label is then a lookup, in the language of the request."""

from functools import cache
from typing import Any

from django.db import models
from django.utils.encoding import force_str
from django.utils.translation import get_language


@cache
def _labels(model: type[models.Model], name: str) -> dict[Any, Any]:
    return dict(model._meta.get_field(name).flatchoices)


@cache
def _shown(model: type[models.Model], name: str, language: str | None) -> dict[Any, str]:
    """The field's labels in ``language``, the language active when first asked."""
    return {value: force_str(label) for value, label in _labels(model, name).items()}


def choice_label(obj: models.Model, name: str) -> Any:
    """What ``obj.get_<name>_display()`` says: the label of the field's value, or the
    value itself when it is not one of the choices."""
    value = getattr(obj, name)
    return _shown(type(obj), name, get_language()).get(value, value)
