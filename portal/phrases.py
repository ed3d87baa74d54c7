"""Words kept as what is needed to say them, and said in the reader's language.

A text the portal keeps for later (a notification, the reason a lease waits) is stored
as a ``Phrase``: its message id, marked with ``gettext_noop`` where it is written so that
``makemessages`` puts it in the catalog, and its parameters. It is rendered when someone
reads it, in the language active then: the page's for a page, the recipient's for a mail
(``render(text, language)``). So a notification sent by the worker in English reads in
Chinese for a Chinese reader, and the other way round.

Parameters are plain data, so a phrase survives a trip through JSON: whole numbers; text
(a person's words, a name, a code: never translated); aware datetimes and dates,
formatted when rendered; and other phrases, for parts that are themselves translated (a
tier, a reason). A decimal is kept as its exact text. ``Joined`` puts several texts one
after another with a separator that is itself a text (" or ", a new line).

A phrase whose words depend on a number ("1 try", "8 tries") keeps both forms, marked
with ``plural_noop`` where it is written, and is counted by its parameter ``n``: it is
said with ``ngettext``, so each language picks its own form (Chinese has one).
``duration(seconds)`` says how long something took that way.

What a ``PhraseField`` holds is a ``Text``: a phrase, a joined text, or a plain string
(a row written before phrases, a cloud's own words, a person's comment), which reads as
it was written. A translation that lost a placeholder never breaks a page: the words are
then said as written in the code.
"""

from __future__ import annotations

import json
from collections.abc import Iterable
from dataclasses import dataclass
from datetime import UTC, date, datetime
from decimal import Decimal
from typing import Any, Union

from django.db import models
from django.utils import translation
from django.utils.functional import Promise
from django.utils.translation import gettext, gettext_noop, ngettext
from django.utils.translation import gettext_lazy as _

# What may be kept and said later: a phrase, several joined, or words as written.
Text = Union["Phrase", "Joined", str]
# What a phrase's parameter may be.
Param = Union["Phrase", "Joined", str, int, datetime, date]


def _checked(value: object) -> Param:
    """A parameter as it is kept: exact, JSON-friendly, and never an already translated
    string (it would stay in the language it was translated into)."""
    if isinstance(value, bool | float):
        raise TypeError(f"a phrase parameter cannot be a {type(value).__name__}: {value!r}")
    if isinstance(value, Promise):
        raise TypeError("a phrase parameter cannot be a lazy translation; pass a Phrase")
    if isinstance(value, Decimal):
        return str(value)
    if isinstance(value, datetime):
        if value.tzinfo is None:
            raise TypeError("a phrase's datetime must be aware")
        return value.astimezone(UTC)
    if isinstance(value, Phrase | Joined | str | int | date):
        return value
    raise TypeError(f"a phrase parameter cannot be a {type(value).__name__}: {value!r}")


def plural_noop(singular: str, plural: str) -> tuple[str, str]:
    """Marks a phrase's two forms for the catalog, as one entry with a plural (our
    ``makemessages`` knows this name); returns them as they are, for ``Phrase``."""
    return singular, plural


@dataclass(frozen=True, init=False)
class Phrase:
    """A message id and its parameters, translated only when it is said.

    ``Phrase(gettext_noop("Ready: %(lease)s"), lease=...)``: the msgid must be marked where
    it is written (``gettext_noop``), so the catalog has it.
    ``Phrase(plural_noop("%(n)s try", "%(n)s tries"), n=8)``: both forms, counted by ``n``.
    """

    msgid: str
    params: tuple[tuple[str, Param], ...]
    plural: str = ""

    def __init__(self, msgid: str | tuple[str, str], /, **params: object) -> None:
        singular, plural = msgid if isinstance(msgid, tuple) else (msgid, "")
        if plural and (not isinstance(params.get("n"), int) or isinstance(params["n"], bool)):
            raise TypeError("a phrase with a plural is counted by a whole number n")
        object.__setattr__(self, "msgid", str(singular))
        object.__setattr__(self, "plural", str(plural))
        object.__setattr__(
            self, "params", tuple(sorted((name, _checked(v)) for name, v in params.items()))
        )

    @property
    def count(self) -> int:
        """The number a phrase with a plural is counted by (0 for any other)."""
        n = dict(self.params).get("n")
        return n if isinstance(n, int) else 0

    def __str__(self) -> str:
        return render(self)


@dataclass(frozen=True, init=False)
class Joined:
    """Several texts said one after another, with a separator (itself a text)."""

    parts: tuple[Text, ...]
    separator: Text

    def __init__(self, parts: Iterable[Text], separator: Text = " ") -> None:
        object.__setattr__(self, "parts", tuple(_part(part) for part in parts))
        object.__setattr__(self, "separator", _part(separator))

    def __str__(self) -> str:
        return render(self)


def _part(value: object) -> Text:
    checked = _checked(value)
    if not isinstance(checked, Phrase | Joined | str):
        raise TypeError(f"a joined part must be a text, not {type(value).__name__}")
    return checked


def bounded(text: Text, length: int) -> Text:
    """Plain words cut to ``length`` characters; a phrase is bounded by its message and
    its parameters, and is kept whole."""
    return text[:length] if isinstance(text, str) else text


def sentences(*parts: Text) -> Text:
    """Sentences one after another, empty ones left out: a space between them in English,
    none in Chinese (the catalog says how)."""
    kept = [part for part in parts if part]
    if not kept:
        return ""
    said = kept[0]
    for following in kept[1:]:
        # Translators: two sentences one after the other.
        said = Phrase(gettext_noop("%(sentence)s %(next)s"), sentence=said, next=following)
    return said


def duration(seconds: float) -> Phrase:
    """How long something took, in words: whole seconds under a minute ("14 seconds"),
    else minutes (to the nearest, "9 minutes"), from two hours hours and minutes."""
    whole = max(0, round(seconds))
    if whole < 60:
        return Phrase(plural_noop("%(n)s second", "%(n)s seconds"), n=whole)
    minutes = round(whole / 60)
    if minutes < 120:
        return Phrase(plural_noop("%(n)s minute", "%(n)s minutes"), n=minutes)
    hours, minutes = divmod(minutes, 60)
    said_hours = Phrase(plural_noop("%(n)s hour", "%(n)s hours"), n=hours)
    if not minutes:
        return said_hours
    # Translators: a duration of hours and minutes, "2 hours 5 minutes".
    return Phrase(
        gettext_noop("%(hours)s %(minutes)s"),
        hours=said_hours,
        minutes=Phrase(plural_noop("%(n)s minute", "%(n)s minutes"), n=minutes),
    )


def render(text: Text, language: str | None = None) -> str:
    """``text`` said in ``language`` (a code of ``LANGUAGES``), or in the active one."""
    if language is None:
        return _said(text)
    with translation.override(language):
        return _said(text)


def _said(value: Param) -> str:
    if isinstance(value, Phrase):
        values = {name: _said(param) for name, param in value.params}
        if value.plural:
            translated = ngettext(value.msgid, value.plural, value.count)
            written = value.msgid if value.count == 1 else value.plural
        else:
            translated, written = gettext(value.msgid), value.msgid
        try:
            return translated % values
        except (KeyError, ValueError, TypeError):
            try:  # a translation that lost or renamed a placeholder: the words as written
                return written % values
            except (KeyError, ValueError, TypeError):
                return written
    if isinstance(value, Joined):
        return _said(value.separator).join(_said(part) for part in value.parts)
    if isinstance(value, datetime):
        # The portal's one way to write a time (UTC: the words say so); seconds only when
        # there are some, so nothing is hidden and whole minutes read short.
        return f"{value:%Y-%m-%d %H:%M:%S}" if value.second else f"{value:%Y-%m-%d %H:%M}"
    if isinstance(value, date):
        return f"{value:%Y-%m-%d}"
    return str(value)


def dump(value: Param) -> Any:
    """``value`` as JSON data: ``load(dump(v)) == v``."""
    if isinstance(value, Phrase):
        data: dict[str, Any] = {"msgid": value.msgid}
        if value.plural:
            data["plural"] = value.plural
        if value.params:
            data["params"] = {name: dump(param) for name, param in value.params}
        return data
    if isinstance(value, Joined):
        return {"join": [dump(part) for part in value.parts], "sep": dump(value.separator)}
    if isinstance(value, datetime):
        return {"datetime": value.isoformat()}
    if isinstance(value, date):
        return {"date": value.isoformat()}
    return value


def load(data: Any) -> Any:
    """What ``dump`` wrote, back; anything else (a row edited by hand) as its text, so a
    page that shows it never fails."""
    try:
        return _loaded(data)
    except (KeyError, TypeError, ValueError, AttributeError):
        return data if isinstance(data, str) else json.dumps(data, ensure_ascii=False)


def _loaded(data: Any) -> Any:
    if isinstance(data, str | int) and not isinstance(data, bool):
        return data
    if isinstance(data, dict):
        if "msgid" in data:
            params = {name: _loaded(value) for name, value in data.get("params", {}).items()}
            if "plural" in data:
                return Phrase((data["msgid"], data["plural"]), **params)
            return Phrase(data["msgid"], **params)
        if "join" in data:
            return Joined([_loaded(part) for part in data["join"]], _loaded(data.get("sep", " ")))
        if "datetime" in data:
            return datetime.fromisoformat(data["datetime"])
        if "date" in data:
            return date.fromisoformat(data["date"])
    raise ValueError(f"not a stored text: {data!r}")


def load_text(data: Any) -> Text:
    """A stored text back: a phrase, a joined text or a string (never None)."""
    if data is None:
        return ""
    loaded = load(data)
    return loaded if isinstance(loaded, Phrase | Joined | str) else str(loaded)


class PhraseField(models.TextField):
    """A ``Text`` in a JSON column (jsonb on PostgreSQL): in Python a ``Phrase``, a
    ``Joined`` or a plain string (empty by default), each of which renders itself with
    ``str()`` in the active language, so a template, the admin or an API serializer shows
    it in the reader's language as it is. A text field everywhere but in its column: its
    value is words, not JSON data."""

    description = _("A text said in the reader's language")

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        kwargs.setdefault("default", str)
        kwargs.setdefault("blank", True)
        super().__init__(*args, **kwargs)

    def get_internal_type(self) -> str:
        return "JSONField"  # its column: jsonb on PostgreSQL, checked JSON text on SQLite

    def from_db_value(self, value: Any, expression: Any, connection: Any) -> Text:
        if value is None:
            return ""
        try:
            data = json.loads(value) if isinstance(value, str | bytes) else value
        except json.JSONDecodeError:
            return str(value)
        return load_text(data)

    def to_python(self, value: Any) -> Text:
        if isinstance(value, Phrase | Joined | str):
            return value
        return load_text(value)

    def get_prep_value(self, value: Any) -> Any:
        value = super().get_prep_value(value)
        return dump(value if isinstance(value, Phrase | Joined) else load_text(value))

    def get_db_prep_value(self, value: Any, connection: Any, prepared: bool = False) -> Any:
        if not prepared:
            value = self.get_prep_value(value)
        return connection.ops.adapt_json_value(value, None)

    def value_to_string(self, obj: models.Model) -> Any:
        return dump(self.value_from_object(obj))
