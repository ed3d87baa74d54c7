"""Raw samples are rolled up hourly and deleted past the retention window."""

from datetime import UTC, datetime, timedelta

from hypothesis import given
from hypothesis import strategies as st

from rental.agent import samples
from rental.agent.idle_rules import IDLE, IdlePolicy, IdleSample, classify
from rental.models import UtilizationRollup, UtilizationSample
from rental.models.agent import rollup
from tests.rental.agent.conftest import running_lease

NOW = datetime(2026, 4, 20, 12, 5, tzinfo=UTC)


def test_it_rolls_up_an_hour_per_gpu():
    rolled = rollup(
        [([0.0, 80.0], [1000.0, 3000.0]), ([4.0, 100.0], [2000.0, 3000.0]), ([], [])],
        threshold=5,
    )
    assert rolled == {
        "samples": 3,
        "idle_samples": 0,
        "gpu_utilization_mean": [2.0, 90.0],
        "gpu_utilization_max": [4.0, 100.0],
        "memory_used_mb_mean": [1500.0, 3000.0],
    }
    assert rollup([([1.0], [0.0]), ([6.0], [0.0])], threshold=5)["idle_samples"] == 1


readings = st.lists(st.floats(min_value=0, max_value=100, allow_nan=False), max_size=4)


@given(st.lists(readings, max_size=12), st.floats(min_value=0.5, max_value=50))
def test_it_counts_idle_samples_as_the_idle_rule_does(utilizations, threshold):
    # The rollup lives beside its model (billing reads it); its idle count must stay L6's.
    policy = IdlePolicy(threshold_percent=threshold)
    idle = sum(
        classify(IdleSample(at=NOW, gpu_utilization=u), policy) == IDLE for u in utilizations
    )
    rolled = rollup([(u, []) for u in utilizations], threshold=threshold)
    assert rolled["idle_samples"] == idle


def test_it_keeps_rollups_and_drops_raw_samples_past_retention(f0, settings):
    settings.PORTAL_SAMPLE_RETENTION_DAYS = 14
    run = running_lease(f0, since=NOW - timedelta(days=20))
    old = NOW.replace(minute=0) - timedelta(days=15)
    recent = NOW.replace(minute=0) - timedelta(hours=1)
    UtilizationSample.objects.bulk_create(
        UtilizationSample(
            instance=run.instance,
            at=base + timedelta(minutes=m),
            gpu_utilization=[float(m)],
            memory_used_mb=[100.0],
        )
        for base in (old, recent)
        for m in range(60)
    )

    assert samples.roll_up_hours(now=old + timedelta(hours=1, minutes=1), hours=1) == 1
    assert samples.roll_up_hours(now=NOW) == 1
    assert samples.roll_up_hours(now=NOW) == 1  # rewriting, not duplicating
    deleted = samples.purge_samples(now=NOW)

    assert deleted == 60
    assert UtilizationSample.objects.filter(at__lt=recent).count() == 0
    assert UtilizationSample.objects.count() == 60
    hours = list(UtilizationRollup.objects.order_by("hour"))
    assert [h.hour for h in hours] == [old, recent]
    assert hours[1].samples == 60
    assert hours[1].gpu_utilization_mean == [29.5]
    assert hours[1].gpu_utilization_max == [59.0]
    assert hours[1].idle_samples == 5


def test_it_drops_rollups_past_their_own_longer_retention(f0, settings):
    settings.PORTAL_SAMPLE_RETENTION_DAYS = 7
    settings.PORTAL_ROLLUP_RETENTION_DAYS = 400
    run = running_lease(f0, since=NOW - timedelta(days=500))
    hour = NOW.replace(minute=0)
    UtilizationRollup.objects.bulk_create(
        UtilizationRollup(
            instance=run.instance,
            hour=hour - timedelta(days=days),
            samples=60,
            idle_samples=0,
            gpu_utilization_mean=[50.0],
            gpu_utilization_max=[90.0],
            memory_used_mb_mean=[1000],
        )
        for days in (8, 399, 401)
    )
    samples.purge_samples(now=NOW)
    kept = sorted((hour - h).days for h in UtilizationRollup.objects.values_list("hour", flat=True))
    assert kept == [8, 399]  # raw samples' 7 days do not touch the rollups
