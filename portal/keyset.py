"""Pages of a long list, newest first, that read only the rows they show (keyset
pagination): a page starts after or before a row's key, a *cursor*, not at an offset, so
the last page of 200,000 rows costs what the first does, and no page counts the rows.

The list is ordered by a moment and the row's id, both descending (an index on the two
in that order serves it). A page is asked for with ``after=<cursor>`` (the older rows
after that row), ``before=<cursor>`` (the newer rows before it) or ``page=last`` (the
oldest rows); anything else is the first, newest page. A cursor is the moment in
microseconds since the epoch and the id, ``<micros>-<id>``; a malformed one is the
first page.
"""

from collections.abc import Iterator
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from typing import Any

from django.db.models import Model, Q, QuerySet
from django.http import QueryDict

EPOCH = datetime(1970, 1, 1, tzinfo=UTC)
MICROSECOND = timedelta(microseconds=1)
# The query parameters a page is asked with, dropped from the links to another page.
PAGE_PARAMETERS = ("after", "before", "page")


@dataclass(frozen=True)
class KeysetPage:
    """The rows of one page, newest first, and whether there are newer or older rows."""

    rows: list[Any]
    has_previous: bool  # newer rows exist
    has_next: bool  # older rows exist
    moment: str  # the field rows are ordered by

    def __iter__(self) -> Iterator[Any]:
        return iter(self.rows)

    def __len__(self) -> int:
        return len(self.rows)

    def __bool__(self) -> bool:
        return bool(self.rows)

    @property
    def has_other_pages(self) -> bool:
        return self.has_previous or self.has_next

    @property
    def previous_cursor(self) -> str:
        """Where the newer page ends: before the first row shown."""
        return cursor_of(self.rows[0], self.moment) if self.rows else ""

    @property
    def next_cursor(self) -> str:
        """Where the older page starts: after the last row shown."""
        return cursor_of(self.rows[-1], self.moment) if self.rows else ""


def cursor_of(row: Model, moment: str) -> str:
    micros = (getattr(row, moment) - EPOCH) // MICROSECOND
    return f"{micros}-{row.pk}"


def parse_cursor(text: str) -> tuple[datetime, int] | None:
    micros, _dash, pk = text.partition("-")
    if not (micros.isascii() and micros.isdigit() and pk.isascii() and pk.isdigit()):
        return None
    if len(micros) > 17 or len(pk) > 18:  # beyond year 5000, or beyond a bigint
        return None
    return EPOCH + int(micros) * MICROSECOND, int(pk)


def keyset_page(
    rows: QuerySet[Any],
    params: QueryDict,
    *,
    size: int,
    moment: str,
    split: tuple[str, list[Any]] | None = None,
) -> KeysetPage:
    """The page of ``rows`` that ``params`` asks for (see the module), ordered by
    ``moment`` then id, newest first; one query (two when a newer page is asked for and
    fewer than ``size`` rows are newer: then the first page is shown).

    ``split``: a field and its values (a person's few projects), when an index on that
    field then the moment serves each value but none serves them together: each value's
    rows are taken apart through it, and the page is the newest of them (still one
    query, reading ``size + 1`` rows per value)."""
    newest, oldest = (f"-{moment}", "-pk"), (moment, "pk")
    after = parse_cursor(params.get("after", ""))
    before = parse_cursor(params.get("before", ""))
    if after is not None:
        at, pk = after
        older = rows.filter(**{f"{moment}__lte": at}).filter(
            Q(**{f"{moment}__lt": at}) | Q(pk__lt=pk)
        )
        found = _take(older, newest, size + 1, split)
        return KeysetPage(found[:size], True, len(found) > size, moment)
    if before is not None:
        at, pk = before
        newer = rows.filter(**{f"{moment}__gte": at}).filter(
            Q(**{f"{moment}__gt": at}) | Q(pk__gt=pk)
        )
        found = _take(newer, oldest, size + 1, split)
        if len(found) > size:
            return KeysetPage(found[size - 1 :: -1], True, True, moment)
    elif params.get("page") == "last":
        found = _take(rows, oldest, size + 1, split)
        return KeysetPage(found[size - 1 :: -1], len(found) > size, False, moment)
    found = _take(rows, newest, size + 1, split)
    return KeysetPage(found[:size], False, len(found) > size, moment)


def _take(
    rows: QuerySet[Any], order: tuple[str, str], count: int, split: tuple[str, list[Any]] | None
) -> list[Any]:
    """The first ``count`` of ``rows`` in ``order``; with ``split``, the first ``count``
    of each value's, merged."""
    if split is not None:
        field, values = split
        keys = rows.select_related(None).prefetch_related(None).order_by(*order).values("pk")
        parts = [keys.filter(**{field: value})[:count] for value in values]
        rows = rows.filter(pk__in=parts[0].union(*parts[1:], all=True))
    return list(rows.order_by(*order)[:count])
