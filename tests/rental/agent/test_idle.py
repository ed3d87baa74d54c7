"""Idle counting (L6) as a pure function: scenario 7's three variants and production,
and the same rule with other numbers."""

from datetime import UTC, datetime, timedelta

import pytest

from rental.agent.idle_rules import IdlePolicy, IdleSample, classify, idle_counts, idle_events

T = datetime(2026, 4, 6, 10, 0, tzinfo=UTC)
LEARNING = IdlePolicy(threshold_percent=5, warn=20, reap=30)
EXPERIMENT = IdlePolicy(threshold_percent=5, warn=20, reap=60)
PRODUCTION = IdlePolicy(threshold_percent=5, warn=20, reap=None, alert_manager=60)


def at(hh_mm: str) -> datetime:
    hours, minutes = (int(part) for part in hh_mm.split(":"))
    return T.replace(hour=hours, minute=minutes)


def scenario(*, active_at=(), missing=(), until="11:30") -> list[IdleSample]:
    """Active at 10:00 (and at ``active_at``), below 3 % on every GPU after, one sample a
    minute, with the minutes in ``missing`` absent."""
    samples, moment = [], at("10:00")
    while moment <= at(until):
        label = f"{moment:%H:%M}"
        if label not in missing:
            busy = moment == at("10:00") or label in active_at
            samples.append(IdleSample(at=moment, gpu_utilization=[50.0] if busy else [2.0, 3.0]))
        moment += timedelta(minutes=1)
    return samples


def events(samples, policy):
    return [(f"{e.at:%H:%M}", e.action) for e in idle_events(samples, policy)]


def test_it_warns_at_1020_and_reaps_at_1030():
    assert events(scenario(), LEARNING) == [("10:20", "warn"), ("10:30", "reap")]


def test_it_moves_both_when_a_50_percent_sample_arrives_at_1020():
    assert events(scenario(active_at={"10:20"}), LEARNING) == [
        ("10:40", "warn"),
        ("10:50", "reap"),
    ]


def test_it_neither_counts_nor_resets_missing_samples():
    missing = {f"10:{m:02d}" for m in range(5, 16)}
    assert events(scenario(missing=missing), LEARNING) == [("10:31", "warn"), ("10:41", "reap")]


def test_it_never_reaps_production_and_alerts_the_manager():
    assert events(scenario(until="12:30"), PRODUCTION) == [
        ("10:20", "warn"),
        ("11:00", "alert_manager"),
    ]


def test_it_reaps_experiment_at_sixty():
    assert events(scenario(), EXPERIMENT) == [("10:20", "warn"), ("11:00", "reap")]


def test_it_uses_the_site_numbers():
    policy = IdlePolicy(threshold_percent=10, warn=3, reap=5)
    samples = [IdleSample(at=at(f"10:{m:02d}"), gpu_utilization=[9.9]) for m in range(10)]
    assert events(samples, policy) == [("10:02", "warn"), ("10:04", "reap")]
    # 10 % is not below 10 %: active.
    assert classify(IdleSample(at=T, gpu_utilization=[9.0, 10.0]), policy) == "active"


def test_it_is_busy_when_any_gpu_is_busy():
    counts = idle_counts(
        [
            IdleSample(at=at("10:01"), gpu_utilization=[0.0, 0.0]),
            IdleSample(at=at("10:02"), gpu_utilization=[0.0, 80.0]),
            IdleSample(at=at("10:03"), gpu_utilization=[]),  # nvidia-smi unreadable: missing
            IdleSample(at=at("10:04"), gpu_utilization=[1.0, 1.0]),
        ],
        LEARNING,
    )
    assert counts == [1, 0, 0, 1]


@pytest.mark.parametrize(("sessions", "expected"), [(0, "idle"), (2, "active"), (None, "missing")])
def test_it_counts_connected_people_when_the_policy_says_so(sessions, expected):
    policy = IdlePolicy(require_nobody_connected=True)
    sample = IdleSample(at=T, gpu_utilization=[0.0], ssh_sessions=sessions)
    assert classify(sample, policy) == expected
    assert classify(sample, IdlePolicy()) == "idle"


def test_it_continues_from_a_previous_count():
    samples = [IdleSample(at=at(f"10:{m:02d}"), gpu_utilization=[0.0]) for m in range(3)]
    assert [e.count for e in idle_events(samples, LEARNING, start=28)] == [30]
    assert idle_events(samples, LEARNING, start=18)[0].action == "warn"
