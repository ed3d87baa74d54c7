"""What a person may type into a number field of a service: a whole number within its
bounds, or a decimal within its column's digits.

Services take the raw value (a form's text, or the API's already typed number) and call
these, so one rule holds for the pages, the API and the admin: empty, text, a fraction
where a whole number is meant, a negative number, or one beyond the bound (``10^26``)
is refused as ``InvalidInput`` naming the field, in the person's language, before
anything is written. The bounds are the caller's: what the column holds and what the
number means.
"""

from decimal import Decimal, InvalidOperation
from typing import Any

from django import forms
from django.core.validators import MinValueValidator
from django.utils.translation import gettext as _

from portal.errors import InvalidInput

# Longer input is not a number anyone means; it is refused before Decimal parses it.
MAX_DIGITS_TYPED = 40


def _typed(value: Any) -> str:
    if isinstance(value, bool):  # True is an int to Python, never a count to a person
        return ""
    return str(value).strip() if value is not None else ""


def _named(refusal: str, label: object) -> str:
    """The refusal, after the field's name where the page shows it away from the field."""
    return _("%(field)s: %(problem)s") % {"field": label, "problem": refusal} if label else refusal


def whole_number(
    value: Any, *, field: str, maximum: int, minimum: int = 0, label: object = ""
) -> int:
    """``value`` as an int from ``minimum`` to ``maximum``, or InvalidInput on ``field``;
    its message starts with ``label`` when given (as ``portal.text.plain_text``'s)."""
    text = _typed(value)
    refusal = _named(
        _("Enter a whole number from %(min)s to %(max)s.")
        % {"min": f"{minimum:,}", "max": f"{maximum:,}"},
        label,
    )
    if not text or len(text) > MAX_DIGITS_TYPED:
        raise InvalidInput(refusal, field=field)
    try:
        number = Decimal(text)
    except InvalidOperation:
        raise InvalidInput(refusal, field=field) from None
    if not number.is_finite() or number != number.to_integral_value():
        raise InvalidInput(refusal, field=field)
    if not minimum <= number <= maximum:
        raise InvalidInput(refusal, field=field)
    return int(number)


def decimal_number(
    value: Any, *, field: str, places: int, below: Decimal, label: object = ""
) -> Decimal:
    """``value`` as a Decimal from 0 up to (not including) ``below`` with at most
    ``places`` decimal places, or InvalidInput on ``field``. ``below`` is what the column
    holds (10⁶ for 12 digits with six decimals)."""
    text = _typed(value)
    most = below - Decimal(1).scaleb(-places)
    refusal = _named(
        _("Enter a number from 0 to %(max)s with at most %(places)s decimal places.")
        % {"max": f"{most:,}", "places": places},
        label,
    )
    if not text or len(text) > MAX_DIGITS_TYPED:
        raise InvalidInput(refusal, field=field)
    try:
        number = Decimal(text)
    except InvalidOperation:
        raise InvalidInput(refusal, field=field) from None
    if not number.is_finite() or not 0 <= number < below:
        raise InvalidInput(refusal, field=field)
    if number != number.quantize(Decimal(1).scaleb(-places)):
        raise InvalidInput(refusal, field=field)
    return number.quantize(Decimal(1).scaleb(-places))


class NonNegativeNumbersForm(forms.ModelForm):
    """A model form (the admin's) whose every number field refuses a value below zero on
    the field. No number an admin edits means anything below zero (a price, an amount,
    a count of GPUs or GB), and a column's check constraint would otherwise answer on
    the whole form, naming the constraint, or not at all where it has none."""

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        for field in self.fields.values():
            numeric = isinstance(field, forms.IntegerField | forms.DecimalField)
            if numeric and (field.min_value is None or field.min_value < 0):
                field.min_value = 0
                field.validators.append(MinValueValidator(0))
                field.widget.attrs["min"] = 0
