"""A written-out statement's row becomes the model instance the ORM would make: columns
named in any order, the others deferred, and a date without its time zone (SQLite's, for
plain SQL) put back in UTC."""

from datetime import UTC, datetime

import pytest

from portal.models import Project
from portal.sql_rows import instance


def test_the_columns_may_come_in_any_order_and_the_rest_are_deferred():
    made = instance(Project, ["name", "id", "slug"], ["Alpha", 7, "alpha"])
    assert (made.pk, made.slug, made.name) == (7, "alpha", "Alpha")
    assert made.get_deferred_fields() == {"cost_center", "is_active", "created_at"}
    assert not made._state.adding


def test_a_date_without_its_time_zone_is_in_utc_and_one_with_it_is_kept():
    naive = instance(Project, ["id", "created_at"], [1, datetime(2026, 12, 5, 9, 30)])
    assert naive.created_at == datetime(2026, 12, 5, 9, 30, tzinfo=UTC)
    aware = datetime(2026, 12, 5, 9, 30, tzinfo=UTC)
    assert instance(Project, ["id", "created_at"], [1, aware]).created_at is aware


def test_the_instance_is_the_default_databases_like_the_orms():
    assert instance(Project, ("id",), (3,))._state.db == Project.objects.db


def test_a_row_that_does_not_match_its_names_is_refused():
    with pytest.raises(ValueError, match="2 values for 3 columns"):
        instance(Project, ("id", "slug", "name"), (1, "alpha"))
    with pytest.raises(ValueError, match="named twice"):
        instance(Project, ("id", "slug", "id"), (1, "alpha", 1))
