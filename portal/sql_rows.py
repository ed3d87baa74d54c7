"""A written-out statement's columns, and model instances from its rows.

``Model.from_db`` is the ORM's own way in for a row: it takes the values of the columns
read, in the model's order, and defers the others. Two things the ORM's converters do
are done here: the columns may be named in any order, and SQLite (the demo), which hands
plain SQL its dates without their time zone, has them put back in UTC, where Django
stores them. PostgreSQL's come with theirs.
"""

from collections.abc import Sequence
from datetime import UTC, datetime
from functools import cache
from typing import Any

from django.db import DEFAULT_DB_ALIAS, connection
from django.db.models import DateTimeField, Model


@cache
def _order(model: type[Model]) -> tuple[tuple[str, ...], frozenset[str]]:
    """The model's columns in its order, and those that hold a date and time."""
    fields = model._meta.concrete_fields
    dates = frozenset(field.attname for field in fields if isinstance(field, DateTimeField))
    return tuple(field.attname for field in fields), dates


@cache
def _plan(
    model: type[Model], names: tuple[str, ...]
) -> tuple[tuple[str, ...], tuple[int, ...], tuple[int, ...]]:
    """For a row of ``names``: the columns read in the model's order, where each is in
    the row, and which of them (by place in the model's order) hold a date and time."""
    order, dates = _order(model)
    place = {name: at for at, name in enumerate(names)}
    if len(place) != len(names):
        raise ValueError(f"{model.__name__}: a column is named twice in {names}")
    read = tuple(name for name in order if name in place)
    return (
        read,
        tuple(place[name] for name in read),
        tuple(at for at, name in enumerate(read) if name in dates),
    )


def instance(model: type[Model], names: Sequence[str], values: Sequence[Any]) -> Any:
    """An instance of ``model`` with the columns ``names`` read as ``values``, the
    others deferred (reading one later costs a query)."""
    names = tuple(names)
    if len(values) != len(names):
        raise ValueError(f"{model.__name__}: {len(values)} values for {len(names)} columns")
    read, places, date_places = _plan(model, names)
    row = [values[at] for at in places]
    for at in date_places:
        value = row[at]
        if isinstance(value, datetime) and value.tzinfo is None:
            row[at] = value.replace(tzinfo=UTC)
    # ``connection`` is the default database's: its alias, without asking the proxy.
    return model.from_db(DEFAULT_DB_ALIAS, read, row)


def columns(model: type[Model]) -> tuple[str, ...]:
    """The model's columns as ``instance`` names them (attribute names), in its order."""
    return _order(model)[0]


def select_list(alias: str, model: type[Model]) -> str:
    """Every column of ``model`` under the table's ``alias``, quoted, in ``columns``'s
    order: ``p."id", p."slug", ...``."""
    quote = connection.ops.quote_name
    return ", ".join(f"{alias}.{quote(field.column)}" for field in model._meta.concrete_fields)


def written_out() -> bool:
    """Whether written-out statements are read here: on PostgreSQL. Elsewhere (the demo's
    SQLite, which hands plain SQL its decimals as floats) a module reads through the ORM
    query it keeps beside its statement."""
    return connection.vendor == "postgresql"
