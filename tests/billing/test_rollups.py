"""Usage rollups: a month's figures from the rollups plus the runs not rolled up are the
figures from every run, to the digit; each run is rolled up once, even by two roll-ups at
the same moment; a reader never mixes two moments."""

import logging
import random
import threading
from datetime import timedelta
from decimal import Decimal

import pytest
from django.conf import settings
from django.db import connection, connections
from django.test.utils import CaptureQueriesContext
from django.utils import timezone

from billing import drafts, rollups, spend
from billing.models import RolledPeriod, Statement, UsageRollup
from billing.periods import period_start
from billing.selectors import draft_statement
from billing.services import close_period
from billing.statements import compute_period
from billing.views import finance_rows, finance_statements
from rental.models import Pool, UsageRecord
from tests.billing.helpers import at, lease, run

REASONS = ["user", "lease_end", "idle", "preempted", "spot_interrupted", "provider"]
MAY = at(2026, 5, 1)


def awkward_runs(f0, rng, count, *, around=MAY):
    """Runs around a month's start: microsecond starts, zero-length and short runs that
    owe the minimum, preempted ones that do not, a few running, a few over three months."""
    leases = [
        lease(f0, project, tier=tier)
        for project in (f0.alpha, f0.beta, f0.gamma)
        for tier in ("guaranteed", "burst", "spot")
    ]
    for index in range(count):
        start = around + timedelta(microseconds=rng.randint(-3 * 10**9, 10**9))
        length = rng.choice([0, 1, 59, 60, 61, 3600, 7200, 70 * 86400]) + rng.random() * 2
        run(
            rng.choice(leases),
            start=start,
            end=None if index % 13 == 0 else start + timedelta(seconds=length),
            gpus=rng.randint(1, 4),
            rate=rng.choice(["2.50", "1.00", "3.333333"]),
            reason=rng.choice(REASONS),
        )


def commit_capacity(f0, *, mode):
    Pool.objects.filter(gpu_model=f0.model).update(
        committed_gpus=8,
        committed_monthly_cost=Decimal("9876.54"),
        apportionment=mode,
        residual="shared",
    )


def same(a, b):
    assert a.lines == b.lines
    assert a.pools == b.pools
    assert a.total() == b.total()


@pytest.mark.parametrize(
    ("seed", "mode"), [(1, "hybrid"), (2, "by_usage"), (3, "by_project"), (4, "hybrid")]
)
@pytest.mark.parametrize("in_database", [True, False])
def test_rollups_and_live_runs_give_the_lines_of_every_run(f0, seed, mode, in_database):
    commit_capacity(f0, mode=mode)
    rng = random.Random(seed)
    awkward_runs(f0, rng, 70)
    assert rollups.roll_up_usage(batch=17) == UsageRecord.objects.exclude(end=None).count()
    awkward_runs(f0, rng, 25)  # closed since the last roll-up: read live
    for record in UsageRecord.objects.filter(end=None)[:3]:  # runs that ended since, too
        record.end = max(record.start, MAY + timedelta(days=1))
        record.end_reason = "user"
        record.save()
    latest = max(UsageRecord.objects.exclude(end=None).values_list("end", flat=True))
    for now in (latest, latest + timedelta(days=20)):
        for period in (at(2026, 4, 1), MAY, at(2026, 6, 1), at(2026, 7, 1)):
            start = at(period.year, period.month, 1)
            assert rollups.read_usage(start=start, now=now, live=list) is not None
            from_rollups = compute_period(period=period, now=now, in_database=in_database)
            from_runs = compute_period(
                period=period, now=now, in_database=in_database, from_usage=True
            )
            same(from_rollups, from_runs)


def test_a_replay_before_the_rollups_reads_the_runs(f0):
    """As of a moment before a rolled-up run ended, the rollups would count seconds that
    had not run yet: the computation reads the month's runs."""
    rng = random.Random(7)
    awkward_runs(f0, rng, 60)
    rollups.roll_up_usage()
    through = RolledPeriod.objects.get(period=MAY.date()).through
    earlier = MAY + timedelta(hours=1)
    assert earlier < through
    assert rollups.read_usage(start=MAY, now=earlier, live=list) is None
    same(
        compute_period(period=MAY, now=earlier),
        compute_period(period=MAY, now=earlier, from_usage=True),
    )


def test_each_run_is_rolled_up_once(f0):
    rng = random.Random(11)
    awkward_runs(f0, rng, 50)
    closed = UsageRecord.objects.exclude(end=None).count()
    assert rollups.roll_up_usage(batch=7) == closed
    assert rollups.roll_up_usage() == 0
    assert not UsageRecord.objects.filter(rolled_up=False).exclude(end=None).exists()
    assert not UsageRecord.objects.filter(rolled_up=True, end=None).exists()
    # One row per key and period, whatever the batches.
    keys = UsageRollup.objects.values_list("period", *rollups.KEY_FIELDS)
    assert len(set(keys)) == len(keys)


@pytest.mark.django_db(transaction=True)
def test_two_roll_ups_at_the_same_moment_count_each_run_once(f0):
    rng = random.Random(5)
    awkward_runs(f0, rng, 160)
    closed = UsageRecord.objects.exclude(end=None).count()
    now = MAY + timedelta(days=400)
    expected = compute_period(period=MAY, now=now, from_usage=True)
    counts: list[int] = []
    barrier = threading.Barrier(2)

    def roll_up() -> None:
        try:
            barrier.wait()
            counts.append(rollups.roll_up_usage(batch=10))
        finally:
            connections.close_all()

    threads = [threading.Thread(target=roll_up) for _ in range(2)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    assert sum(counts) == closed
    assert all(counts), "both took part"
    same(compute_period(period=MAY, now=now), expected)


def test_a_reader_reads_again_when_a_roll_up_commits_between_its_reads(f0, monkeypatch):
    rng = random.Random(3)
    awkward_runs(f0, rng, 80)
    now = MAY + timedelta(days=400)
    expected = compute_period(period=MAY, now=now, from_usage=True)
    reads = []
    summed = rollups.read_usage

    def read_usage(*, start, now, live):
        def live_after_a_roll_up():
            found = list(live())
            if not reads:  # a roll-up commits after the rollups were read, before this
                rollups.roll_up_usage()
            reads.append(len(found))
            return found

        return summed(start=start, now=now, live=live_after_a_roll_up)

    monkeypatch.setattr(rollups, "read_usage", read_usage)
    same(compute_period(period=MAY, now=now), expected)
    assert len(reads) == 2, "the first read was thrown away"


def test_a_statement_reads_no_other_project_s_runs(f0):
    """Other projects' seconds come from the rollups; the runs read are the project's own
    or the few not rolled up."""
    rng = random.Random(9)
    awkward_runs(f0, rng, 60)
    rollups.roll_up_usage()
    with CaptureQueriesContext(connection) as queries:
        draft_statement(project_id=f0.alpha.pk, period=MAY, now=MAY + timedelta(days=400))
    usage_reads = [q["sql"] for q in queries if '"rental_usagerecord"' in q["sql"]]
    assert usage_reads
    for sql in usage_reads:
        assert '"rolled_up"' in sql or '"project_id" IN' in sql, sql


def test_closing_checks_the_rollups_against_the_runs(f0, caplog):
    commit_capacity(f0, mode="hybrid")
    rng = random.Random(13)
    awkward_runs(f0, rng, 80, around=at(2026, 4, 15))
    rollups.roll_up_usage()
    now = at(2026, 8, 1)
    with caplog.at_level(logging.ERROR, logger="billing.services"):
        close_period(period=at(2026, 4, 1), now=now)
    assert not caplog.records
    april = Statement.objects.get(project=f0.alpha, period=at(2026, 4, 1).date())
    expected = compute_period(period=at(2026, 4, 1), now=now, from_usage=True)
    assert april.total == sum(line.amount for line in expected.for_project(f0.alpha.pk))
    # A rollup that disagrees with the runs (a defect) is logged; the lines are the runs'.
    row = UsageRollup.objects.filter(period=at(2026, 5, 1).date()).first()
    row.gpu_seconds += 3600
    row.save()
    with caplog.at_level(logging.ERROR, logger="billing.services"):
        close_period(period=at(2026, 5, 1), now=now)
    assert "usage rollups of 2026-05 differ" in caplog.text
    may = compute_period(period=at(2026, 5, 1), now=now, from_usage=True)
    for statement in Statement.objects.filter(period=at(2026, 5, 1).date()):
        assert statement.total == sum(
            (line.amount for line in may.for_project(statement.project_id)), Decimal("0.00")
        )


def test_kept_lines_are_the_computed_lines_to_the_digit(f0):
    """The refresh keeps every project's lines; read back they equal what it computed."""
    commit_capacity(f0, mode="hybrid")
    rng = random.Random(21)
    now = timezone.now()
    awkward_runs(f0, rng, 80, around=now - timedelta(days=2))
    spend.refresh(now=now)
    computed = compute_period(period=now, now=now)
    kept = drafts.read(start=period_start(now), now=now, project_ids=None)
    assert kept is not None
    assert kept.lines == computed.lines
    assert kept.pools == computed.pools
    assert kept.covered_end == computed.covered_end
    one = drafts.read(start=period_start(now), now=now, project_ids=[f0.beta.pk])
    assert one.for_project(f0.beta.pk) == computed.for_project(f0.beta.pk)
    assert f0.alpha.pk not in one.lines


def test_a_statement_page_reads_its_kept_lines_and_adds_manual_ones_live(f0, client):
    commit_capacity(f0, mode="hybrid")
    now = timezone.now()
    awkward_runs(f0, random.Random(22), 60, around=now - timedelta(days=2))
    spend.refresh(now=now)
    client.force_login(f0.alpha_manager)
    url = f"/billing/projects/{f0.alpha.slug}/statement/"
    with CaptureQueriesContext(connection) as queries:
        assert client.get(url).status_code == 200
    assert not [
        q
        for q in queries
        if '"rental_usagerecord"' in q["sql"]
        and "GROUP BY" in q["sql"]
        # The allocations' measure reads its project's runs not rolled up.
        and not q["sql"].startswith('SELECT "billing_gpuhourallocation"')
    ]
    kept = draft_statement(project_id=f0.alpha.pk, now=timezone.now(), kept=True)
    assert kept.lines == compute_period(period=now, now=now).for_project(f0.alpha.pk)
    # Too old, or written after the moment asked for: computed in full.
    later = now + timedelta(seconds=settings.PORTAL_SPEND_SNAPSHOT_MAX_AGE_SECONDS + 1)
    assert drafts.read(start=period_start(now), now=later, project_ids=None) is None
    assert (
        drafts.read(start=period_start(now), now=now - timedelta(seconds=1), project_ids=None)
        is None
    )


@pytest.mark.parametrize("in_database", [True, False])
def test_a_rebuild_gives_what_the_roll_ups_gave(f0, in_database):
    commit_capacity(f0, mode="by_usage")
    awkward_runs(f0, random.Random(31), 90)
    rollups.roll_up_usage(batch=13)
    seconds = sorted(UsageRollup.objects.values_list("period", *rollups.KEY_FIELDS, "gpu_seconds"))
    through = dict(RolledPeriod.objects.values_list("period", "through"))
    assert rollups.rebuild(in_database=in_database) == len(seconds)
    rebuilt = sorted(UsageRollup.objects.values_list("period", *rollups.KEY_FIELDS, "gpu_seconds"))
    assert rebuilt == seconds
    assert dict(RolledPeriod.objects.values_list("period", "through")) == through
    now = MAY + timedelta(days=400)
    same(compute_period(period=MAY, now=now), compute_period(period=MAY, now=now, from_usage=True))


def test_the_finance_page_s_rows_from_kept_totals_are_the_statements(f0):
    commit_capacity(f0, mode="hybrid")
    now = timezone.now()
    awkward_runs(f0, random.Random(23), 60, around=now - timedelta(days=2))
    spend.refresh(now=now)
    rows, platform = finance_rows(start=period_start(now), now=now)
    assert drafts.read_totals(start=period_start(now), now=now) is not None
    full = finance_statements(start=period_start(now), now=now)
    assert [(r.project_slug, r.line_count, r.total) for r in rows] == [
        (item.project_slug, len(item.view.lines), item.view.total) for item in full
    ]
    assert platform is None or platform.lines == full[-1].view.lines
