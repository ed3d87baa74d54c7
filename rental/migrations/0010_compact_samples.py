"""Utilization samples and rollups stored compactly (docs/operations.md, "The samples
table"): the readings packed as fixed-width integers instead of jsonb arrays, and rows
keyed by (instance, at) and (instance, hour) without an id column or a second index.

Django cannot turn an id key into a composite one in place, so each table moves to a new
one (converted in one INSERT … SELECT on PostgreSQL, in batches elsewhere) that then
takes the old one's name. On PostgreSQL the time columns get a BRIN index (a few pages
for the whole table): the hourly rollup and the retention purges select by time across
instances. Going back drops the samples and rollups (telemetry), not the instances.
"""

import django.db.models.deletion
from django.db import migrations, models

import rental.models.packed

SAMPLE_COLUMNS = (("gpu_utilization", 100, 2), ("memory_used_mb", 1, 4))
ROLLUP_COLUMNS = (
    ("gpu_utilization_mean", 100, 2),
    ("gpu_utilization_max", 100, 2),
    ("memory_used_mb_mean", 1, 4),
)


def packed_sql(column: str, scale: int, width: int) -> str:
    """A jsonb array of numbers as the big-endian integers PackedReadingsField stores."""
    missing = 2 ** (8 * width) - 1
    number = (
        f"CASE WHEN jsonb_typeof(e.v) = 'number' THEN LEAST(GREATEST("
        f"floor((e.v)::numeric * {scale} + 0.000001), 0), {missing - 1}) ELSE {missing} END"
    )
    return (
        f"CASE WHEN jsonb_typeof({column}) = 'array' THEN COALESCE((SELECT string_agg("
        f"substring(int8send(({number})::bigint) FROM {9 - width} FOR {width}), ''::bytea "
        f"ORDER BY e.n) FROM jsonb_array_elements({column}) WITH ORDINALITY AS e(v, n)), "
        f"''::bytea) ELSE ''::bytea END"
    )


def copy_samples(apps, schema_editor) -> None:
    connection = schema_editor.connection
    if connection.vendor == "postgresql":
        values = ", ".join(
            packed_sql(f"s.{name}", scale, width) for name, scale, width in SAMPLE_COLUMNS
        )
        schema_editor.execute(
            "INSERT INTO rental_compactsample "
            "(instance_id, at, gpu_utilization, memory_used_mb, ssh_sessions) "
            f"SELECT s.instance_id, s.at, {values}, s.ssh_sessions "
            "FROM rental_utilizationsample AS s"
        )
        return
    old = apps.get_model("rental", "UtilizationSample")
    new = apps.get_model("rental", "CompactSample")
    batch = []
    for row in old.objects.order_by("pk").iterator(chunk_size=5000):
        batch.append(
            new(
                instance_id=row.instance_id,
                at=row.at,
                gpu_utilization=row.gpu_utilization or [],
                memory_used_mb=row.memory_used_mb or [],
                ssh_sessions=row.ssh_sessions,
            )
        )
        if len(batch) == 5000:
            new.objects.bulk_create(batch, ignore_conflicts=True)
            batch = []
    new.objects.bulk_create(batch, ignore_conflicts=True)


def copy_rollups(apps, schema_editor) -> None:
    connection = schema_editor.connection
    if connection.vendor == "postgresql":
        values = ", ".join(
            packed_sql(f"r.{name}", scale, width) for name, scale, width in ROLLUP_COLUMNS
        )
        schema_editor.execute(
            "INSERT INTO rental_compactrollup (instance_id, hour, samples, idle_samples, "
            "gpu_utilization_mean, gpu_utilization_max, memory_used_mb_mean) "
            f"SELECT r.instance_id, r.hour, r.samples, r.idle_samples, {values} "
            "FROM rental_utilizationrollup AS r"
        )
        return
    old = apps.get_model("rental", "UtilizationRollup")
    new = apps.get_model("rental", "CompactRollup")
    new.objects.bulk_create(
        (
            new(
                instance_id=row.instance_id,
                hour=row.hour,
                samples=row.samples,
                idle_samples=row.idle_samples,
                **{name: getattr(row, name) or [] for name, _s, _w in ROLLUP_COLUMNS},
            )
            for row in old.objects.order_by("pk").iterator(chunk_size=2000)
        ),
        batch_size=2000,
        ignore_conflicts=True,
    )


def brin_indexes(apps, schema_editor) -> None:
    if schema_editor.connection.vendor == "postgresql":
        schema_editor.execute(
            "CREATE INDEX IF NOT EXISTS utilizationsample_at_brin "
            "ON rental_utilizationsample USING brin (at) WITH (autosummarize = on)"
        )
        schema_editor.execute(
            "CREATE INDEX IF NOT EXISTS utilizationrollup_hour_brin "
            "ON rental_utilizationrollup USING brin (hour) WITH (autosummarize = on)"
        )


def drop_brin_indexes(apps, schema_editor) -> None:
    if schema_editor.connection.vendor == "postgresql":
        schema_editor.execute("DROP INDEX IF EXISTS utilizationsample_at_brin")
        schema_editor.execute("DROP INDEX IF EXISTS utilizationrollup_hour_brin")


def composite_key(*fields: str) -> models.CompositePrimaryKey:
    return models.CompositePrimaryKey(
        *fields, blank=True, editable=False, primary_key=True, serialize=False
    )


def instance_key(related_name: str) -> models.ForeignKey:
    return models.ForeignKey(
        db_index=False,
        on_delete=django.db.models.deletion.CASCADE,
        related_name=related_name,
        to="rental.instance",
    )


def packed(verbose_name: str, scale: int, width: int):
    return rental.models.packed.PackedReadingsField(
        scale=scale, width=width, verbose_name=verbose_name
    )


class Migration(migrations.Migration):
    dependencies = [
        ("rental", "0009_launch_tokens"),
    ]

    operations = [
        migrations.CreateModel(
            name="CompactSample",
            fields=[
                (
                    "pk",
                    models.CompositePrimaryKey(
                        "instance",
                        "at",
                        blank=True,
                        editable=False,
                        primary_key=True,
                        serialize=False,
                    ),
                ),
                (
                    "instance",
                    models.ForeignKey(
                        db_index=False,
                        on_delete=django.db.models.deletion.CASCADE,
                        related_name="+",
                        to="rental.instance",
                    ),
                ),
                ("at", models.DateTimeField(verbose_name="at")),
                ("gpu_utilization", packed("GPU utilization (%)", 100, 2)),
                ("memory_used_mb", packed("memory used (MB)", 1, 4)),
                (
                    "ssh_sessions",
                    models.PositiveSmallIntegerField(
                        blank=True, null=True, verbose_name="SSH sessions"
                    ),
                ),
            ],
        ),
        migrations.RunPython(copy_samples, migrations.RunPython.noop, elidable=True),
        migrations.DeleteModel(name="UtilizationSample"),
        migrations.RenameModel(old_name="CompactSample", new_name="UtilizationSample"),
        migrations.AlterField(
            model_name="utilizationsample",
            name="instance",
            field=models.ForeignKey(
                db_index=False,
                on_delete=django.db.models.deletion.CASCADE,
                related_name="samples",
                to="rental.instance",
            ),
        ),
        migrations.AlterModelOptions(
            name="utilizationsample",
            options={
                "ordering": ["instance", "at"],
                "verbose_name": "utilization sample",
                "verbose_name_plural": "utilization samples",
            },
        ),
        migrations.CreateModel(
            name="CompactRollup",
            fields=[
                ("pk", composite_key("instance", "hour")),
                ("instance", instance_key("+")),
                ("hour", models.DateTimeField(verbose_name="hour")),
                ("samples", models.PositiveSmallIntegerField(verbose_name="samples")),
                ("idle_samples", models.PositiveSmallIntegerField(verbose_name="idle samples")),
                ("gpu_utilization_mean", packed("mean GPU utilization (%)", 100, 2)),
                ("gpu_utilization_max", packed("peak GPU utilization (%)", 100, 2)),
                ("memory_used_mb_mean", packed("mean memory used (MB)", 1, 4)),
            ],
        ),
        migrations.RunPython(copy_rollups, migrations.RunPython.noop, elidable=True),
        migrations.DeleteModel(name="UtilizationRollup"),
        migrations.RenameModel(old_name="CompactRollup", new_name="UtilizationRollup"),
        migrations.AlterField(
            model_name="utilizationrollup", name="instance", field=instance_key("rollups")
        ),
        migrations.AlterModelOptions(
            name="utilizationrollup",
            options={
                "ordering": ["instance", "hour"],
                "verbose_name": "hourly utilization",
                "verbose_name_plural": "hourly utilization",
            },
        ),
        migrations.RunPython(brin_indexes, drop_brin_indexes),
    ]
