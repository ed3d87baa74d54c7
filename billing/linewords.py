"""Statement lines in words: each line's kind, name, quantity and unit price, rendered when
shown, in the reader's language, from the line's structured data (kind, GPU model,
market, tier, references).

A line's stored ``description`` is the English text written when it was computed; it is
the fallback for a line whose references lack what its name is made of (a line closed by
an older version, or a correction an admin typed), and the API's ``description``.
Exports render in English (``billing.exports``), pages in the reader's language.
"""

from collections.abc import Iterable
from dataclasses import dataclass
from datetime import date, datetime
from decimal import ROUND_HALF_UP, Decimal
from typing import Any

from django.utils import formats, timezone
from django.utils.translation import gettext as _
from django.utils.translation import gettext_lazy

from billing.currency import billing_currency
from billing.models import LineDispute, StatementLine
from billing.money import SECONDS_PER_HOUR
from billing.selectors import gpu_model_names
from portal.templatetags.portal_tags import rate

GPU_HOURS = "gpu_hours"
GB_MONTHS = "gb_months"
MANUAL_KINDS = frozenset({"adjustment", "credit"})

# Lower case: these words go inside a line's name ("A10G 24GB, on-demand, guaranteed").
MARKET_WORDS = {"on_demand": gettext_lazy("on-demand"), "spot": gettext_lazy("spot")}
TIER_WORDS = {
    "guaranteed": gettext_lazy("guaranteed"),
    "burst": gettext_lazy("burst"),
    "reserved": gettext_lazy("reserved"),
    "spot": gettext_lazy("spot"),
}
# Why a pool's cost landed on the platform's own statement (``why`` in its references).
PLATFORM_WHY = {
    "policy": gettext_lazy("site policy"),
    "no_burst": gettext_lazy("no burst usage to share it over"),
    "no_guarantee": gettext_lazy("no project has a guarantee"),
    "no_usage": gettext_lazy("no usage to split it over"),
    "unbilled": gettext_lazy("cloud time after billing stopped"),
}
STORAGE_WHAT = {
    "volume": gettext_lazy("Data volumes"),
    "disk": gettext_lazy("Stopped instances' disks"),
}


# Figures as a person reads them.


def when(moment: datetime | None) -> str:
    """A moment as the portal shows it: ``2026-11-01 09:00`` (UTC)."""
    if moment is None:
        return "—"
    return formats.date_format(timezone.localtime(moment), "Y-m-d H:i")


def moment(value: Any) -> datetime | None:
    """A reference's ISO moment (``2026-11-01T00:00:00+00:00``) as a datetime, or None."""
    if isinstance(value, datetime):
        return value
    try:
        return datetime.fromisoformat(str(value))
    except ValueError:
        return None


def month_label(period: date | datetime) -> str:
    """A month in the reader's language, in its natural order: ``November 2026``,
    ``2026年11月`` (the locale's YEAR_MONTH_FORMAT)."""
    return formats.date_format(period, "YEAR_MONTH_FORMAT")


def number(value: int | Decimal) -> str:
    """A count or exact figure with thousands separators: ``14,148``."""
    return f"{value:,}"


def decimal_text(value: Decimal, places: str = "0.01") -> str:
    """A decimal rounded to ``places`` with thousands separators and no trailing zeros:
    ``56.5``, ``5,760``, ``3.93``."""
    rounded = value.quantize(Decimal(places), rounding=ROUND_HALF_UP)
    text = f"{rounded:,f}"
    return text.rstrip("0").rstrip(".") if "." in text else text


def price_text(value: Decimal) -> str:
    """A price in another currency, with at least cents and no trailing zeros beyond
    them: ``20.00``, ``0.412345``."""
    whole, _dot, fraction = f"{Decimal(value).normalize():f}".partition(".")
    return f"{whole}.{fraction.ljust(2, '0')}"


def hours_of(seconds: int | Decimal) -> str:
    """Seconds as hours to two places (four when that would show 0): ``56.5``, ``0.0028``."""
    hours = Decimal(seconds) / SECONDS_PER_HOUR
    text = decimal_text(hours)
    if text == "0" and seconds:
        text = decimal_text(hours, "0.0001")
    return text


def percent(part: int | Decimal, whole: int | Decimal) -> str:
    """``part`` of ``whole`` in percent, to one place: ``30``, ``33.3``."""
    if not whole:
        return "0"
    return decimal_text(Decimal(part) * 100 / Decimal(whole), "0.1")


def kind_label(kind: str) -> str:
    """A line kind in words: ``Usage``, ``用量``."""
    try:
        return str(StatementLine.Kind(kind).label)
    except ValueError:
        return kind.replace("_", " ").capitalize()


def unit_of(line: Any) -> str:
    """What a line's quantity counts: GPU-hours, GB-months (storage), or nothing (a
    correction has no quantity)."""
    if line.kind == "storage":
        return GB_MONTHS
    if line.kind in MANUAL_KINDS:
        return ""
    return GPU_HOURS


def quantity_text(line: Any) -> str:
    """``3.93 GPU-hours``, ``1.2 GB-months``, or ``—``."""
    unit = unit_of(line)
    if not unit:
        return "—"
    figure = decimal_text(Decimal(line.quantity))
    if unit == GB_MONTHS:
        return _("%(n)s GB-months") % {"n": figure}
    return _("%(n)s GPU-hours") % {"n": figure}


def unit_price_text(line: Any) -> str:
    """The unit price per the line's own unit: ``$1.006/GPU-hour``, ``$0.10/GB-month``."""
    unit = unit_of(line)
    if not unit:
        return "—"
    if unit == GB_MONTHS:
        return _("%(price)s/GB-month") % {"price": rate(line.unit_price)}
    return _("%(price)s/GPU-hour") % {"price": rate(line.unit_price)}


# A line's name.


def _model(line: Any, names: dict[int, str]) -> str:
    return names.get(getattr(line, "gpu_model_id", None) or 0, "")


def _priced_in(refs: dict[str, Any]) -> str:
    if not refs.get("exchange_rate_id") or not refs.get("currency") or not refs.get("rate"):
        return ""
    return _(" (%(currency)s %(rate)s/GPU-h at %(fx)s %(currency)s per %(billing)s)") % {
        "currency": refs["currency"],
        "rate": price_text(Decimal(str(refs["rate"]))),
        "fx": f"{Decimal(str(refs['exchange_rate'])).normalize():f}",
        "billing": billing_currency(),
    }


def usage_title(line: Any, model: str) -> str | None:
    if not model or line.market not in MARKET_WORDS or line.tier not in TIER_WORDS:
        return None
    refs = line.references or {}
    market = MARKET_WORDS[line.market]
    if line.tier == line.market:  # a spot lease runs in tier spot: say it once
        title = _("%(model)s, %(market)s") % {"model": model, "market": market}
    else:
        title = _("%(model)s, %(market)s, %(tier)s") % {
            "model": model,
            "market": market,
            "tier": TIER_WORDS[line.tier],
        }
    title += _priced_in(refs)
    if refs.get("covered") is True and refs.get("mode") != "by_usage":
        if line.tier == "reserved":
            return _("%(line)s (within the reservation)") % {"line": title}
        return _("%(line)s (covered by the commitment)") % {"line": title}
    return title


def _title(line: Any, model: str, corrections: dict[int, LineDispute]) -> str | None:
    refs = line.references or {}
    kind = line.kind
    if kind == "usage":
        return usage_title(line, model)
    if kind == "committed_share" and model and "G" in refs:
        return _("%(model)s: share of the committed cost (G = %(g)s)") % {
            "model": model,
            "g": refs["G"],
        }
    if kind == "reservation" and model and "reservation_id" in refs and "gpu_count" in refs:
        return _("Reservation #%(id)s: %(n)s× %(model)s, charged whether used or not") % {
            "id": refs["reservation_id"],
            "n": refs["gpu_count"],
            "model": model,
        }
    if kind == "shared_residual" and model:
        if "burst_gpu_seconds" in refs:
            return _("%(model)s: unassigned commitment, by burst use") % {"model": model}
        if refs.get("why") in PLATFORM_WHY:
            return _("%(model)s: platform overhead (%(why)s)") % {
                "model": model,
                "why": PLATFORM_WHY[refs["why"]],
            }
        return None
    if kind == "storage" and refs.get("storage") in STORAGE_WHAT and "rate" in refs:
        return _("%(what)s at %(rate)s per GB-month") % {
            "what": STORAGE_WHAT[refs["storage"]],
            "rate": rate(refs["rate"]),
        }
    if kind in MANUAL_KINDS and refs.get("dispute_id") in corrections:
        dispute = corrections[refs["dispute_id"]]
        disputed = dispute.line
        return _("Correction of “%(line)s” (%(period)s): %(answer)s") % {
            "line": title_of(disputed, names={disputed.gpu_model_id or 0: gpu_name(disputed)}),
            "period": month_label(disputed.statement.period),
            "answer": dispute.answer,
        }
    return None


def gpu_name(line: StatementLine) -> str:
    """A stored line's GPU model name (its ``gpu_model`` selected with it), or empty."""
    return line.gpu_model.name if line.gpu_model_id and line.gpu_model else ""


def title_of(
    line: Any, *, names: dict[int, str], corrections: dict[int, LineDispute] | None = None
) -> str:
    """A line's name in the reader's language, or its stored description when its data do
    not say enough (see the module's docstring)."""
    return _title(line, _model(line, names), corrections or {}) or line.description


@dataclass(frozen=True)
class LineWords:
    """What a statement table shows of one line."""

    kind: str
    title: str
    quantity: str
    unit_price: str
    unit: str


def corrections_for(lines: Iterable[Any]) -> dict[int, LineDispute]:
    """The disputes that the correction lines among ``lines`` answer, in one query."""
    ids = {
        line.references.get("dispute_id")
        for line in lines
        if line.kind in MANUAL_KINDS and (line.references or {}).get("dispute_id")
    }
    if not ids:
        return {}
    return {
        dispute.pk: dispute
        for dispute in LineDispute.objects.filter(pk__in=ids).select_related(
            "line__gpu_model", "line__statement", "raised_by", "answered_by"
        )
    }


def words_for(lines: list[Any], *, names: dict[int, str] | None = None) -> list[LineWords]:
    """Every line's words, with at most two queries for the lot (GPU model names, the
    disputes behind corrections)."""
    names = gpu_model_names(lines) if names is None else names
    corrections = corrections_for(lines)
    return [
        LineWords(
            kind=kind_label(line.kind),
            title=title_of(line, names=names, corrections=corrections),
            quantity=quantity_text(line),
            unit_price=unit_price_text(line),
            unit=unit_of(line),
        )
        for line in lines
    ]
