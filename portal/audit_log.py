"""The audit log in words: each event as a sentence in the reader's language, its object
named and linked, its before and after as labelled values.

Each app says how its own events read in a *vocabulary* module, named in the setting
``PORTAL_AUDIT_VOCABULARIES`` (so the portal imports neither rental nor billing):

- ``VERBS``: verb → ``Verb``: the sentence (placeholders ``%(actor)s``, ``%(object)s``,
  and any key of the event's ``after``, or ``before`` as ``was_<key>``, already in
  words) and a short label for the filter;
- ``KINDS``: object type (``rental.reservation``) → ``Kind``: what such an object is
  called, and how to name and link many of them at once (one query per kind and page);
- ``VALUES``: a key of ``before``/``after`` → ``Value``: its label and how its value
  reads. ``<object type>:<key>`` is for a key that means something else on that type.

Rendered at read time, in the reader's language: the events store codes and numbers.
A page of events costs the same queries whatever its size: the page, its count, and one
per kind of object on it.
"""

import ast
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, field
from datetime import UTC, date, datetime, time, timedelta
from decimal import Decimal, InvalidOperation
from functools import cache, cached_property
from importlib import import_module
from typing import Any

from django import forms
from django.conf import settings
from django.contrib.auth import get_user_model
from django.db.models import QuerySet, TextChoices
from django.urls import reverse
from django.utils import formats
from django.utils.dateparse import parse_datetime
from django.utils.functional import Promise
from django.utils.html import conditional_escape, format_html
from django.utils.safestring import SafeString
from django.utils.text import capfirst
from django.utils.translation import gettext as _
from django.utils.translation import gettext_lazy

from portal.models import AuditEvent, Project
from portal.service_tokens import actor_name
from portal.text import PlainTextForm

Text = str | Promise
Show = Callable[[Any], str]


@dataclass(frozen=True)
class Named:
    """An object as an event names it: its name, and where it is shown (or "")."""

    name: str
    url: str = ""


@dataclass(frozen=True)
class Verb:
    """How one verb reads: its ``sentence``, a ``label`` for the filter, and optionally
    the sentence for an event with no ``before`` (a first setting, nothing to compare)."""

    sentence: Text
    label: Text
    first: Text = ""


@dataclass(frozen=True)
class Kind:
    """What objects of one type are called (``label``) and, given their ids (as the
    events store them), their names and links in one query (``names``)."""

    label: Text
    names: Callable[[list[str]], Mapping[str, Named]] = field(default=lambda ids: {})


# --- How values read -------------------------------------------------------------------


def plain(value: Any) -> str:
    """A value in words: yes/no, "—" for nothing, a time to the minute, a list joined."""
    if value is None or value == "":
        return "—"
    if isinstance(value, bool):
        return str(_("yes") if value else _("no"))
    if isinstance(value, list | tuple):
        return ", ".join(plain(item) for item in value) or "—"
    if isinstance(value, dict):
        return ", ".join(f"{key} {plain(item)}" for key, item in value.items()) or "—"
    if isinstance(value, str):
        parsed = data(value)
        if parsed is not value:
            return plain(parsed)
        moment = _moment(value)
        if moment is not None:
            return moment
    return str(value)


def data(value: Any) -> Any:
    """A list or mapping as stored; events written before lists and mappings were stored
    as such hold Python's text of one, read back here (literals only, never code)."""
    if isinstance(value, str) and value[:1] in "[{" and value[-1:] in "]}":
        try:
            return ast.literal_eval(value)
        except (ValueError, SyntaxError, MemoryError, RecursionError):
            return value
    return value


def _moment(text: str) -> str | None:
    if len(text) < 16 or text[4:5] != "-" or text[10:11] not in ("T", " "):
        return None
    try:
        parsed = parse_datetime(text)
    except ValueError:
        return None
    return when(parsed) if parsed is not None else None


def when(moment: datetime) -> str:
    """A time as the portal writes it everywhere (``DATETIME_FORMAT``: to the minute)."""
    return formats.date_format(moment, "DATETIME_FORMAT")


def choice(choices: type[TextChoices]) -> Show:
    """A stored choice by its label; a value that is no longer a choice as it is."""
    labels = dict(choices.choices)

    def show(value: Any) -> str:
        return str(labels.get(value, plain(value)))

    show.is_label = True  # type: ignore[attr-defined]
    return show


def labelled(labels: Mapping[str, Text]) -> Show:
    """A code by its label in ``labels``; an unknown one as words, not as a code."""

    def show(value: Any) -> str:
        if value in (None, ""):
            return "—"
        text = str(value)
        return str(labels.get(text, text.replace("_", " ").replace(":", " ")))

    show.is_label = True  # type: ignore[attr-defined]
    return show


def counted(phrase: Any) -> Show:
    """A count in words, singular or plural by the reader's language: ``phrase`` is an
    ``ngettext_lazy(singular, plural, "n")``; ``1 GPU``, ``4 GPUs``. A value that is not
    a whole number reads as it is."""

    def show(value: Any) -> str:
        if value is None or value == "":
            return "—"
        try:
            n = int(str(value))
        except ValueError:
            return plain(value)
        return str(phrase % {"n": n})

    return show


def amount(value: Any) -> str:
    """A decimal as written, without trailing zeros beyond the cents: ``2.50``, ``0.412``."""
    if value is None or value == "":
        return "—"
    try:
        number = Decimal(str(value))
    except InvalidOperation:
        return str(value)
    text = f"{number:,f}"
    if "." in text:
        whole, fraction = text.split(".")
        fraction = fraction.rstrip("0").ljust(2, "0")
        text = f"{whole}.{fraction}"
    return text


@dataclass(frozen=True)
class Value:
    label: Text
    show: Show = plain


# --- The vocabularies ------------------------------------------------------------------


@dataclass(frozen=True)
class Vocabulary:
    verbs: Mapping[str, Verb]
    kinds: Mapping[str, Kind]
    values: Mapping[str, Value]

    @cached_property
    def order(self) -> dict[str, int]:
        return {key: place for place, key in enumerate(self.values)}


@cache
def vocabulary() -> Vocabulary:
    """Every app's vocabulary merged; a verb or kind named twice is a mistake."""
    verbs: dict[str, Verb] = {}
    kinds: dict[str, Kind] = {}
    values: dict[str, Value] = {}
    for path in settings.PORTAL_AUDIT_VOCABULARIES:
        module = import_module(path)
        for name, mine, theirs in (
            ("VERBS", getattr(module, "VERBS", {}), verbs),
            ("KINDS", getattr(module, "KINDS", {}), kinds),
            ("VALUES", getattr(module, "VALUES", {}), values),
        ):
            twice = set(mine) & set(theirs)
            if twice:
                raise ValueError(f"{path}.{name} names {sorted(twice)} again")
            theirs.update(mine)
    return Vocabulary(verbs=verbs, kinds=kinds, values=values)


def verb_choices() -> list[tuple[str, str]]:
    """(verb, label) for the filter, by label in the reader's language."""
    known = vocabulary().verbs
    return sorted(((verb, str(v.label)) for verb, v in known.items()), key=lambda c: c[1])


def kind_choices() -> list[tuple[str, str]]:
    known = vocabulary().kinds
    return sorted(
        ((name, capfirst(str(kind.label))) for name, kind in known.items()),
        key=lambda c: c[1],
    )


# --- Events in words -------------------------------------------------------------------


@dataclass(frozen=True)
class Change:
    label: str
    before: str | None  # None: the key was not in before
    after: str | None


@dataclass(frozen=True)
class Line:
    """One event as the audit page shows it."""

    event: AuditEvent
    sentence: SafeString
    object: SafeString
    changes: list[Change]
    at: str
    source: str


# Where a change came from, as a reader says it.
SOURCES = {
    AuditEvent.Source.WEB: gettext_lazy("the web pages"),
    AuditEvent.Source.API: gettext_lazy("the API"),
    AuditEvent.Source.WORKER: gettext_lazy("the portal itself"),
    AuditEvent.Source.ADMIN: gettext_lazy("the admin pages"),
    AuditEvent.Source.COMMAND: gettext_lazy("a command"),
}


def _value(object_type: str, key: str) -> Value:
    known = vocabulary().values
    found = known.get(f"{object_type}:{key}") or known.get(key)
    return found or Value(key.replace("_", " ").capitalize())


def _template(event: AuditEvent) -> str:
    verb = vocabulary().verbs.get(event.verb)
    if verb is None:
        return _("%(actor)s changed %(object)s")
    if verb.first and not event.before:
        return str(verb.first)
    return str(verb.sentence)


def _object(event: AuditEvent, named: Mapping[str, Named]) -> SafeString:
    kind = vocabulary().kinds.get(event.object_type)
    found = named.get(event.object_id)
    if found is None:
        label = kind.label if kind else _("object")
        found = Named(_("%(kind)s #%(id)s") % {"kind": label, "id": event.object_id})
    name = found.name
    if _template(event).startswith("%(object)s"):
        name = name[:1].upper() + name[1:]  # it starts the sentence
    if found.url:
        return format_html('<a href="{}">{}</a>', found.url, name)
    return format_html("{}", name)


def _in_sentence(value: Value, raw: Any) -> str:
    """A value as a sentence says it: a label ("Degraded", "Lease ended") in lower case
    inside the sentence, an acronym ("OK") or a name (anything typed) as it is."""
    text = value.show(raw)
    if getattr(value.show, "is_label", False) and text[:1].isupper() and text[1:2].islower():
        return text[:1].lower() + text[1:]
    return text


class _Words(dict):
    """The sentence's placeholders; a value an event lacks reads as "—"."""

    def __missing__(self, key: str) -> str:
        return "—"


def sentence(event: AuditEvent, obj: SafeString) -> SafeString:
    """The event as one sentence in the active language, HTML-safe (values escaped)."""
    actor = actor_name(event.actor) if event.actor else _("The portal")
    words = _Words()
    for key, value in (event.before or {}).items():
        words[f"was_{key}"] = _in_sentence(_value(event.object_type, key), value)
    for key, value in (event.after or {}).items():
        words[key] = _in_sentence(_value(event.object_type, key), value)
    template = _template(event)
    escaped = _Words({key: format_html("{}", value) for key, value in words.items()})
    escaped["actor"] = format_html("<strong>{}</strong>", actor)
    escaped["object"] = obj
    if event.project is not None:
        # The project pages are rental's; named by URL, so the portal imports no app.
        escaped["in_project"] = format_html(
            '<a href="{}">{}</a>',
            reverse("rental:project", args=[event.project.slug]),
            event.project.name,
        )
    # Every value is escaped above, and so is the template, which is the catalog's own.
    return SafeString(conditional_escape(template) % escaped)


def _order(object_type: str, key: str) -> tuple[int, str]:
    """Where a value comes among an event's changes: in the vocabularies' order (the
    database keeps no order of a JSON object's keys), then unknown keys by name."""
    order = vocabulary().order
    return (order.get(f"{object_type}:{key}", order.get(key, len(order))), key)


def changes(event: AuditEvent) -> list[Change]:
    before, after = event.before or {}, event.after or {}
    keys = sorted({*after, *before}, key=lambda key: _order(event.object_type, key))
    result = []
    for key in keys:
        value = _value(event.object_type, key)
        result.append(
            Change(
                label=str(value.label),
                before=value.show(before[key]) if key in before else None,
                after=value.show(after[key]) if key in after else None,
            )
        )
    return result


def in_words(events: Iterable[AuditEvent]) -> list[Line]:
    """The events in words, naming their objects with one query per kind of object."""
    events = list(events)
    ids: dict[str, set[str]] = {}
    for event in events:
        ids.setdefault(event.object_type, set()).add(event.object_id)
    named: dict[str, Mapping[str, Named]] = {}
    for object_type, wanted in ids.items():
        kind = vocabulary().kinds.get(object_type)
        named[object_type] = kind.names(sorted(wanted)) if kind else {}
    result = []
    for event in events:
        obj = _object(event, named[event.object_type])
        result.append(
            Line(
                event=event,
                sentence=sentence(event, obj),
                object=obj,
                changes=changes(event),
                at=when(event.at),
                source=str(SOURCES.get(event.source, event.source)),
            )
        )
    return result


def numeric_ids(ids: Iterable[str]) -> list[int]:
    """The ids that are whole numbers (object ids are stored as text)."""
    return [int(text) for text in ids if text.isascii() and text.isdigit() and len(text) < 19]


# --- Filters ---------------------------------------------------------------------------

SYSTEM = "-"  # the actor filter's value for events no person caused


class AuditFilterForm(PlainTextForm):
    """The audit page's filters, each optional and combinable; the projects' choices are
    read in one query whatever the page holds. People are named by username (a company
    has thousands: a list of them all would cost the page more than its events)."""

    actor = forms.CharField(
        label=gettext_lazy("Done by"),
        required=False,
        max_length=150,
        strip=True,
        help_text=gettext_lazy("A username, or “-” for the portal itself."),
    )
    project = forms.ChoiceField(label=gettext_lazy("Project"), required=False)
    verb = forms.ChoiceField(label=gettext_lazy("What happened"), required=False)
    object_type = forms.ChoiceField(label=gettext_lazy("To what"), required=False)
    object_id = forms.CharField(
        label=gettext_lazy("Its number"), required=False, max_length=64, strip=True
    )
    since = forms.DateField(
        label=gettext_lazy("From"), required=False, widget=forms.DateInput(attrs={"type": "date"})
    )
    until = forms.DateField(
        label=gettext_lazy("To"),
        required=False,
        widget=forms.DateInput(attrs={"type": "date"}),
    )

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self.fields["project"].choices = [
            ("", _("Any project")),
            *Project.objects.order_by("name").values_list("slug", "name"),
        ]
        self.fields["verb"].choices = [("", _("Anything")), *verb_choices()]
        self.fields["object_type"].choices = [("", _("Anything")), *kind_choices()]

    def clean_actor(self) -> str:
        name = self.cleaned_data.get("actor") or ""
        if name and name != SYSTEM and not get_user_model().objects.filter(username=name).exists():
            raise forms.ValidationError(
                _("No one is called “%(name)s”.") % {"name": name}, code="unknown"
            )
        return name

    def clean(self) -> dict[str, Any]:
        cleaned = super().clean()
        since, until = cleaned.get("since"), cleaned.get("until")
        if since and until and until < since:
            self.add_error("until", _("The last day comes on or after the first."))
        return cleaned

    def filter(self, events: QuerySet[AuditEvent]) -> QuerySet[AuditEvent]:
        """``events`` narrowed by every filter that is set and valid (an invalid one is
        shown with its error and left out)."""
        wanted = getattr(self, "cleaned_data", {})
        actor = wanted.get("actor")
        if actor == SYSTEM:
            events = events.filter(actor__isnull=True)
        elif actor:
            events = events.filter(actor__username=actor)
        if wanted.get("project"):
            events = events.filter(project__slug=wanted["project"])
        if wanted.get("verb"):
            events = events.filter(verb=wanted["verb"])
        if wanted.get("object_type"):
            events = events.filter(object_type=wanted["object_type"])
        if wanted.get("object_id"):
            events = events.filter(object_id=wanted["object_id"])
        if wanted.get("since"):
            events = events.filter(at__gte=_midnight(wanted["since"]))
        if wanted.get("until") and wanted["until"] < date.max:
            events = events.filter(at__lt=_midnight(wanted["until"] + timedelta(days=1)))
        return events

    @property
    def is_filtering(self) -> bool:
        return any(getattr(self, "cleaned_data", {}).get(name) for name in self.fields)


def _midnight(day: date) -> datetime:
    return datetime.combine(day, time(0), tzinfo=UTC)
