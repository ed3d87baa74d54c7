"""Expected start: each waiting lease's start, played forward from what the pool knows,
exact on constructed pools of F0 (C 8; alpha G 2 L 6, beta G 4 L 8, gamma G 0 L 4; notice
120 s). Each case then lets the real services run the day (leases end at their ends, the
due sweep, the queue) and checks that the lease starts exactly when it was expected."""

import math
import os
import random
import statistics
from datetime import timedelta

from portal.errors import DomainError
from rental.loans import due, ending, queue
from rental.loans.expected_start import ExpectedStarts, expected_text, forecast_pools
from rental.loans.expected_start_rules import BUSY, TOO_BIG, UNKNOWN
from rental.models import Pool, Reservation
from tests.rental.loans.conftest import at

Status = Reservation.Status


def fresh(lease):
    return Reservation.objects.get(pk=lease.pk)


def expected(lease, now):
    return ExpectedStarts(now=now).of(fresh(lease))


def run_day(f0, *times):
    """The real services at each instant, in the order the worker runs them: leases end
    at their end, the due sweep (notices, claims, bookings), then the queue."""
    for when in times:
        ending.end_expired_leases(now=when)
        due.process_due(now=when)
        queue.admit_queued(gpu_model=f0.model, now=when)


def test_a_running_lease_ending_at_14_frees_the_gpus_for_the_queued_lease(f0, lease):
    lease(f0.beta, 4, at("09:00"), hours=5)  # guaranteed, ends 14:00
    lease(f0.alpha, 2, at("09:00"), hours=11)  # guaranteed
    lease(f0.gamma, 2, at("09:00"), hours=11)  # burst: only spot could be taken back
    waiting = lease(f0.gamma, 2, at("09:10"), hours=3)  # burst, no room
    assert fresh(waiting).status == Status.QUEUED
    found = expected(waiting, at("09:30"))
    assert found.start == at("14:00")
    assert expected_text(found) == (
        "Expected to start at about 2026-04-06 14:00 UTC (if nothing else changes)."
    )
    run_day(f0, at("13:59:59"))
    assert fresh(waiting).status == Status.QUEUED
    run_day(f0, at("14:00"))
    assert (fresh(waiting).status, fresh(waiting).start) == (Status.PROVISIONING, at("14:00"))


def test_a_booking_from_15_to_18_takes_the_gpus_freed_at_15(f0, lease):
    lease(f0.beta, 4, at("09:00"), hours=6)  # guaranteed, ends 15:00
    lease(f0.alpha, 2, at("09:00"), hours=11)
    lease(f0.gamma, 2, at("09:00"), hours=11)
    booking = lease(f0.beta, 4, at("09:05"), hours=3, start=at("15:00"))
    assert fresh(booking).status == Status.SCHEDULED
    waiting = lease(f0.gamma, 2, at("09:10"), hours=2)
    # Without the booking it would start at 15:00; beta's booking takes those 4 GPUs.
    assert expected(waiting, at("09:30")).start == at("18:00")
    run_day(f0, at("14:58"), at("15:00"))
    assert fresh(booking).status == Status.PROVISIONING
    assert fresh(waiting).status == Status.QUEUED
    run_day(f0, at("18:00"))
    assert (fresh(waiting).status, fresh(waiting).start) == (Status.PROVISIONING, at("18:00"))


def test_a_lease_ahead_in_the_queue_takes_the_gpus_first(f0, lease):
    lease(f0.beta, 2, at("09:00"), hours=5)  # ends 14:00
    lease(f0.beta, 2, at("09:00"), hours=7)  # ends 16:00
    lease(f0.alpha, 2, at("09:00"), hours=11)
    lease(f0.gamma, 2, at("09:00"), hours=11)
    behind = lease(f0.gamma, 2, at("09:05"), hours=2, priority="learning")
    ahead = lease(f0.alpha, 2, at("09:10"), hours=4)  # experiment: before learning (Q5)
    starts = ExpectedStarts(now=at("09:30"))
    assert starts.of(fresh(ahead)).start == at("14:00")
    assert starts.of(fresh(behind)).start == at("16:00")
    run_day(f0, at("14:00"))
    assert fresh(ahead).start == at("14:00") and fresh(behind).status == Status.QUEUED
    run_day(f0, at("16:00"))
    assert (fresh(behind).status, fresh(behind).start) == (Status.PROVISIONING, at("16:00"))


def test_the_gpus_a_reclaim_notice_frees_at_its_due_time(f0, lease):
    lease(f0.beta, 4, at("09:00"), hours=11)
    lease(f0.gamma, 4, at("09:00"), hours=11)  # burst: a guaranteed request takes it back
    waiting = lease(f0.beta, 2, at("09:30"), hours=2, priority="learning")  # burst, waits
    claimer = lease(f0.alpha, 2, at("10:00"), hours=2)  # guaranteed: gamma is told
    assert fresh(claimer).reclaim_due_at == at("10:02")
    starts = ExpectedStarts(now=at("10:00:30"))
    assert starts.of(fresh(claimer)).start == at("10:02")
    # gamma's 4 GPUs come back at 10:02: 2 for alpha, 2 for beta's queued lease.
    assert starts.of(fresh(waiting)).start == at("10:02")
    run_day(f0, at("10:02"))
    assert (fresh(waiting).status, fresh(waiting).start) == (Status.PROVISIONING, at("10:02"))


def test_it_is_never_earlier_than_the_ceiling_beside_a_booking_allows(f0, lease):
    lease(f0.beta, 4, at("09:00"), hours=5)  # ends 14:00
    lease(f0.gamma, 4, at("09:00"), hours=5)  # ends 14:00
    booking = lease(f0.alpha, 4, at("09:05"), hours=2, start=at("15:00"))
    waiting = lease(f0.alpha, 3, at("09:10"), hours=4)  # burst, no room
    assert (fresh(booking).status, fresh(waiting).status) == (Status.SCHEDULED, Status.QUEUED)
    # The pool is free at 14:00, but 3 GPUs to 18:00 beside alpha's booking of 4 from
    # 15:00 would take alpha to 7 > L 6: it may start only once the booking is over.
    assert expected(waiting, at("09:30")).start == at("17:00")
    run_day(f0, at("14:00"), at("14:58"), at("15:00"))
    assert fresh(waiting).status == Status.QUEUED
    run_day(f0, at("17:00"))
    assert (fresh(waiting).status, fresh(waiting).start) == (Status.PROVISIONING, at("17:00"))


def test_it_is_never_earlier_than_the_guarantee_lets_a_production_lease_run(f0, lease):
    Pool.objects.filter(pk=f0.pool.pk).update(capacity=6)  # Σ G = 6
    lease(f0.beta, 4, at("09:00"), hours=11, priority="production")
    first = lease(f0.alpha, 2, at("09:00"), hours=3, priority="experiment")  # G, to 12:00
    waiting = lease(f0.alpha, 2, at("09:05"), hours=2, priority="production")
    # Own reclaim: alpha's experiment lease gives the guarantee back at 09:07.
    assert fresh(waiting).reclaim_due_at == at("09:07")
    assert expected(waiting, at("09:06")).start == at("09:07")
    assert fresh(first).notice_due_at == at("09:07")


def test_no_start_in_sight_says_why(f0, lease, settings):
    settings.PORTAL_MAX_LEASE_HOURS = 400
    lease(f0.beta, 4, at("09:00"), hours=300)
    lease(f0.alpha, 2, at("09:00"), hours=300)
    lease(f0.gamma, 2, at("09:00"), hours=300)
    waiting = lease(f0.gamma, 2, at("09:10"), hours=2)
    found = expected(waiting, at("09:30"))
    assert (found.start, found.reason) == (None, BUSY)
    assert expected_text(found) == (
        "No start in sight in the next 7 days: the pool's 8 GPUs stay taken by leases "
        "running past then, leases ahead of it in the queue and bookings (0 GPUs booked "
        "then)."
    )
    big = lease(f0.alpha, 3, at("09:20"), hours=2)
    Pool.objects.filter(pk=f0.pool.pk).update(capacity=2)
    found = expected(big, at("09:30"))
    assert (found.start, found.reason) == (None, TOO_BIG)
    assert expected_text(found) == "No start in sight: it needs 3 GPUs and the pool has only 2."


def test_a_lease_waiting_for_approval_says_when_it_would_start_if_approved_now(f0, lease):
    lease(f0.beta, 4, at("09:00"), hours=5)  # ends 14:00
    lease(f0.alpha, 4, at("09:00"), hours=11)  # burst (4 > G 2): the pool is full
    pending = lease(f0.alpha, 3, at("09:10"), hours=2)  # 4 + 3 > L 6: a manager decides
    assert fresh(pending).status == Status.PENDING_APPROVAL
    found = expected(pending, at("09:30"))
    assert found.start is None
    assert expected_text(found) == (
        "It waits for a manager's approval; approved now, it would most likely start at "
        "about 2026-04-06 14:00 UTC (if nothing else changes)."
    )


def test_a_pool_is_read_once_for_all_its_leases(f0, lease, django_assert_num_queries):
    lease(f0.beta, 4, at("09:00"), hours=5)
    lease(f0.alpha, 2, at("09:00"), hours=11)
    lease(f0.gamma, 2, at("09:00"), hours=11)
    waiting = [fresh(lease(f0.gamma, 1, at(f"09:1{n}"), hours=1)) for n in range(3)]
    starts = ExpectedStarts(now=at("09:30"))
    with django_assert_num_queries(1):  # its live leases with their quotas, C and Σ G
        found = [starts.of(one).start for one in waiting]
    # gamma (L 4) runs 2: the third waits for its ceiling, until the first ends.
    assert found == [at("14:00"), at("14:00"), at("15:00")]


def test_it_is_exact_to_the_hour_after_a_day_of_leases(f0, lease):
    """A longer day: the figures the whole queue expects at 09:30 are those it gets."""
    lease(f0.beta, 2, at("09:00"), hours=3)
    lease(f0.beta, 2, at("09:00"), hours=5)
    lease(f0.alpha, 2, at("09:00"), hours=4)
    lease(f0.gamma, 2, at("09:00"), hours=6)
    queued = [
        lease(f0.gamma, 1, at("09:05"), hours=2, priority="learning"),
        lease(f0.alpha, 3, at("09:06"), hours=1),
        lease(f0.beta, 1, at("09:07"), hours=3),
        lease(f0.alpha, 1, at("09:08"), hours=2, priority="learning"),
    ]
    starts = ExpectedStarts(now=at("09:30"))
    wanted = {one.pk: starts.of(fresh(one)).start for one in queued}
    clock = at("09:30")
    while clock <= at("20:00"):
        run_day(f0, clock)
        clock += timedelta(minutes=1)
    assert {one.pk: fresh(one).start for one in queued} == wanted


# --- The replay: a recorded day, the estimates against the actual starts ----------------

REPLAY_SEED = int(os.environ.get("REPLAY_SEED", "22"))
PROJECTS = ("alpha", "beta", "gamma")


def recorded_day(seed: int) -> list[dict]:
    """A seeded day of requests on F0 from 08:00 to 18:00: who asks, when, how many GPUs
    for how long, at what priority and on which market, whether it is booked ahead, and
    whether its user ends it early (at what fraction of its length)."""
    rng = random.Random(seed)
    day, clock = [], at("08:00")
    while clock < at("18:00"):
        clock += timedelta(minutes=rng.randint(2, 15))
        project = rng.choice(PROJECTS)
        booked = rng.random() < 0.08
        day.append(
            {
                "at": clock,
                "project": project,
                "gpus": rng.choice((1, 1, 2, 2, 3, 4)),
                "hours": rng.choice((1, 1.5, 2, 3, 4, 6)),
                "priority": rng.choice(("experiment", "experiment", "learning", "production")),
                "market": "spot" if not booked and rng.random() < 0.12 else "on_demand",
                "start": clock + timedelta(hours=rng.randint(1, 4)) if booked else None,
                "requeue": rng.random() < 0.3,
                "ends_early": rng.random() < 0.25,
                "fraction": rng.uniform(0.2, 0.9),
            }
        )
    return day


def next_due(f0, after):
    """The next instant the worker acts on: a lease's end, a notice, a claim, a booking's
    start − notice or start."""
    rows = Reservation.objects.filter(gpu_model=f0.model)
    live = rows.filter(status__in=(Status.PROVISIONING, Status.ACTIVE))
    notice = timedelta(seconds=120)
    times = [
        *live.filter(end__gt=after).values_list("end", flat=True),
        *live.filter(notice_due_at__gt=after).values_list("notice_due_at", flat=True),
        *rows.filter(reclaim_due_at__gt=after).values_list("reclaim_due_at", flat=True),
    ]
    for start in rows.filter(status=Status.SCHEDULED).values_list("start", flat=True):
        times += [t for t in (start - notice, start) if t > after]
    return min(times, default=None)


def replay(f0, lease, seed):
    """Drive the real services through the recorded day with a moving clock; each lease
    queued when it is asked gets its estimate then. Returns one row per such lease."""
    projects = {name: getattr(f0, name) for name in PROJECTS}
    asks = recorded_day(seed)
    early_ends: dict[int, object] = {}  # lease id -> when its user ends it
    ended_early: list = []  # when leases ended before their end
    submitted: list[tuple[int, int, object]] = []  # (order, lease id, when)
    estimates: dict[int, tuple[int, object, object]] = {}  # id -> (order, when, estimate)
    plans: dict[int, dict] = {}
    clock, last = at("08:00"), at("23:59", day=8)
    while clock is not None and clock <= last:
        for pk, when in sorted(early_ends.items(), key=lambda item: item[1]):
            if when == clock:
                one = fresh(Reservation(pk=pk))
                if one.status in (Status.PROVISIONING, Status.ACTIVE) and one.end > clock:
                    ending.end_reservation(actor=None, reservation=one, now=clock)
                    ended_early.append(clock)
        run_day(f0, clock)
        for ask in (a for a in asks if a["at"] == clock):
            try:
                made = lease(
                    projects[ask["project"]],
                    ask["gpus"],
                    clock,
                    hours=ask["hours"],
                    priority=ask["priority"],
                    market=ask["market"],
                    start=ask["start"],
                    requeue_on_preemption=ask["requeue"],
                )
            except DomainError:
                continue  # refused (production over its guarantee, R2): nothing waits
            submitted.append((len(submitted), made.pk, clock))
            plans[made.pk] = ask
            if made.status == Status.QUEUED:
                estimates[made.pk] = (len(submitted) - 1, clock, expected(made, clock).start)
        ending_early = [pk for pk, ask in plans.items() if ask["ends_early"]]
        ending_early = [pk for pk in ending_early if pk not in early_ends]
        for pk, start, end in Reservation.objects.filter(
            pk__in=ending_early, status=Status.PROVISIONING
        ).values_list("pk", "start", "end"):
            minutes = (end - start).total_seconds() / 60 * plans[pk]["fraction"]
            early_ends[pk] = start + timedelta(minutes=max(1, int(minutes)))
        upcoming = [a["at"] for a in asks if a["at"] > clock]
        upcoming += [when for when in early_ends.values() if when > clock]
        following = next_due(f0, clock)
        clock = min([*upcoming, *([following] if following else [])], default=None)
    final = {
        pk: (status, start)
        for pk, status, start in Reservation.objects.values_list("pk", "status", "start")
    }
    started_at = {
        order: final[pk][1]
        for order, pk, _when in submitted
        if final[pk][0] not in (Status.QUEUED, Status.SCHEDULED, Status.PENDING_APPROVAL)
    }
    rows = []
    for pk, (order, when, estimate) in estimates.items():
        status, started = final[pk]
        if status in (Status.QUEUED, Status.PENDING_APPROVAL, Status.CANCELLED):
            continue
        later_started = any(
            later > order and start <= started for later, start in started_at.items()
        )
        early = any(when < moment <= started for moment in ended_early)
        rows.append(
            {
                "id": pk,
                "asked": when,
                "expected": estimate,
                "started": started,
                "undisturbed": not later_started and not early,
            }
        )
    return rows


def percentile(values: list[float], share: float) -> float:
    """The nearest-rank percentile."""
    ordered = sorted(values)
    return ordered[max(0, math.ceil(share * len(ordered)) - 1)]


def test_a_replayed_day_reports_how_far_the_estimates_were(f0, lease, settings, capsys):
    settings.PORTAL_MAX_PENDING_PER_USER = 1000
    rows = replay(f0, lease, REPLAY_SEED)
    judged = [row for row in rows if row["expected"] is not None]
    assert len(judged) >= 10, "the recorded day must queue enough leases to judge"
    errors = [abs((row["expected"] - row["started"]).total_seconds()) / 60 for row in judged]
    undisturbed = [row for row in judged if row["undisturbed"]]
    # Where nothing unexpected happened (no early end, no later request started first),
    # the estimate is the actual start: never earlier, and not later either.
    assert undisturbed, "some leases must wait undisturbed"
    for row in undisturbed:
        assert row["expected"] >= row["started"], row
        assert row["expected"] == row["started"], row
    with capsys.disabled():
        print(  # noqa: T201 (the figures the issue asks for)
            f"\nexpected start replay (seed {REPLAY_SEED}): {len(judged)} queued leases, "
            f"{len(undisturbed)} undisturbed and exact; absolute error median "
            f"{statistics.median(errors):.1f} min, p90 {percentile(errors, 0.9):.1f} min, "
            f"max {max(errors):.1f} min; estimates later than the start "
            f"{sum(row['expected'] > row['started'] for row in judged)}, earlier "
            f"{sum(row['expected'] < row['started'] for row in judged)}"
        )


def test_a_fair_pool_is_played_in_its_fair_order(f0, lease, django_assert_max_num_queries):
    Pool.objects.filter(pk=f0.pool.pk).update(fair_share=True)
    lease(f0.beta, 2, at("09:00"), hours=5)  # ends 14:00
    lease(f0.beta, 2, at("09:00"), hours=7)  # ends 16:00
    lease(f0.alpha, 2, at("09:00"), hours=11)
    lease(f0.gamma, 2, at("09:00"), hours=11)
    first = lease(f0.gamma, 2, at("09:05"), hours=2)
    second = lease(f0.alpha, 2, at("09:10"), hours=2)
    starts = ExpectedStarts(now=at("09:30"))
    # The leases, then the pool and its projects' decayed usage (``fair_share``'s reads).
    with django_assert_max_num_queries(5):
        found = (starts.of(fresh(first)).start, starts.of(fresh(second)).start)
    # Nobody has used the pool yet: equal figures, the earlier request first.
    assert found == (at("14:00"), at("16:00"))
    run_day(f0, at("14:00"), at("16:00"))
    assert (fresh(first).start, fresh(second).start) == found


def test_a_play_past_its_time_or_a_pool_past_its_size_gives_no_estimate(f0, lease, settings):
    """A page never waits on a forecast: past the time allowed the play stops (no
    estimate, said in words), and a pool with more live leases than allowed is not played."""
    lease(f0.beta, 4, at("09:00"), hours=5)
    lease(f0.alpha, 2, at("09:00"), hours=11)
    lease(f0.gamma, 2, at("09:00"), hours=11)
    waiting = lease(f0.gamma, 2, at("09:10"), hours=3)
    settings.PORTAL_EXPECTED_START_SECONDS = 0
    found = expected(waiting, at("09:30"))
    assert (found.start, found.reason) == (None, UNKNOWN)
    assert expected_text(found) == (
        "No estimate: the pool is too busy to forecast in the time a page allows."
    )
    settings.PORTAL_EXPECTED_START_SECONDS = 5
    assert expected(waiting, at("09:30")).start == at("14:00")
    settings.PORTAL_EXPECTED_START_MAX_LEASES = 3  # four live leases
    assert expected(waiting, at("09:30")) is None


def test_the_beats_forecast_gives_a_pool_too_big_for_a_page_its_estimates(
    f0, lease, settings, django_assert_max_num_queries
):
    """The beat plays every pool with waiting leases whatever its size; a page then reads
    its estimates (one cache read, no query of the pool), and plays live only a lease the
    beat has not seen, within its bounds."""
    lease(f0.beta, 4, at("09:00"), hours=5)
    lease(f0.alpha, 2, at("09:00"), hours=11)
    lease(f0.gamma, 2, at("09:00"), hours=11)
    waiting = lease(f0.gamma, 2, at("09:10"), hours=3)
    settings.PORTAL_EXPECTED_START_MAX_LEASES = 3  # four live leases: no page plays it
    assert expected(waiting, at("09:30")) is None
    assert forecast_pools(now=at("09:30")) == {f0.model.pk: 1}
    row = fresh(waiting)
    with django_assert_max_num_queries(0):
        found = ExpectedStarts(now=at("09:31")).of(row)
    assert found.start == at("14:00")
    # A lease queued after the beat's play: the page's own bounds again.
    later = lease(f0.alpha, 2, at("09:40"), hours=1)
    assert expected(later, at("09:41")) is None
    settings.PORTAL_EXPECTED_START_MAX_LEASES = 2000
    assert expected(later, at("09:41")).start is not None
