"""Formatting for templates: money, durations, status pills and the main navigation. Decimal
only, never float."""

import html
from datetime import datetime, timedelta
from decimal import ROUND_HALF_UP, Decimal, InvalidOperation
from functools import lru_cache
from typing import Any

from django import template
from django.conf import settings
from django.template.defaultfilters import date as date_filter
from django.template.loader import render_to_string
from django.utils.dates import MONTHS_3
from django.utils.safestring import SafeString, mark_safe
from django.utils.translation import get_language
from django.utils.translation import gettext as _

from portal.choice_labels import choice_label
from portal.paths import named_path

register = template.Library()

CENT = Decimal("0.01")
RATE_PLACES = Decimal("0.000001")
EMPTY = "—"


def _decimal(value: Any) -> Decimal | None:
    if value is None or value == "":
        return None
    if isinstance(value, float):
        value = repr(value)  # never let binary floating point leak into money
    try:
        number = Decimal(str(value)) if not isinstance(value, Decimal) else value
    except (InvalidOperation, ValueError, TypeError):
        return None
    return number if number.is_finite() else None


def _with_currency(number: Decimal, places: Decimal) -> str:
    rounded = number.quantize(places, rounding=ROUND_HALF_UP)
    digits = f"{abs(rounded):,f}"
    if places == RATE_PLACES:
        # Rates keep up to six places but drop trailing zeros beyond the cents.
        whole, _dot, fraction = digits.partition(".")
        fraction = fraction.rstrip("0").ljust(2, "0")
        digits = f"{whole}.{fraction}"
    sign = "-" if rounded < 0 else ""
    currency = settings.PORTAL_CURRENCY
    if currency == "USD":
        return f"{sign}${digits}"
    return f"{sign}{currency} {digits}"


@register.filter
def money(value: Any) -> str:
    """An amount in the site's currency, to the cent: ``$1,234.56`` or ``CNY 12.00``."""
    number = _decimal(value)
    if number is None:
        return EMPTY
    return _with_currency(number, CENT)


@register.filter
def rate(value: Any) -> str:
    """A price per hour: at least cents, up to six places (``$2.50``, ``$0.412345``)."""
    number = _decimal(value)
    if number is None:
        return EMPTY
    return _with_currency(number, RATE_PLACES)


@register.filter
def duration(value: Any) -> str:
    """A length of time, from a timedelta or a number of hours: ``2 d 4 h``, ``1 h 30 min``."""
    if value is None or value == "":
        return EMPTY
    if isinstance(value, timedelta):
        seconds = int(value.total_seconds())
    else:
        hours = _decimal(value)
        if hours is None:
            return EMPTY
        seconds = int((hours * 3600).to_integral_value(rounding=ROUND_HALF_UP))
    if seconds < 0:
        return EMPTY
    days, rest = divmod(seconds, 86400)
    hours_part, rest = divmod(rest, 3600)
    minutes, secs = divmod(rest, 60)
    if days:
        parts = [_("%(n)s d") % {"n": days}]
        if hours_part:
            parts.append(_("%(n)s h") % {"n": hours_part})
    elif hours_part:
        parts = [_("%(n)s h") % {"n": hours_part}]
        if minutes:
            parts.append(_("%(n)s min") % {"n": minutes})
    elif minutes:
        parts = [_("%(n)s min") % {"n": minutes}]
    else:
        parts = [_("%(n)s s") % {"n": secs}]
    return " ".join(parts)


@register.filter
def hours(value: Any) -> str:
    """A number of hours with two decimals at most: ``1.5``, ``24``, ``0.25``."""
    number = _decimal(value)
    if number is None:
        return EMPTY
    rounded = number.quantize(CENT, rounding=ROUND_HALF_UP)
    text = f"{rounded:f}"
    return text.rstrip("0").rstrip(".") if "." in text else text


@register.filter(expects_localtime=True)
def moment(value: Any, fmt: str = "Y-m-d H:i") -> str:
    """The ``date`` filter for the formats a list draws on every row, ``Y-m-d H:i`` and
    ``M j, H:i``, written out directly: Django's reads the format letter by letter, about
    25 µs a date, the most expensive cell of a lease row. Any other format is
    ``date``'s, and so is the text: the same, in the request's time zone and language."""
    if not isinstance(value, datetime):
        return date_filter(value, fmt)
    clock = f"{value.hour:02d}:{value.minute:02d}"
    if fmt == "Y-m-d H:i":
        return f"{value.year:04d}-{value.month:02d}-{value.day:02d} {clock}"
    if fmt == "M j, H:i":
        return f"{str(MONTHS_3[value.month]).title()} {value.day}, {clock}"
    return date_filter(value, fmt)


def escaped(value: Any) -> str:
    """``conditional_escape`` for a cell drawn on every row: text marked safe as it is,
    anything else as text, escaped. The same answer without its wrappers, which cost
    more than the escaping (about 5 µs a value on the bench machine)."""
    if hasattr(value, "__html__"):
        return value.__html__()
    return html.escape(str(value))


@register.simple_tag
def pill(value: str, label: str, kind: str = "status", element_id: str = "") -> SafeString | str:
    """A coloured label; the colour comes from ``pill-<kind>-<value>`` in portal.css."""
    if not value:
        return EMPTY
    shown = f'class="pill pill-{escaped(kind)}-{escaped(value)}"'
    if element_id:
        shown += f' id="{escaped(element_id)}"'
    return mark_safe(f"<span {shown}>{escaped(label)}</span>")  # each part escaped above


@register.simple_tag
def status_pill(obj: Any, element_id: str = "") -> SafeString | str:
    """The status of a lease (``status``) or the state of an instance (``state``)."""
    if hasattr(obj, "get_status_display"):
        return pill(obj.status, choice_label(obj, "status"), "status", element_id)
    return pill(obj.state, choice_label(obj, "state"), "state", element_id)


@register.simple_tag
def tier_pill(obj: Any) -> SafeString | str:
    return pill(obj.tier, choice_label(obj, "tier"), "tier") if obj.tier else EMPTY


@register.simple_tag(name="path")
def path_tag(name: str) -> str:
    """``{% path 'dashboard' %}``: ``{% url 'dashboard' %}`` for a URL without arguments,
    reversed once per process (``portal.paths.named_path``)."""
    return named_path(name)


@register.filter
def label(obj: Any, name: str) -> Any:
    """``{{ lease|label:"priority" }}``: what ``lease.get_priority_display`` says, without
    translating every other choice on the way (``portal.choice_labels``)."""
    return choice_label(obj, name)


@register.simple_tag(takes_context=True)
def query_with(context: template.Context, **changes: Any) -> str:
    """The current query string with some parameters replaced (empty ones dropped)."""
    params = context["request"].GET.copy()
    for key, value in changes.items():
        if value in (None, ""):
            params.pop(key, None)
        else:
            params[key] = value
    return params.urlencode()


@register.filter
def pairs(value: Any) -> list[tuple[Any, Any]]:
    """A mapping's (key, value) pairs, for ``{% for key, value in mapping|pairs %}``.
    ``mapping.items`` in a template looks up a key named "items" first, so a mapping that
    has one (a statement line's references do: how many volumes) breaks the loop."""
    if not value:
        return []
    return list(value.items())


# What the main navigation is drawn from, besides the language and the page.
NAV_ROLES = ("is_member", "is_manager", "is_admin", "is_finance")


@register.simple_tag(takes_context=True)
def main_nav(context: template.Context) -> SafeString:
    """The main navigation (``portal/_main_nav.html``) for the request's language, page and
    roles. It is most of the layout drawn on every page (two dozen translated words, links
    and tests of the page), and nothing else changes it, so each process draws it once
    for each language, page and set of roles (a few hundred at most); while templates are
    being edited (``DEBUG``), every time."""
    match = getattr(context.get("request"), "resolver_match", None)
    nav = context.get("nav") or {}
    key = (get_language(), match.view_name if match else "", *(bool(nav.get(r)) for r in NAV_ROLES))
    return _draw_nav(*key) if settings.DEBUG else _kept_nav(*key)


def _draw_nav(language: str | None, view: str, *roles: bool) -> SafeString:
    """Drawn in the active language, which ``language`` names."""
    context = {"view": view, "nav": dict(zip(NAV_ROLES, roles, strict=True))}
    return mark_safe(render_to_string("portal/_main_nav.html", context))  # a template's output


_kept_nav = lru_cache(maxsize=1024)(_draw_nav)
