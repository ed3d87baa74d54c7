"""The database's sum of billed seconds (PostgreSQL) equals the row-by-row rule exactly."""

import random
from datetime import timedelta

import pytest
from django.db import connection

from billing.periods import GROUP_FIELDS
from billing.statements import compute_period
from rental.models import UsageRecord
from tests.billing.helpers import at, lease, run

REASONS = ["user", "lease_end", "idle", "preempted", "spot_interrupted", "provider"]


def signature(computed):
    return {
        project_id: [(line.kind, line.tier, line.gpu_seconds, line.amount) for line in lines]
        for project_id, lines in computed.lines.items()
    }


@pytest.mark.parametrize("seed", [1, 2, 3])
def test_the_aggregate_matches_the_rule_on_awkward_runs(f0, seed):
    rng = random.Random(seed)
    leases = [
        lease(f0, project, tier=tier)
        for project in (f0.alpha, f0.beta, f0.gamma)
        for tier in ("guaranteed", "burst", "spot")
    ]
    boundary = at(2026, 5, 1)
    for index in range(150):
        start = boundary + timedelta(microseconds=rng.randint(-3 * 10**9, 10**9))
        length = rng.choice([0, 1, 59, 60, 61, 3600, 7200]) + rng.random() * 2
        open_run = index % 17 == 0
        run(
            rng.choice(leases),
            start=start,
            end=None if open_run else start + timedelta(seconds=length),
            gpus=rng.randint(1, 4),
            rate=rng.choice(["2.50", "1.00", "3.333333"]),
            reason=rng.choice(REASONS),
        )
    for now in (boundary + timedelta(seconds=30), boundary + timedelta(days=3)):
        for period in (at(2026, 4, 1), at(2026, 5, 1)):
            in_db = compute_period(period=period, now=now, in_database=True)
            by_row = compute_period(period=period, now=now, in_database=False)
            assert signature(in_db) == signature(by_row)
            assert in_db.total() == by_row.total()


@pytest.mark.django_db
def test_postgresql_knows_how_many_groups_the_months_usage_makes():
    """The bill's aggregate groups runs by GROUP_FIELDS; PostgreSQL estimates its groups
    from statistics on exactly those columns (rental migration 0026), or it expects
    hundreds of thousands and sorts the month instead of hashing it."""
    with connection.cursor() as cursor:
        cursor.execute(
            "SELECT a.attname FROM pg_statistic_ext s "
            "JOIN pg_attribute a ON a.attrelid = s.stxrelid AND a.attnum = ANY(s.stxkeys) "
            "WHERE s.stxname = 'usage_billing_groups' AND 'd' = ANY(s.stxkind)"
        )
        columns = {name for (name,) in cursor.fetchall()}
    assert columns == {
        UsageRecord._meta.get_field(f.removesuffix("_id")).column for f in GROUP_FIELDS
    }
