"""Room on rental_instance's pages for the heartbeat's update of its row.

Every instance's row is written once a minute by its heartbeat (the throttle window, the
last sample, the last report). None of those columns is indexed, so PostgreSQL can keep
the new row version on the same page without touching the table's nine indexes (a HOT
update), but only if the page has room: at the default fill factor (100) a page is full
after the launch writes. 70 % leaves a quarter of each page for it; pages written before
this take it up as they are rewritten (VACUUM FULL or pg_repack applies it at once).
"""

from django.db import migrations


def set_fillfactor(apps, schema_editor) -> None:
    if schema_editor.connection.vendor == "postgresql":
        schema_editor.execute("ALTER TABLE rental_instance SET (fillfactor = 70)")


def reset_fillfactor(apps, schema_editor) -> None:
    if schema_editor.connection.vendor == "postgresql":
        schema_editor.execute("ALTER TABLE rental_instance RESET (fillfactor)")


class Migration(migrations.Migration):
    dependencies = [
        ("rental", "0010_compact_samples"),
    ]

    operations = [migrations.RunPython(set_fillfactor, reset_fillfactor)]
