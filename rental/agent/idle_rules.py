"""Idle counting (L6), pure: which samples are idle, the consecutive-idle count after each,
and the events (warn, alert the manager, reap) the counts reach. No rows, no messages:
``rental.agent.idle`` acts on what this decides.

A sample is idle when every GPU is below the threshold (and, when the site policy says
so, nobody is connected). A sample without GPU readings is missing: it neither counts
nor resets. An active sample resets the count to zero.
"""

from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from datetime import datetime


@dataclass(frozen=True)
class IdleSample:
    at: datetime
    gpu_utilization: Sequence[float]
    ssh_sessions: int | None = None


@dataclass(frozen=True)
class IdlePolicy:
    threshold_percent: float = 5
    require_nobody_connected: bool = False
    warn: int = 20
    reap: int | None = 30
    alert_manager: int | None = None


IDLE, ACTIVE, MISSING = "idle", "active", "missing"


def classify(sample: IdleSample, policy: IdlePolicy) -> str:
    if not sample.gpu_utilization:
        return MISSING
    if any(value >= policy.threshold_percent for value in sample.gpu_utilization):
        return ACTIVE
    if policy.require_nobody_connected:
        if sample.ssh_sessions is None:
            return MISSING
        if sample.ssh_sessions > 0:
            return ACTIVE
    return IDLE


def idle_counts(samples: Iterable[IdleSample], policy: IdlePolicy, *, start: int = 0) -> list[int]:
    """The consecutive-idle count after each sample, in order, starting from ``start``."""
    counts = []
    count = start
    for sample in samples:
        kind = classify(sample, policy)
        if kind == IDLE:
            count += 1
        elif kind == ACTIVE:
            count = 0
        counts.append(count)
    return counts


@dataclass(frozen=True)
class IdleEvent:
    at: datetime
    action: str  # "warn" | "reap" | "alert_manager"
    count: int


def idle_events(
    samples: Sequence[IdleSample], policy: IdlePolicy, *, start: int = 0
) -> list[IdleEvent]:
    """What happens at which sample: a warning the first time the count reaches ``warn``,
    the reaping when it reaches ``reap``, the manager's alert at ``alert_manager``. Nothing
    follows a reaping."""
    events = []
    before = start
    for sample, count in zip(samples, idle_counts(samples, policy, start=start), strict=True):
        for action, limit in (
            ("warn", policy.warn),
            ("alert_manager", policy.alert_manager),
            ("reap", policy.reap),
        ):
            if limit is not None and before < limit <= count:
                events.append(IdleEvent(at=sample.at, action=action, count=count))
        if policy.reap is not None and count >= policy.reap:
            break
        before = count
    return events
