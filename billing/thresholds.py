"""A budget's alert thresholds (BU1): a list of {"percent": 1–1000, "kind": "actual" |
"forecast"}, each pair once, sorted by kind and percent.

``clean_thresholds`` checks thresholds as a person gives them (the budget form, the
admin's JSON, the API, a configuration document) and refuses the first fault.
``readable_thresholds`` reads what is stored, which may predate these checks (an old
version, the admin, an import, a hand-made UPDATE): it keeps the well-formed thresholds
and says what is wrong with the rest, so that a page shows the budget and the budget task
skips it, instead of either failing.
"""

from decimal import Decimal, InvalidOperation
from typing import Any

from django.core.exceptions import ValidationError
from django.utils.translation import gettext as _

from billing.models import BudgetAlert

MOST = 20  # thresholds on one budget (the API's bound too)


def _problem(item: Any) -> tuple[dict[str, Any] | None, str, str]:
    """One threshold cleaned, or None with the message and code of its fault."""
    if not isinstance(item, dict) or set(item) != {"percent", "kind"}:
        return None, _('Each threshold is {"percent": 80, "kind": "actual"}.'), "shape"
    percent = item["percent"]
    try:
        number = Decimal(str(percent)) if not isinstance(percent, bool) else Decimal(-1)
    except InvalidOperation:
        number = Decimal(-1)
    if not number.is_finite() or number != number.to_integral_value() or not 1 <= number <= 1000:
        return None, _("A threshold's percent is a whole number from 1 to 1000."), "percent"
    if item["kind"] not in BudgetAlert.Kind.values:
        return None, _("A threshold's kind is “actual” or “forecast”."), "kind"
    return {"percent": int(number), "kind": item["kind"]}, "", ""


def _ordered(thresholds: list[dict[str, Any]]) -> list[dict[str, Any]]:
    return sorted(thresholds, key=lambda item: (item["kind"], item["percent"]))


def clean_thresholds(value: Any) -> list[dict[str, Any]]:
    """``value`` as thresholds, or ValidationError with the first fault, in the person's
    language."""
    if not isinstance(value, list):
        raise ValidationError(_("Enter a list of thresholds."), code="list")
    if len(value) > MOST:
        raise ValidationError(
            _("At most %(most)s thresholds, please.") % {"most": MOST}, code="too_many"
        )
    cleaned: list[dict[str, Any]] = []
    for item in value:
        threshold, message, code = _problem(item)
        if threshold is None:
            raise ValidationError(message, code=code)
        if threshold in cleaned:
            raise ValidationError(_("A threshold is listed twice."), code="duplicate")
        cleaned.append(threshold)
    return _ordered(cleaned)


def readable_thresholds(stored: Any) -> tuple[list[dict[str, Any]], str]:
    """The well-formed thresholds of a stored budget, and what is wrong with the rest
    ("" when nothing is). Never raises, whatever the column holds."""
    if not isinstance(stored, list):
        return [], _("The thresholds are not a list.")
    kept: list[dict[str, Any]] = []
    problems: list[str] = []
    for item in stored:
        threshold, message, _code = _problem(item)
        if threshold is None:
            if message not in problems:
                problems.append(message)
        elif threshold not in kept:
            kept.append(threshold)
    return _ordered(kept), " ".join(problems)
