"""Paths reversed once per URL name: an object's page (``path_of``) rather than once per
object, and a page without arguments (``named_path``) rather than once per link.

Django's ``reverse`` looks through the URL patterns on every call, about 17 µs: a list of
50 leases that links each lease and its project spent 1.7 ms a page on it. Here the
pattern is reversed once with a stand-in value and the object's value is put in its
place. Only for URLs whose one argument is a primary key or a slug (``int`` and
``slug`` converters): neither needs quoting, and a value from the database always fits."""

from functools import cache

from django.urls import get_script_prefix, reverse

# Fits the int and slug converters, and no URL of ours holds it.
_STAND_IN = "4242424242424242"


@cache
def _around(name: str, argument: str, prefix: str) -> tuple[str, str]:
    # prefix: the script prefix in force (part of the cache key only).
    head, _stand_in, tail = reverse(name, kwargs={argument: _STAND_IN}).partition(_STAND_IN)
    return head, tail


def path_of(name: str, argument: str, value: int | str) -> str:
    """``reverse(name, kwargs={argument: value})``, for a pk or slug ``value``."""
    head, tail = _around(name, argument, get_script_prefix())
    return f"{head}{value}{tail}"


@cache
def _named(name: str, prefix: str) -> str:
    # prefix: the script prefix in force (part of the cache key only).
    return reverse(name)


def named_path(name: str) -> str:
    """``reverse(name)`` for a URL without arguments: the navigation's links, drawn on
    every page (16 of them cost 0.3 ms a page through ``reverse``)."""
    return _named(name, get_script_prefix())
