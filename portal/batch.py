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

from collections.abc import Sequence

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


def _insert_sql(obj: Model) -> tuple[str, list]:
    opts = obj._meta
    fields = [field for field in opts.concrete_fields if not field.generated]
    query = InsertQuery(type(obj))
    query.insert_values(fields, [obj])
    ((sql, params),) = query.get_compiler(connection=connection).as_sql()
    return sql, list(params)


def insert_together(objects: Sequence[Model]) -> None:
    """Insert new ``objects`` (every one with its primary key set, from ``draw_ids``) in
    one statement on PostgreSQL; elsewhere, or when a key is missing, one save each."""
    if connection.vendor != "postgresql" or any(obj.pk is None for obj in objects):
        for obj in objects:
            obj.save(force_insert=True)
        return
    statements = [_insert_sql(obj) for obj in objects]
    *first, (last_sql, last_params) = statements
    sql = (
        "WITH "
        + ", ".join(f"w{index} AS ({text})" for index, (text, _params) in enumerate(first))
        + f" {last_sql}"
        if first
        else last_sql
    )
    params = [value for _text, values in first for value in values] + last_params
    with connection.cursor() as cursor:
        cursor.execute(sql, params)
    for obj in objects:
        obj._state.adding = False
        obj._state.db = connection.alias
