"""Load dated exchange rates from a CSV file: ``currency,units_per_billing_unit,valid_from,
source`` per row (a header row is allowed). ``valid_from`` is a date (00:00 UTC) or an ISO
moment. Every row is validated first; one bad row loads nothing and names its line."""

import csv
from datetime import UTC, datetime
from typing import Any

from django.core.management.base import BaseCommand, CommandError
from django.db import transaction

from portal.errors import DomainError
from rental.catalog import exchange

FIELDS = ["currency", "units_per_billing_unit", "valid_from", "source"]


def parse_moment(text: str) -> datetime | None:
    text = (text or "").strip()
    try:
        moment = datetime.fromisoformat(text)
    except ValueError:
        return None
    return moment if moment.tzinfo else moment.replace(tzinfo=UTC)


class Command(BaseCommand):
    help = "Load dated exchange rates into the billing currency from a CSV file."

    def add_arguments(self, parser: Any) -> None:
        parser.add_argument("path", help="CSV: currency,units_per_billing_unit,valid_from,source")

    def handle(self, *args: Any, path: str, **options: Any) -> None:
        try:
            with open(path, newline="", encoding="utf-8") as handle:
                rows = list(csv.reader(handle))
        except OSError as error:
            raise CommandError(f"cannot read {path}: {error.strerror}") from None
        if rows and [cell.strip() for cell in rows[0]] == FIELDS:
            rows = rows[1:]
            first = 2
        else:
            first = 1
        loaded = 0
        with transaction.atomic():
            for number, row in enumerate(rows, start=first):
                if not any(cell.strip() for cell in row):
                    continue
                if len(row) != len(FIELDS):
                    raise CommandError(f"line {number}: expected {len(FIELDS)} columns")
                currency, rate, valid_from, source = row
                try:
                    exchange.add_exchange_rate(
                        actor=None,
                        currency=currency,
                        units_per_billing_unit=rate,
                        valid_from=parse_moment(valid_from),
                        source=source,
                        audit_source="command",
                    )
                except DomainError as invalid:
                    raise CommandError(
                        f"line {number}: {invalid.field}: {invalid.message} Nothing was loaded."
                    ) from None
                loaded += 1
        self.stdout.write(f"Loaded {loaded} exchange rate(s).")
