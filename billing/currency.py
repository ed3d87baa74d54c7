"""Statements in the billing currency: which exchange rates a statement used.

Usage carries the rate captured at launch (rental.catalog.exchange); a usage line
converts with it, rounded once (``billing.money``). A reserved window (B7) has no
instance of its own to capture on, so it converts at the rate in force when the window
began. Each converted line's references name its rate, so a closed statement still says
which rates it used after newer rates are recorded.
"""

from bisect import bisect_right
from collections.abc import Iterable
from dataclasses import dataclass
from datetime import datetime
from decimal import Decimal
from typing import Any

from django.conf import settings

from rental import billing_reads

ONE = Decimal(1)


def billing_currency() -> str:
    return settings.PORTAL_CURRENCY


@dataclass(frozen=True)
class RateUsed:
    currency: str
    units_per_billing_unit: Decimal
    valid_from: str  # ISO moment
    source: str
    rate_id: int
    billing_currency: str

    @property
    def since(self) -> str:
        """``2026-04-01 00:00`` (UTC), as a statement shows it."""
        return self.valid_from[:16].replace("T", " ")

    @property
    def label(self) -> str:
        return (
            f"{self.units_per_billing_unit.normalize():f} {self.currency}/{self.billing_currency}"
        )


class RateTable:
    """Every exchange rate, loaded once (one query), to find the one in force at a moment."""

    def __init__(self, rates: Iterable[Any] | None = None) -> None:
        self._rates = None if rates is None else list(rates)
        self._by_currency: dict[str, list[Any]] = {}
        self._by_id: dict[int, Any] = {}
        if self._rates is not None:
            self._index()

    def _index(self) -> None:
        for rate in self._rates or []:
            self._by_currency.setdefault(rate.currency, []).append(rate)
        self._by_id = {rate.pk: rate for rate in self._rates or []}

    def _load(self) -> None:
        """The query runs only when a converted line needs it (most sites have one currency)."""
        if self._rates is None:
            self._rates = billing_reads.exchange_rates()
            self._index()

    @property
    def by_id(self) -> dict[int, Any]:
        self._load()
        return self._by_id

    def first(self, currency: str) -> Any | None:
        self._load()
        rates = self._by_currency.get(currency, [])
        return rates[0] if rates else None

    def in_force(self, currency: str, at: datetime) -> Any | None:
        self._load()
        rates = self._by_currency.get(currency, [])
        index = bisect_right([rate.valid_from for rate in rates], at)
        return rates[index - 1] if index else None


def rate_references(rate: Any | None, currency: str, value: Decimal) -> dict[str, str]:
    """What a converted line's references say about its rate (empty when not converted)."""
    if rate is None or not currency or currency == billing_currency():
        return {}
    return {
        "currency": currency,
        "exchange_rate": str(value),
        "exchange_rate_id": str(rate.pk),
        "exchange_rate_from": rate.valid_from.isoformat(),
        "exchange_rate_source": rate.source,
    }


def describe_rates(lines: Iterable[Any], table: RateTable) -> None:
    """Complete each converted line's references with its rate's date and source."""
    for line in lines:
        rate_id = int(line.references.get("exchange_rate_id") or 0)
        if rate_id and "exchange_rate_source" not in line.references:
            rate = table.by_id.get(rate_id)
            if rate is not None:
                line.references = {
                    **line.references,
                    **rate_references(
                        rate, line.references["currency"], Decimal(line.references["exchange_rate"])
                    ),
                }


def rates_used(lines: Iterable[Any]) -> list[RateUsed]:
    """The distinct exchange rates a statement's lines converted with, by currency and date."""
    found: dict[int, RateUsed] = {}
    for line in lines:
        refs = getattr(line, "references", None) or {}
        rate_id = int(refs.get("exchange_rate_id") or 0)
        if rate_id and rate_id not in found:
            found[rate_id] = RateUsed(
                currency=refs["currency"],
                units_per_billing_unit=Decimal(refs["exchange_rate"]),
                valid_from=refs.get("exchange_rate_from", ""),
                source=refs.get("exchange_rate_source", ""),
                rate_id=rate_id,
                billing_currency=billing_currency(),
            )
    return sorted(found.values(), key=lambda rate: (rate.currency, rate.valid_from, rate.rate_id))


def line_rate_label(line: Any) -> str:
    """The CSV's exchange-rate column: ``7.25 CNY/USD`` for a converted line, else empty."""
    refs = getattr(line, "references", None) or {}
    if not refs.get("exchange_rate_id"):
        return ""
    return f"{Decimal(refs['exchange_rate']).normalize():f} {refs['currency']}/{billing_currency()}"
