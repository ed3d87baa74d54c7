"""What every Explain sentence is made of: the page's rows and context, and small helpers
that turn a line's references into words (moments, spans, money). Kinds use them in
``billing.explain`` and ``billing.explain_shares``."""

from dataclasses import dataclass, field
from datetime import datetime
from decimal import Decimal
from typing import Any

from django.urls import reverse
from django.utils.html import conditional_escape, format_html
from django.utils.safestring import SafeString, mark_safe
from django.utils.translation import gettext as _

from billing import linewords
from billing.linewords import (
    LineWords,
    month_label,
    when,
)
from billing.periods import period_end
from billing.selectors import StatementView
from portal.models import Project
from portal.templatetags.portal_tags import money
from rental.models import Reservation

MAX_ROWS = 1000
MAX_LEASE_LINKS = 10


def say(message: str, **values: Any) -> SafeString:
    """A translated sentence with its values escaped (links built with format_html pass
    through as they are)."""
    escaped = {key: conditional_escape(value) for key, value in values.items()}
    # Safe: the message and every value are escaped above.
    return mark_safe(conditional_escape(message) % escaped)


def link(url: str, text: str) -> SafeString:
    return format_html('<a href="{}">{}</a>', url, text)


def lease_link(reservation_id: int) -> SafeString:
    return link(reverse("rental:lease", args=[reservation_id]), f"#{reservation_id}")


@dataclass(frozen=True)
class RunRow:
    """One usage run behind a usage line, as the Explain page lists it."""

    lease: SafeString
    requester: str
    start: str
    end: str
    ended: str
    gpus: int
    hours: str
    gpu_hours: str
    gpu_seconds: str
    rate: str
    minimum: bool


@dataclass(frozen=True)
class StorageRow:
    """One volume or stopped disk behind a storage line."""

    name: SafeString
    what: str
    size_gb: int
    start: str
    end: str
    hours: str
    gb_hours: str


@dataclass
class Explanation:
    words: LineWords
    model: str
    sentences: list[SafeString] = field(default_factory=list)
    runs: list[RunRow] = field(default_factory=list)
    more_runs: int = 0
    storage: list[StorageRow] = field(default_factory=list)
    reservation: Reservation | None = None


@dataclass(frozen=True)
class Context:
    """What every kind's sentences may need besides the line."""

    project: Project | None  # None: the platform's own statement
    view: StatementView
    model: str
    now: datetime

    @property
    def end(self) -> datetime:
        """Where the period's counting stopped: now for an open month, its end once closed."""
        if self.view.is_draft:
            return self.view.covered_end or self.now
        return period_end(self.view.period)


def refs_of(line: Any) -> dict[str, Any]:
    return line.references or {}


def gpu_seconds_of(line: Any) -> int:
    return int(refs_of(line).get("gpu_seconds") or 0)


def span_of(context: Context, refs: dict[str, Any]) -> str:
    """``in November 2026`` for a whole month, else ``from … to … UTC`` (the month so far)."""
    start = linewords.moment(refs.get("from")) or context.view.period
    end = linewords.moment(refs.get("to")) or context.end
    if start == context.view.period and end == period_end(context.view.period):
        return _("in %(month)s") % {"month": month_label(context.view.period)}
    return _("from %(start)s to %(end)s UTC") % {"start": when(start), "end": when(end)}


def in_period(context: Context) -> str:
    """``in November 2026`` once closed, ``in December 2026 so far`` while open."""
    month = month_label(context.view.period)
    if context.view.is_draft:
        return _("in %(month)s so far") % {"month": month}
    return _("in %(month)s") % {"month": month}


def money_ref(refs: dict[str, Any], key: str) -> str:
    value = refs.get(key)
    return money(Decimal(str(value))) if value not in (None, "") else "—"


def rounded_once(amount: Decimal) -> SafeString:
    return say(_("The amount, %(amount)s, is rounded once, to the cent."), amount=money(amount))


def market_and_tier(line: Any) -> str:
    market = linewords.MARKET_WORDS.get(line.market, line.market)
    if line.tier == line.market or line.tier not in linewords.TIER_WORDS:
        return str(market)
    return _("%(market)s, %(tier)s") % {
        "market": market,
        "tier": linewords.TIER_WORDS[line.tier],
    }
