"""Formatting for billing templates: GPU-hours from Decimals, never through float."""

from decimal import ROUND_HALF_UP, Decimal
from typing import Any

from django import template

register = template.Library()


@register.filter
def hours(value: Any) -> str:
    """GPU-hours to two places with thousands separators: ``1,234.50``."""
    if value is None or value == "":
        return "—"
    number = value if isinstance(value, Decimal) else Decimal(str(value))
    return f"{number.quantize(Decimal('0.01'), rounding=ROUND_HALF_UP):,f}"
