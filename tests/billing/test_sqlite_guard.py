"""The demo runs on SQLite: the same migration installs an equivalent guard there."""

import importlib
import sqlite3

import pytest

migration = importlib.import_module("billing.migrations.0002_billing")


def test_sqlite_refuses_to_change_or_delete_a_closed_line():
    db = sqlite3.connect(":memory:")
    db.execute(
        "CREATE TABLE billing_statementline (id INTEGER PRIMARY KEY, amount TEXT, locked BOOL)"
    )
    for statement in migration.SQLITE_GUARD:
        db.execute(statement)
    db.execute("INSERT INTO billing_statementline VALUES (1, '10.00', 1), (2, '5.00', 0)")
    with pytest.raises(sqlite3.IntegrityError):
        db.execute("UPDATE billing_statementline SET amount = '0.00' WHERE id = 1")
    with pytest.raises(sqlite3.IntegrityError):
        db.execute("DELETE FROM billing_statementline WHERE id = 1")
    db.execute("UPDATE billing_statementline SET amount = '6.00', locked = 1 WHERE id = 2")
    assert db.execute(
        "SELECT amount, locked FROM billing_statementline ORDER BY id"
    ).fetchall() == [
        ("10.00", 1),
        ("6.00", 1),
    ]
