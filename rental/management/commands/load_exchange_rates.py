"""Load dated exchange rates from a CSV file: ``currency,units_per_billing_unit,valid_from,
source`` per row (a header row is allowed). ``valid_from`` is a date (00:00 UTC) or an ISO
moment.

All or nothing: every row is checked, each bad one is reported on a line of its own
(``line 3: units_per_billing_unit: …``), and if any is bad, or the file holds no rate, or
it cannot be read as UTF-8 CSV, nothing is loaded and the command exits non-zero."""

import csv
import io
from datetime import UTC, datetime
from typing import Any

from django.core.management.base import BaseCommand, CommandError
from django.db import transaction

from portal.errors import DomainError
from rental.catalog import exchange

FIELDS = ["currency", "units_per_billing_unit", "valid_from", "source"]


class _Refused(Exception):
    """Raised inside the transaction to roll back every row when any was bad."""


def parse_moment(text: str) -> datetime | None:
    """A date or an ISO moment, in UTC (a date or a moment without an offset is UTC);
    None for anything else, a moment UTC cannot hold included."""
    text = (text or "").strip()
    try:
        moment = datetime.fromisoformat(text)
        return moment.astimezone(UTC) if moment.tzinfo else moment.replace(tzinfo=UTC)
    except (ValueError, OverflowError):
        return None


class Command(BaseCommand):
    help = "Load dated exchange rates into the billing currency from a CSV file."

    def add_arguments(self, parser: Any) -> None:
        parser.add_argument("path", help="CSV: currency,units_per_billing_unit,valid_from,source")

    def handle(self, *args: Any, path: str, **options: Any) -> None:
        rows = self.read(path)
        if rows and [cell.strip() for cell in rows[0][1]] == FIELDS:
            rows = rows[1:]
        rows = [(number, row) for number, row in rows if any(cell.strip() for cell in row)]
        if not rows:
            raise CommandError(f"{path}: no exchange rates in the file; nothing was loaded.")
        problems: list[str] = []
        try:
            with transaction.atomic():
                for number, row in rows:
                    problem = self.load(row)
                    if problem:
                        problems.append(f"line {number}: {problem}")
                if problems:
                    raise _Refused
        except _Refused:
            for problem in problems:
                self.stderr.write(problem)
            raise CommandError(
                f"{len(problems)} bad row(s) of {len(rows)}; nothing was loaded."
            ) from None
        self.stdout.write(f"Loaded {len(rows)} exchange rate(s).")

    def read(self, path: str) -> list[tuple[int, list[str]]]:
        """The file's rows with their line numbers, or CommandError in one line."""
        try:
            with open(path, "rb") as handle:
                data = handle.read()
        except OSError as error:
            raise CommandError(f"cannot read {path}: {error.strerror}") from None
        try:
            text = data.decode("utf-8-sig")
        except UnicodeDecodeError as error:
            line = data[: error.start].count(b"\n") + 1
            raise CommandError(
                f"{path}: line {line}: not UTF-8 text (byte {error.start + 1}); nothing was loaded."
            ) from None
        reader = csv.reader(io.StringIO(text, newline=""))
        try:
            return [(reader.line_num, row) for row in reader]
        except csv.Error as error:
            raise CommandError(
                f"{path}: line {reader.line_num}: {error}; nothing was loaded."
            ) from None

    def load(self, row: list[str]) -> str:
        """Add one row's rate; "" when it was added, else what is wrong with it."""
        if len(row) != len(FIELDS):
            return f"expected {len(FIELDS)} columns ({','.join(FIELDS)}), found {len(row)}"
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
            return f"{invalid.field}: {invalid.message}" if invalid.field else invalid.message
        return ""
