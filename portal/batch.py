"""Writing several new rows of different models in one statement.

A writer that holds a contended lock (the pool row during an admission) pays one round
trip to the database per statement while everyone else waits. ``insert_together``
writes rows of several models in one statement on PostgreSQL (data-modifying ``WITH``
clauses: Django's foreign keys are deferred to the commit, so the rows may refer to
each other); their primary keys are drawn beforehand with ``draw_ids``, outside the
lock. Each row's INSERT is compiled by Django itself, so defaults, ``auto_now`` fields
and field conversions are exactly what ``save()`` would write. Elsewhere (SQLite in the
demo) each row is saved in turn.
"""

from collections.abc import Iterable, Sequence
from dataclasses import dataclass

from django.db import connection
from django.db.models import Model
from django.db.models.sql import InsertQuery


def draw_ids(*wanted: tuple[type[Model], int]) -> list[list[int]]:
    """Fresh primary keys, ``count`` for each ``(model, count)``, in one statement on
    PostgreSQL; empty lists elsewhere. Keys drawn and not used leave gaps, as a
    rolled-back insert does."""
    if connection.vendor != "postgresql" or not wanted:
        return [[] for _wanted in wanted]
    draw = "ARRAY(SELECT nextval(pg_get_serial_sequence(%s, %s)) FROM generate_series(1, %s))"
    params: list[object] = []
    for model, count in wanted:
        params += [model._meta.db_table, model._meta.pk.column, count]
    with connection.cursor() as cursor:
        cursor.execute("SELECT " + ", ".join(draw for _wanted in wanted), params)
        return [list(ids) for ids in cursor.fetchone()]


def _fields(obj: Model) -> list:
    return [field for field in obj._meta.concrete_fields if not field.generated]


# The INSERT text per model: the same for every row of a model whose values are plain
# (no expression, no field with a placeholder of its own), so Django compiles it once per
# process and each row only has its values prepared.
_TEXTS: dict[tuple[str, type[Model]], str] = {}


def _plain(fields: list) -> bool:
    return not any(hasattr(field, "get_placeholder") for field in fields)


def _insert_sql(obj: Model) -> tuple[str, list]:
    fields = _fields(obj)
    query = InsertQuery(type(obj))
    query.insert_values(fields, [obj])
    compiler = query.get_compiler(connection=connection)
    key = (connection.alias, type(obj))
    text = _TEXTS.get(key)
    if text is not None:
        values = [compiler.prepare_value(f, compiler.pre_save_val(f, obj)) for f in fields]
        if not any(hasattr(value, "as_sql") for value in values):
            return text, values
    ((text, params),) = compiler.as_sql()
    if len(params) == len(fields) and _plain(fields):
        _TEXTS[key] = text
    return text, list(params)


@dataclass
class PreparedInsert:
    """New rows compiled into one INSERT ahead of time (before a lock is taken); fields
    that change afterwards are named to ``run``, which puts their new values in."""

    objects: list[Model]
    sql: str
    params: list
    slots: dict[tuple[int, str], int]  # (id(obj), attname) -> index in params

    def run(self, changed: Iterable[tuple[Model, str]] = ()) -> None:
        for obj, attname in changed:
            field = obj._meta.get_field(attname)
            value = field.get_db_prep_save(getattr(obj, field.attname), connection)
            self.params[self.slots[id(obj), field.attname]] = value
        with connection.cursor() as cursor:
            cursor.execute(self.sql, self.params)
        for obj in self.objects:
            obj._state.adding = False
            obj._state.db = connection.alias


def prepare_insert(objects: Sequence[Model]) -> PreparedInsert | None:
    """``objects`` (new, each with its primary key from ``draw_ids``) as one INSERT on
    PostgreSQL (data-modifying ``WITH`` clauses); None elsewhere or when a key is
    missing, and the caller saves them one by one."""
    if connection.vendor != "postgresql" or any(obj.pk is None for obj in objects):
        return None
    texts: list[str] = []
    params: list = []
    slots: dict[tuple[int, str], int] = {}
    for obj in objects:
        text, values = _insert_sql(obj)
        fields = _fields(obj)
        if len(values) != len(fields):  # a field written as an expression: nothing to slot
            return None
        for offset, field in enumerate(fields):
            slots[id(obj), field.attname] = len(params) + offset
        texts.append(text)
        params += values
    *first, last = texts
    sql = "WITH " + ", ".join(f"w{i} AS ({t})" for i, t in enumerate(first)) + f" {last}"
    return PreparedInsert(list(objects), sql if first else last, params, slots)


def insert_together(objects: Sequence[Model]) -> None:
    """Insert new ``objects`` (every one with its primary key set, from ``draw_ids``) in
    one statement on PostgreSQL; elsewhere, or when a key is missing, one save each."""
    prepared = prepare_insert(objects)
    if prepared is None:
        for obj in objects:
            obj.save(force_insert=True)
        return
    prepared.run()
