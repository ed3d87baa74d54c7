"""Statements for finance: CSV (one row per line, machine-readable amounts) and a PDF a
person would file (company name, period, lines, totals, sign-off state).

Both are in English whatever the page's language (``LANGUAGE``; callers render the title
under ``translation.override(LANGUAGE)`` too), so a filed or processed file reads the
same for everyone; the CSV's period, kind, market, tier and unit are codes. Line names
are rendered from each line's data like the pages' (``billing.linewords``).
"""

import csv
import io
from collections.abc import Iterable
from dataclasses import dataclass
from datetime import datetime
from decimal import Decimal
from html import escape
from typing import Any

from django.conf import settings
from django.utils import translation
from django.utils.translation import gettext as _

from billing import linewords
from billing.money import RATE_PLACES
from billing.selectors import StatementView

LANGUAGE = "en"

CSV_COLUMNS = [
    "period",
    "project",
    "status",
    "kind",
    "gpu_model",
    "market",
    "tier",
    "quantity",
    "unit",
    "unit_price",
    "amount",
    "currency",
    "description",
    "priced_in",
    "exchange_rate",
]


@dataclass
class ExportStatement:
    """One statement as exports see it: whose, which month, its state and its lines."""

    project_slug: str
    project_name: str
    view: StatementView


def _model_name(line: Any, names: dict[int, str]) -> str:
    model = getattr(line, "gpu_model_id", None)
    return names.get(model, "") if model else ""


def to_csv(statements: Iterable[ExportStatement], *, names: dict[int, str]) -> str:
    """One row per line; ``quantity`` counts ``unit`` (``gpu_hours``, ``gb_months`` for
    storage, empty for a correction), ``unit_price`` is per that unit."""
    out = io.StringIO()
    writer = csv.writer(out, lineterminator="\n")
    writer.writerow(CSV_COLUMNS)
    with translation.override(LANGUAGE):
        for item in statements:
            words = linewords.words_for(item.view.lines, names=names)
            for line, said in zip(item.view.lines, words, strict=True):
                writer.writerow(
                    [
                        f"{item.view.period:%Y-%m}",
                        item.project_slug,
                        item.view.status,
                        line.kind,
                        _model_name(line, names),
                        line.market,
                        line.tier,
                        f"{line.quantity:f}",
                        said.unit,
                        f"{Decimal(line.unit_price).quantize(RATE_PLACES):f}",
                        f"{line.amount:.2f}",
                        item.view.currency,
                        said.title,
                        *_rate_columns(line),
                    ]
                )
    return out.getvalue()


def _rate_columns(line: Any) -> list[str]:
    """A converted line's currency and the exchange rate it used (units per billing unit);
    empty for a line priced in the billing currency."""
    refs = getattr(line, "references", None) or {}
    if not refs.get("exchange_rate_id"):
        return ["", ""]
    return [refs["currency"], refs["exchange_rate"]]


def rates_paragraph_text(view: StatementView) -> str:
    """The "Rates used" sentence of a statement (the PDF's and the page's wording)."""
    return "; ".join(
        _("%(rate)s %(currency)s = 1 %(billing)s from %(from)s (%(source)s)")
        % {
            "rate": f"{used.units_per_billing_unit.normalize():f}",
            "currency": used.currency,
            "billing": used.billing_currency,
            "from": used.since + " UTC",
            "source": used.source,
        }
        for used in view.rates_used
    )


def _rate(rate: Decimal) -> str:
    """A unit price with at least cents and up to six places: 2.50, 0.412345."""
    whole, _dot, fraction = f"{rate.quantize(RATE_PLACES):f}".partition(".")
    return f"{whole}.{fraction.rstrip('0').ljust(2, '0')}"


def _money(amount: Decimal, currency: str) -> str:
    sign = "-" if amount < 0 else ""
    return f"{sign}{currency} {abs(amount):,.2f}"


def to_pdf(
    statements: list[ExportStatement],
    *,
    names: dict[int, str],
    title: str,
    period: datetime,
    generated_at: datetime,
) -> bytes:
    """A filing copy: a header with the company, the period and each statement's state,
    then per statement its lines and total, then the grand total. In English (``LANGUAGE``)."""
    with translation.override(LANGUAGE):
        return _pdf(statements, names=names, title=title, period=period, generated_at=generated_at)


def _pdf(
    statements: list[ExportStatement],
    *,
    names: dict[int, str],
    title: str,
    period: datetime,
    generated_at: datetime,
) -> bytes:
    # Late on purpose: reportlab (fonts, ~0.2 s) is loaded only when a PDF is asked for.
    from reportlab.lib import colors  # noqa: PLC0415
    from reportlab.lib.pagesizes import A4  # noqa: PLC0415
    from reportlab.lib.styles import getSampleStyleSheet  # noqa: PLC0415
    from reportlab.lib.units import mm  # noqa: PLC0415
    from reportlab.platypus import Paragraph, SimpleDocTemplate, Spacer, Table, TableStyle  # noqa: PLC0415

    buffer = io.BytesIO()
    document = SimpleDocTemplate(
        buffer,
        pagesize=A4,
        leftMargin=15 * mm,
        rightMargin=15 * mm,
        topMargin=15 * mm,
        bottomMargin=15 * mm,
        title=title,
        author=settings.PORTAL_COMPANY_NAME,
        invariant=1,
    )
    styles = getSampleStyleSheet()
    small = styles["BodyText"].clone("small", fontSize=8, leading=10)
    story: list[Any] = [
        Paragraph(settings.PORTAL_COMPANY_NAME, styles["Title"]),
        Paragraph(title, styles["Heading2"]),
        Paragraph(
            _("Period %(period)s (UTC). Generated %(at)s.")
            % {
                "period": linewords.month_label(period),
                "at": f"{generated_at:%Y-%m-%d %H:%M} UTC",
            },
            small,
        ),
        Spacer(1, 4 * mm),
    ]
    grand = Decimal("0.00")
    currency = settings.PORTAL_CURRENCY
    for item in statements:
        view = item.view
        currency = view.currency
        state = {
            "draft": _("Draft (the period is open)"),
            "closed": _("Closed, waiting for sign-off"),
            "approved": _("Signed off"),
            "disputed": _("Disputed"),
        }.get(view.status, view.status)
        decided = ""
        if view.statement is not None and view.statement.decided_at:
            decided = _(" by %(who)s on %(when)s") % {
                "who": view.statement.decided_by.get_username()
                if view.statement.decided_by
                else "?",
                "when": f"{view.statement.decided_at:%Y-%m-%d}",
            }
        story.append(Paragraph(f"{item.project_name} ({item.project_slug})", styles["Heading3"]))
        story.append(Paragraph(_("State: %(state)s") % {"state": state + decided}, small))
        rows = [[_("Kind"), _("Description"), _("Quantity"), _("Unit price"), _("Amount")]]
        words = linewords.words_for(view.lines, names=names)
        for line, said in zip(view.lines, words, strict=True):
            rows.append(
                [
                    said.kind,
                    Paragraph(escape(said.title), small),
                    said.quantity,
                    _rate(Decimal(line.unit_price)) if said.unit else "—",
                    _money(line.amount, view.currency),
                ]
            )
        rows.append(["", _("Total"), "", "", _money(view.total, view.currency)])
        table = Table(rows, colWidths=[26 * mm, 70 * mm, 32 * mm, 22 * mm, 30 * mm], repeatRows=1)
        table.setStyle(
            TableStyle(
                [
                    ("FONTSIZE", (0, 0), (-1, -1), 8),
                    ("BACKGROUND", (0, 0), (-1, 0), colors.HexColor("#e8ecf2")),
                    ("ALIGN", (2, 0), (-1, -1), "RIGHT"),
                    ("VALIGN", (0, 0), (-1, -1), "TOP"),
                    ("LINEBELOW", (0, 0), (-1, 0), 1, colors.grey),
                    ("LINEABOVE", (0, -1), (-1, -1), 1, colors.grey),
                    ("FONTNAME", (0, -1), (-1, -1), "Helvetica-Bold"),
                ]
            )
        )
        story.append(table)
        if view.rates_used:
            story.append(
                Paragraph(
                    _("Rates used: %(rates)s.") % {"rates": rates_paragraph_text(view)}, small
                )
            )
        story.append(Spacer(1, 5 * mm))
        grand += view.total
    if len(statements) > 1:
        story.append(
            Paragraph(
                _("Total of %(n)s statements: %(total)s")
                % {"n": len(statements), "total": _money(grand, currency)},
                styles["Heading3"],
            )
        )
    document.build(story)
    return buffer.getvalue()
