"""Helpers for the loan-model tests: submit leases at exact times on fixture F0."""

from datetime import UTC, datetime

import pytest

from rental.loans import admission


def at(hhmmss: str, day: int = 6) -> datetime:
    """A time on Monday 2026-04-06 (UTC), e.g. at("11:02:00")."""
    h, m, *s = (int(part) for part in hhmmss.split(":"))
    return datetime(2026, 4, day, h, m, s[0] if s else 0, tzinfo=UTC)


@pytest.fixture
def lease(f0):
    def submit(project, gpus, when, *, priority="experiment", market="on_demand", **kwargs):
        return admission.submit_reservation(
            actor=f0.engineer_of(project),
            project=project,
            gpu_model=f0.model,
            gpu_count=gpus,
            duration_hours=kwargs.pop("hours", 8),
            priority=priority,
            market=market,
            now=when,
            **kwargs,
        )

    return submit
