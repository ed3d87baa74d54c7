"""The samples table stored compactly: readings packed as fixed-width integers that read
back as the lists the chart, idle counting and reports use, and the migration that
converts rows stored as jsonb."""

from datetime import UTC, datetime, timedelta

import pytest
from django.db import connection
from django.db.migrations.executor import MigrationExecutor

from rental.agent.idle_rules import IDLE, IdlePolicy, IdleSample, classify
from rental.models import UtilizationRollup, UtilizationSample
from rental.models.packed import PackedReadingsField
from tests.rental.agent.conftest import running_lease

NOW = datetime(2026, 4, 20, 12, 5, tzinfo=UTC)


def test_it_reads_back_what_it_packs_to_the_hundredth_of_a_percent():
    field = PackedReadingsField(scale=100, width=2)
    values = [0.0, 0.29, 4.99, 5.0, 87.5, 100.0, None]
    assert field.unpack(field.pack(values)) == values
    assert len(field.pack(values)) == 2 * len(values)
    memory = PackedReadingsField(scale=1, width=4)
    assert memory.unpack(memory.pack([0, 40960.0, 143771, 10_000_000, None])) == [
        0,
        40960,
        143771,
        10_000_000,
        None,
    ]


def test_a_reading_just_below_the_threshold_stays_idle():
    # Floored, never rounded up: 4.999 % is stored as 4.99 %, below a 5 % threshold.
    field = PackedReadingsField(scale=100, width=2)
    [stored] = field.unpack(field.pack([4.999]))
    policy = IdlePolicy(threshold_percent=5)
    assert classify(IdleSample(at=NOW, gpu_utilization=[stored]), policy) == IDLE


def test_a_sample_row_is_keyed_by_instance_and_time_and_packed(f0):
    run = running_lease(f0, since=NOW - timedelta(hours=1))
    UtilizationSample.objects.create(
        instance=run.instance,
        at=NOW,
        gpu_utilization=[87.0, 3.5, 100.0, 0.0],
        memory_used_mb=[40960.0, 1024.0, 81920.0, 0.0],
        ssh_sessions=1,
    )
    with connection.cursor() as cursor:
        cursor.execute(
            "SELECT octet_length(gpu_utilization), octet_length(memory_used_mb) "
            "FROM rental_utilizationsample"
        )
        assert cursor.fetchone() == (8, 16)
        cursor.execute(
            "SELECT column_name FROM information_schema.columns "
            "WHERE table_name = 'rental_utilizationsample' ORDER BY ordinal_position"
        )
        columns = [name for (name,) in cursor.fetchall()]
    assert "id" not in columns
    [row] = UtilizationSample.objects.filter(instance=run.instance).values_list(
        "gpu_utilization", "memory_used_mb"
    )
    assert row == ([87.0, 3.5, 100.0, 0.0], [40960, 1024, 81920, 0])


@pytest.mark.django_db(transaction=True)
def test_the_migration_converts_jsonb_rows(f0):
    run = running_lease(f0, since=NOW - timedelta(hours=1))
    executor = MigrationExecutor(connection)
    executor.migrate([("rental", "0009_launch_tokens")])
    with connection.cursor() as cursor:
        cursor.executemany(
            "INSERT INTO rental_utilizationsample "
            "(instance_id, at, gpu_utilization, memory_used_mb, ssh_sessions) "
            "VALUES (%s, %s, %s::jsonb, %s::jsonb, %s)",
            [
                (run.instance.pk, NOW, "[87.0, 4.999, 0.29]", "[40960.0, 0, 81920.5]", 2),
                (run.instance.pk, NOW + timedelta(minutes=1), "[]", "[]", None),
                (run.instance.pk, NOW + timedelta(minutes=2), "[12, null]", "[5]", 0),
            ],
        )
        cursor.execute(
            "INSERT INTO rental_utilizationrollup (instance_id, hour, samples, idle_samples, "
            "gpu_utilization_mean, gpu_utilization_max, memory_used_mb_mean) "
            "VALUES (%s, %s, 60, 5, '[29.5, null]', '[59.0, 80]', '[1500.7, 3000]')",
            [run.instance.pk, NOW.replace(minute=0)],
        )
    executor = MigrationExecutor(connection)
    executor.loader.build_graph()
    executor.migrate(executor.loader.graph.leaf_nodes())

    rows = list(
        UtilizationSample.objects.order_by("at").values_list(
            "at", "gpu_utilization", "memory_used_mb", "ssh_sessions"
        )
    )
    assert rows == [
        (NOW, [87.0, 4.99, 0.29], [40960, 0, 81920], 2),
        (NOW + timedelta(minutes=1), [], [], None),
        (NOW + timedelta(minutes=2), [12.0, None], [5], 0),
    ]
    rollup = UtilizationRollup.objects.get()
    assert (rollup.samples, rollup.idle_samples) == (60, 5)
    assert rollup.gpu_utilization_mean == [29.5, None]
    assert rollup.gpu_utilization_max == [59.0, 80.0]
    assert rollup.memory_used_mb_mean == [1500, 3000]
    with connection.cursor() as cursor:
        cursor.execute(
            "SELECT indexdef FROM pg_indexes WHERE tablename = 'rental_utilizationsample'"
        )
        indexes = [definition for (definition,) in cursor.fetchall()]
    assert len(indexes) == 2  # the (instance_id, at) key and the BRIN on at, nothing else
    assert any("USING brin (at)" in definition for definition in indexes)
