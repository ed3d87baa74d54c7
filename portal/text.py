"""What a person may type into a free-text field (a purpose, a reason, a comment, a name).

One rule for every form, endpoint and service: a text is at most its field's length and
holds no control character but tab and line breaks, and none of Unicode's bidirectional
embedding, override or isolate controls (U+202A–U+202E, U+2066–U+2069), which make a text
display as something other than what it says ("Trojan Source"). A text that breaks it is
refused on its field, in the person's language; it is never shortened or cleaned
silently. PostgreSQL cannot store NUL at all, so a NUL must stop here, not in the database.
"""

from django import forms
from django.core.exceptions import ValidationError
from django.core.validators import ProhibitNullCharactersValidator
from django.utils.translation import gettext as _
from django.utils.translation import ngettext

from portal.errors import InvalidInput

# The lengths of the free texts that are not a model's CharField (which has its own).
COMMENT_LENGTH = 2000  # a decision's or a dispute's comment, an answer
REASON_LENGTH = 1000  # why a project asks for a quota change

BIDI_CONTROLS = frozenset("\u202a\u202b\u202c\u202d\u202e\u2066\u2067\u2068\u2069")
ALLOWED_CONTROLS = frozenset("\t\n\r")
# Every character the rule refuses.
REFUSED = frozenset(map(chr, [*range(32), *range(127, 160)])) - ALLOWED_CONTROLS | BIDI_CONTROLS


def _class_body(chars: frozenset[str]) -> str:
    """``chars`` as a regular expression's character class body, in ranges:
    ``\\u0000-\\u0008\\u000b…`` (the same in Python's and in JavaScript's syntax)."""
    runs: list[tuple[int, int]] = []
    for code in sorted(map(ord, chars)):
        if runs and runs[-1][1] == code - 1:
            runs[-1] = (runs[-1][0], code)
        else:
            runs.append((code, code))
    return "".join(
        f"\\u{first:04x}" if first == last else f"\\u{first:04x}-\\u{last:04x}"
        for first, last in runs
    )


# One character the rule takes, one that is also not a space, and a space it takes: for
# the API's schema (portal.api.openapi) and the patterns of texts with a shape of their own.
ALLOWED = f"[^{_class_body(REFUSED)}]"
NOT_BLANK = f"[^\\s{_class_body(REFUSED)}]"
SPACE = f"[^\\S{_class_body(REFUSED)}]"  # a space the rule takes (not U+001C …)


def text_problem(value: str, *, max_length: int | None = None) -> str:
    """Why ``value`` may not be stored as typed, or "" when it may."""
    if "\x00" in value:
        return _("It holds a NUL character, which is not allowed.")
    for char in value:
        if char in BIDI_CONTROLS:
            return _(
                "It holds an invisible character that reverses the direction of the text "
                "(U+%(code)04X), which is not allowed."
            ) % {"code": ord(char)}
        if (ord(char) < 32 or 127 <= ord(char) < 160) and char not in ALLOWED_CONTROLS:
            return _("It holds an invisible control character (U+%(code)04X).") % {
                "code": ord(char)
            }
    if max_length is not None and len(value) > max_length:
        return ngettext(
            "At most %(max)s character, please (this one has %(length)s).",
            "At most %(max)s characters, please (this one has %(length)s).",
            max_length,
        ) % {"max": max_length, "length": len(value)}
    return ""


def plain_text(value: object, *, field: str, max_length: int, label: object = "") -> str:
    """``value`` as a stripped text, or InvalidInput naming ``field``. For services; the
    message starts with ``label`` (the field's name as the person reads it), since a
    service's refusal may be shown away from its field."""
    text = "" if value is None else str(value)
    problem = text_problem(text) or text_problem(text.strip(), max_length=max_length)
    if problem:
        if label:
            problem = _("%(field)s: %(problem)s") % {"field": label, "problem": problem}
        raise InvalidInput(problem, field=field)
    return text.strip()


def validate_plain_text(value: str) -> None:
    """A form field validator (the length is the field's own ``max_length``)."""
    problem = text_problem(value)
    if problem:
        raise ValidationError(problem, code="text")


def follows_text_rule(field: forms.Field) -> forms.Field:
    """``field`` (a form's field) checking this module's rule if it takes text; a JSON
    field's text is data, checked by its own form."""
    if isinstance(field, forms.CharField) and not isinstance(field, forms.JSONField):
        # Django's own NUL check would say it a second time, in other words.
        field.validators = [
            v
            for v in field.validators
            if not isinstance(v, ProhibitNullCharactersValidator) and v is not validate_plain_text
        ]
        field.validators.append(validate_plain_text)
    return field


class PlainTextForm(forms.Form):
    """A form whose every text field follows this module's rule."""

    def __init__(self, *args, **kwargs) -> None:
        super().__init__(*args, **kwargs)
        for field in self.fields.values():
            follows_text_rule(field)
