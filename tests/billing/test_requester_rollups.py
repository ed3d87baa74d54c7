"""Spend per requester from the requester rollups plus the runs not rolled up is the spend
from every run; the minute's refresh keeps it with the draft lines, and the statement page
reads it from there."""

import random
from collections import defaultdict
from datetime import timedelta
from decimal import Decimal

import pytest
from django.db import connection
from django.test.utils import CaptureQueriesContext
from django.utils import timezone

from billing import drafts, rollups, spend
from billing.models import RequesterRollup
from billing.money import quantize
from billing.periods import period_start
from billing.requesters import spend_by_project, spend_per_requester
from billing.selectors import intervals
from rental.models import UsageRecord
from tests.billing.helpers import at, lease, run

MAY = at(2026, 5, 1)
PERIODS = (at(2026, 4, 1), MAY, at(2026, 6, 1), at(2026, 7, 1))


def people_runs(f0, rng, count, *, around=MAY):
    """Runs of several requesters in each project, at several rates, around a month's start
    (short ones owe the minimum; some still running; some over three months)."""
    people = (f0.alice, f0.bob, f0.gary, f0.alpha_manager)
    leases = [
        lease(f0, project, tier=tier, requester=who)
        for project in (f0.alpha, f0.beta, f0.gamma)
        for tier in ("guaranteed", "burst")
        for who in people
    ]
    for index in range(count):
        start = around + timedelta(microseconds=rng.randint(-3 * 10**9, 10**9))
        length = rng.choice([0, 1, 59, 61, 3600, 7200, 70 * 86400]) + rng.random() * 2
        run(
            rng.choice(leases),
            start=start,
            end=None if index % 11 == 0 else start + timedelta(seconds=length),
            gpus=rng.randint(1, 4),
            rate=rng.choice(["2.50", "1.00", "3.333333"]),
            reason=rng.choice(["user", "lease_end", "preempted", "idle"]),
        )


def from_each_run(project_id, period, now):
    """The figure the old way: every interval of the project's month, priced one by one."""
    seconds, exact = defaultdict(int), defaultdict(Decimal)
    for interval in intervals(project_id=project_id, period=period, now=now):
        seconds[interval.requester] += interval.gpu_seconds
        exact[interval.requester] += interval.exact_cost
    return sorted(
        ((who, seconds[who], quantize(exact[who])) for who in seconds),
        key=lambda row: (-row[2], row[0]),
    )


def figures(found):
    return [(spend.requester, spend.gpu_seconds, spend.value) for spend in found]


@pytest.mark.parametrize("seed", [1, 2, 3])
def test_rolled_up_and_live_runs_give_every_run_s_spend_per_requester(f0, seed):
    rng = random.Random(seed)
    people_runs(f0, rng, 90)
    assert rollups.roll_up_usage(batch=19) == UsageRecord.objects.exclude(end=None).count()
    assert RequesterRollup.objects.exists()
    people_runs(f0, rng, 30)  # closed since the last roll-up: read live
    for record in UsageRecord.objects.filter(end=None)[:3]:
        record.end = max(record.start, MAY + timedelta(days=1))
        record.end_reason = "user"
        record.save()
    latest = max(UsageRecord.objects.exclude(end=None).values_list("end", flat=True))
    checked = 0
    for now in (latest, latest + timedelta(days=20)):
        for period in PERIODS:
            every = spend_by_project(project_ids=None, period=period, now=now)
            for project in (f0.alpha, f0.beta, f0.gamma):
                expected = from_each_run(project.pk, period, now)
                found = figures(spend_per_requester(project_id=project.pk, period=period, now=now))
                assert found == expected
                assert figures(every.get(project.pk, [])) == expected
                checked += len(expected)
    assert checked > 40


def test_a_replay_before_the_rollups_reads_the_runs(f0):
    people_runs(f0, random.Random(8), 60)
    rollups.roll_up_usage()
    earlier = MAY + timedelta(hours=1)
    for project in (f0.alpha, f0.beta):
        assert figures(
            spend_per_requester(project_id=project.pk, period=MAY, now=earlier)
        ) == from_each_run(project.pk, MAY, earlier)


@pytest.mark.parametrize("in_database", [True, False])
def test_a_rebuild_gives_the_requester_rollups_the_roll_ups_gave(f0, in_database):
    people_runs(f0, random.Random(9), 80)
    rollups.roll_up_usage(batch=11)
    fields = ("period", *rollups.REQUESTER_FIELDS, "gpu_seconds", "runs")
    rolled = sorted(RequesterRollup.objects.values_list(*fields))
    # One row per key and period, whatever the batches.
    assert len({row[:-2] for row in rolled}) == len(rolled)
    rollups.rebuild(in_database=in_database)
    assert sorted(RequesterRollup.objects.values_list(*fields)) == rolled


def test_the_refresh_keeps_spend_per_requester_and_the_page_reads_no_run(f0, client):
    now = timezone.now()
    people_runs(f0, random.Random(10), 70, around=now - timedelta(days=2))
    spend.refresh(now=now)
    kept = drafts.read(start=period_start(now), now=now, project_ids=[f0.alpha.pk])
    expected = spend_per_requester(project_id=f0.alpha.pk, period=now, now=now)
    assert len(expected) >= 2
    assert kept.requesters[f0.alpha.pk] == expected
    client.force_login(f0.alpha_manager)
    with CaptureQueriesContext(connection) as queries:
        page = client.get(f"/billing/projects/{f0.alpha.slug}/statement/")
    assert page.status_code == 200
    # No usage run is read but the allocations' measure (its project's runs not rolled up).
    assert not [
        q
        for q in queries
        if '"rental_usagerecord"' in q["sql"]
        and not q["sql"].startswith('SELECT "billing_gpuhourallocation"')
    ]
    text = page.content.decode()
    for spent in expected:
        assert spent.requester in text
        assert f"{spent.value:,}" in text or str(spent.value) in text
