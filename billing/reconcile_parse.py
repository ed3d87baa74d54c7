"""Reading a provider's bill: an AWS Cost and Usage Report (CSV, gzipped or not, or Parquet)
or a simple CSV of the same fields for other providers, streamed row by row.

Nothing of the file is kept line by line: instance-hour lines are summed per resource, day,
market and rate (``Bill``), and every other line only into one total. Memory grows with the
resources and days on the bill, never with its lines. A line that cannot be read stops the
import with a ``BillFileError`` naming the line and the column.
"""

import csv
import gzip
import io
import re
from collections.abc import Iterable, Iterator, Sequence
from dataclasses import dataclass, field
from datetime import date
from decimal import Decimal, InvalidOperation
from typing import IO, Any

from django.utils.translation import gettext as _

from rental.providers.base import (
    TAG_IDEMPOTENCY_KEY,
    TAG_INSTALLATION,
    TAG_PROJECT,
    TAG_RESERVATION,
)

ZERO = Decimal(0)
PARQUET_BATCH_ROWS = 65_536
RESOURCE_ID_LENGTH = 200
SHORT_TEXT_LENGTH = 60
TAG_LENGTH = 100

# What each field is called: the CUR's name first (shown in errors for a CUR), then the
# simple CSV's. Names are compared without case and without "/", ":", "-", "_" or spaces,
# so a CUR's "lineItem/ResourceId", its Parquet "line_item_resource_id" and a simple
# CSV's "resource_id" are one column.
FIELDS: dict[str, tuple[str, ...]] = {
    "resource_id": ("lineItem/ResourceId", "resource_id"),
    "start": ("lineItem/UsageStartDate", "usage_start"),
    "end": ("lineItem/UsageEndDate", "usage_end"),
    "product": ("lineItem/ProductCode", "product_code"),
    "usage_type": ("lineItem/UsageType", "usage_type"),
    "line_type": ("lineItem/LineItemType", "line_type"),
    "amount": ("lineItem/UsageAmount", "usage_amount"),
    "rate": ("lineItem/UnblendedRate", "rate"),
    "cost": ("lineItem/UnblendedCost", "cost"),
    "currency": ("lineItem/CurrencyCode", "currency"),
    "instance_type": ("product/instanceType", "instance_type"),
    "region": ("product/region", "region"),
}
REQUIRED = ("resource_id", "start", "usage_type", "amount", "cost")
TAGS = {
    "project": TAG_PROJECT,
    "reservation": TAG_RESERVATION,
    "key": TAG_IDEMPOTENCY_KEY,
    "installation": TAG_INSTALLATION,
}
TAG_PREFIXES = ("resourcetagsuser", "resourcetags", "tag", "")
# Lines that charge for use; taxes, credits, refunds and fees are other charges.
USAGE_LINE_TYPES = frozenset({"", "Usage", "DiscountedUsage", "SavingsPlanCoveredUsage"})
INSTANCE_USAGE = re.compile(r"BoxUsage|SpotUsage|InstanceUsage|^instance$|^spot$", re.I)


def _squash(name: str) -> str:
    return re.sub(r"[^a-z0-9]", "", name.lower())


class BillFileError(ValueError):
    """A file that cannot be read as a bill; the message names the line and column."""


@dataclass
class ResourceBill:
    """What the provider charged for one resource in the month: per day [hours, cost], per
    (market, rate) [hours, cost], and what its first line said of it."""

    resource_id: str
    instance_type: str = ""
    region: str = ""
    tags: dict[str, str] = field(default_factory=dict)
    days: dict[date, list[Decimal]] = field(default_factory=dict)
    rates: dict[tuple[str, Decimal | None], list[Decimal]] = field(default_factory=dict)
    lines: int = 0

    @property
    def hours(self) -> Decimal:
        return sum((cell[0] for cell in self.days.values()), ZERO)

    @property
    def cost(self) -> Decimal:
        return sum((cell[1] for cell in self.days.values()), ZERO)


@dataclass
class Bill:
    currency: str
    resources: dict[str, ResourceBill]
    line_count: int
    instance_line_count: int
    other_total: Decimal

    @property
    def instance_total(self) -> Decimal:
        return sum((resource.cost for resource in self.resources.values()), ZERO)


class _Reader:
    """The loop over rows once the header has told where each field is."""

    def __init__(self, header: Sequence[str], *, period: date, currency: str, cur: bool) -> None:
        squashed = {_squash(name): index for index, name in enumerate(header)}
        self.header = list(header)
        self.cur = cur
        self.columns: dict[str, int] = {}
        for key, names in FIELDS.items():
            for name in names:
                if _squash(name) in squashed:
                    self.columns[key] = squashed[_squash(name)]
                    break
        missing = [key for key in REQUIRED if key not in self.columns]
        if missing:
            raise BillFileError(
                _("Line 1: the file has no column “%(column)s”; found: %(found)s.")
                % {
                    "column": self._name(missing[0]),
                    "found": ", ".join(str(name)[:40] for name in header[:12]) or "—",
                }
            )
        self.tags: dict[str, int] = {}
        for key, tag in TAGS.items():
            for prefix in TAG_PREFIXES:
                if prefix + _squash(tag) in squashed:
                    self.tags[key] = squashed[prefix + _squash(tag)]
                    break
        self.period = period
        # With a currency column the first line's currency is the file's.
        self.default_currency = currency
        self.currency = "" if "currency" in self.columns else currency
        self.currency_seen = False
        self.cells: dict[tuple[str, date, str, str], list] = {}
        self.resources: dict[str, ResourceBill] = {}
        self.days: dict[str, date] = {}
        self.kinds: dict[str, str | None] = {}
        self.line_count = 0
        self.instance_lines = 0
        self.other_total = ZERO

    def _name(self, key: str) -> str:
        names = FIELDS[key]
        return names[0] if self.cur else names[1]

    def _column_name(self, key: str) -> str:
        index = self.columns.get(key)
        return self.header[index] if index is not None else self._name(key)

    def _error(self, line: int, key: str, message: str) -> BillFileError:
        return BillFileError(
            _("Line %(line)s, column “%(column)s”: %(problem)s")
            % {"line": line, "column": self._column_name(key)[:60], "problem": message}
        )

    def _kind(self, usage_type: str) -> str | None:
        """ "spot" or "on_demand" for an instance-hour usage type, None for anything else."""
        kind = self.kinds.get(usage_type)
        if kind is None and usage_type not in self.kinds:
            if INSTANCE_USAGE.search(usage_type):
                kind = "spot" if "spot" in usage_type.lower() else "on_demand"
            self.kinds[usage_type] = kind
        return kind

    def _day(self, text: str, line: int) -> date:
        try:
            day = date.fromisoformat(text[:10])
        except ValueError:
            raise self._error(
                line, "start", _("“%(value)s” is not a date and time.") % {"value": text[:40]}
            ) from None
        if (day.year, day.month) != (self.period.year, self.period.month):
            raise self._error(
                line,
                "start",
                _("%(day)s is not in %(period)s, the month being imported.")
                % {"day": day.isoformat(), "period": f"{self.period:%Y-%m}"},
            )
        self.days[text] = day
        return day

    def _number(self, text: str, line: int, key: str) -> Decimal:
        try:
            value = Decimal(text)
        except InvalidOperation:
            value = None
        if value is None or not value.is_finite():
            raise self._error(
                line, key, _("“%(value)s” is not a number.") % {"value": text[:40]}
            ) from None
        return value

    def feed(self, rows: Iterable[Sequence[str]], first_line: int) -> None:
        """Sum ``rows`` (lists of texts) whose first is file line ``first_line``."""
        columns = self.columns
        i_rid, i_start, i_type, i_amount, i_cost = (columns[key] for key in REQUIRED)
        i_rate = columns.get("rate")
        i_line_type = columns.get("line_type")
        i_currency = columns.get("currency")
        width = len(self.header)
        cells, days, kinds = self.cells, self.days, self.kinds
        line = first_line - 1
        for row in rows:
            line += 1
            if len(row) != width:
                if not any(row):
                    continue  # a blank line
                raise BillFileError(
                    _("Line %(line)s has %(found)s columns; the header has %(expected)s.")
                    % {"line": line, "found": len(row), "expected": width}
                )
            self.line_count += 1
            if i_currency is not None and row[i_currency] != self.currency:
                self._currency(row[i_currency], line)
            usage_type = row[i_type]
            kind = kinds[usage_type] if usage_type in kinds else self._kind(usage_type)
            if kind is None or (
                i_line_type is not None and row[i_line_type] not in USAGE_LINE_TYPES
            ):
                self.other_total += self._number(row[i_cost], line, "cost")
                continue
            resource_id = row[i_rid]
            start = row[i_start]
            day = days.get(start) or self._day(start, line)
            rate = row[i_rate] if i_rate is not None else ""
            cell = cells.get((resource_id, day, kind, rate))
            if cell is None:
                cell = self._new_cell(row, line, resource_id, day, kind, rate)
            try:
                cell[0] += Decimal(row[i_amount])
                cell[1] += Decimal(row[i_cost])
            except InvalidOperation:
                self._number(row[i_amount], line, "amount")
                self._number(row[i_cost], line, "cost")
            if not (cell[0].is_finite() and cell[1].is_finite()):
                self._number(row[i_amount], line, "amount")
                self._number(row[i_cost], line, "cost")
            cell[2] += 1
            self.instance_lines += 1

    def _currency(self, value: str, line: int) -> None:
        """The file's currency is its first line's; another one later is refused."""
        if not value:
            return
        if not self.currency_seen:
            if not re.fullmatch(r"[A-Z]{3}", value):
                raise self._error(
                    line,
                    "currency",
                    _("“%(value)s” is not a currency code.") % {"value": value[:10]},
                )
            self.currency, self.currency_seen = value, True
            return
        raise self._error(
            line,
            "currency",
            _("%(found)s, where the lines before are in %(currency)s: one file has one currency.")
            % {"found": value[:10], "currency": self.currency},
        )

    def _new_cell(
        self, row: Sequence[str], line: int, resource_id: str, day: date, kind: str, rate: str
    ) -> list:
        """The first line of a (resource, day, market, rate): checks what the fast path
        takes on trust, and notes the resource's type, region and tags."""
        if not resource_id:
            raise self._error(
                line,
                "resource_id",
                _(
                    "an instance-hour line without a resource id: "
                    "export the report with resource IDs."
                ),
            )
        if len(resource_id) > RESOURCE_ID_LENGTH:
            raise self._error(
                line,
                "resource_id",
                _("a resource id of more than %(count)s characters.")
                % {"count": RESOURCE_ID_LENGTH},
            )
        if rate:
            self._number(rate, line, "rate")
        resource = self.resources.get(resource_id)
        if resource is None:
            resource = self.resources[resource_id] = ResourceBill(resource_id)
        for key, limit in (("instance_type", SHORT_TEXT_LENGTH), ("region", SHORT_TEXT_LENGTH)):
            index = self.columns.get(key)
            value = row[index].strip() if index is not None else ""
            if len(value) > limit:
                raise self._error(
                    line, key, _("longer than %(count)s characters.") % {"count": limit}
                )
            if value and not getattr(resource, key):
                setattr(resource, key, value)
        for key, index in self.tags.items():
            value = row[index].strip()
            if value and key not in resource.tags:
                resource.tags[key] = value[:TAG_LENGTH]
        cell = self.cells[(resource_id, day, kind, rate)] = [ZERO, ZERO, 0]
        return cell

    def bill(self) -> Bill:
        if not self.line_count:
            raise BillFileError(_("The file has a header but no lines."))
        for (resource_id, day, kind, rate), (hours, cost, lines) in self.cells.items():
            resource = self.resources[resource_id]
            per_day = resource.days.setdefault(day, [ZERO, ZERO])
            per_day[0] += hours
            per_day[1] += cost
            per_rate = resource.rates.setdefault(
                (kind, Decimal(rate) if rate else None), [ZERO, ZERO]
            )
            per_rate[0] += hours
            per_rate[1] += cost
            resource.lines += lines
        return Bill(
            currency=self.currency or self.default_currency,
            resources=self.resources,
            line_count=self.line_count,
            instance_line_count=self.instance_lines,
            other_total=self.other_total,
        )


def _text(binary: IO[bytes]) -> io.TextIOWrapper:
    """The file as text, gunzipped when it is gzip (a CUR is usually delivered as .csv.gz)."""
    head = binary.read(2)
    binary.seek(0)
    if head == b"\x1f\x8b":
        binary = gzip.GzipFile(fileobj=binary, mode="rb")  # type: ignore[assignment]
    return io.TextIOWrapper(binary, encoding="utf-8-sig", newline="")


def read_csv(binary: IO[bytes], *, period: date, currency: str, cur: bool) -> Bill:
    """A CUR or simple CSV, streamed; ``currency`` is assumed where the file has no
    currency column."""
    text = _text(binary)
    rows = csv.reader(text)
    try:
        header = next(rows, None)
        if header is None:
            raise BillFileError(_("The file is empty."))
        reader = _Reader(header, period=period, currency=currency, cur=cur)
        reader.feed(rows, first_line=2)
    except UnicodeDecodeError:
        raise BillFileError(
            _("Around line %(line)s: the file is not UTF-8 text (nor gzipped UTF-8 text).")
            % {"line": rows.line_num + 1}
        ) from None
    except (csv.Error, OSError, EOFError) as invalid:
        raise BillFileError(
            _("Line %(line)s cannot be read as CSV: %(problem)s")
            % {"line": rows.line_num, "problem": str(invalid)[:100]}
        ) from None
    return reader.bill()


def _parquet_rows(batch: Any, names: list[str], string: Any, cast: Any) -> Iterator[tuple]:
    columns = []
    for name in names:
        column = batch.column(name)
        # Every value is read as the text the file holds (a double's shortest decimal
        # text, a timestamp's ISO text), then as Decimal or date like a CSV's.
        if column.type != string:
            column = cast(column, string)
        columns.append(["" if value is None else value for value in column.to_pylist()])
    return zip(*columns, strict=True)


def read_parquet(binary: IO[bytes], *, period: date, currency: str) -> Bill:
    """A CUR in Parquet, read a row group batch at a time (pyarrow, the "reconcile" extra)."""
    try:
        # Optional: only a Parquet import needs pyarrow (pip install 'gpu-portal[reconcile]').
        import pyarrow  # noqa: PLC0415
        import pyarrow.compute  # noqa: PLC0415
        import pyarrow.parquet  # noqa: PLC0415
    except ImportError:
        raise BillFileError(
            _(
                "This portal cannot read Parquet: install its “reconcile” extra "
                "(pyarrow), or import the CSV."
            )
        ) from None
    try:
        parquet = pyarrow.parquet.ParquetFile(binary)
        header = list(parquet.schema_arrow.names)
        reader = _Reader(header, period=period, currency=currency, cur=True)
        wanted = sorted({*reader.columns.values(), *reader.tags.values()})
        names = [header[index] for index in wanted]
        # The reader indexes rows by the header's positions: give it rows of that width.
        reader.header = names
        reader.columns = {key: wanted.index(index) for key, index in reader.columns.items()}
        reader.tags = {key: wanted.index(index) for key, index in reader.tags.items()}
        line = 2
        for batch in parquet.iter_batches(batch_size=PARQUET_BATCH_ROWS, columns=names):
            reader.feed(
                _parquet_rows(batch, names, pyarrow.string(), pyarrow.compute.cast),
                first_line=line,
            )
            line += batch.num_rows
    except BillFileError:
        raise
    except (pyarrow.ArrowException, OSError, ValueError) as invalid:
        raise BillFileError(
            _("The file cannot be read as Parquet: %(problem)s") % {"problem": str(invalid)[:120]}
        ) from None
    return reader.bill()
