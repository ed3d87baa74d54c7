"""The pure rules by themselves, over plain numbers: Q5 queue order (all four keys) and
Q6/Q7/R4 victim choice (every step of the order, and the minimisation pass)."""

from datetime import UTC, datetime, timedelta
from decimal import Decimal

from rental.loans.admission_rules import Standing, decide
from rental.loans.queue_rules import Waiting, queue_order
from rental.loans.reclaim_rules import BURST, GUARANTEED, RESERVED, Candidate, choose_victims

T = datetime(2026, 4, 6, 9, 0, tzinfo=UTC)
ME, OTHER, THIRD = 1, 2, 3


def lease(id, project, gpus, tier, priority="experiment", minutes=0, market="on_demand"):
    return Candidate(
        id=id,
        project_id=project,
        gpus=gpus,
        tier=tier,
        market="spot" if tier == "spot" else market,
        priority=priority,
        started=T + timedelta(minutes=minutes),
    )


def ids(victims):
    return None if victims is None else [v.id for v in victims]


def choose(candidates, need, free=0, mode=GUARANTEED, priority="experiment", short=0):
    return ids(
        choose_victims(
            candidates,
            need=need,
            free=free,
            project_id=ME,
            priority=priority,
            mode=mode,
            guarantee_short=short,
        )
    )


def test_q6_spot_first_then_other_burst_then_own_lower_priority():
    pool = [
        lease(1, ME, 1, "burst", "learning"),
        lease(2, OTHER, 1, "burst"),
        lease(3, THIRD, 1, "spot"),
    ]
    assert choose(pool, 1) == [3]
    assert choose(pool, 2) == [3, 2]
    assert choose(pool, 3) == [3, 2, 1]


def test_q6_lowest_priority_first_then_newest():
    pool = [
        lease(1, OTHER, 1, "burst", "learning", minutes=0),
        lease(2, OTHER, 1, "burst", "experiment", minutes=30),
        lease(3, OTHER, 1, "burst", "learning", minutes=10),
        lease(4, OTHER, 1, "burst", "production", minutes=40),
    ]
    assert choose(pool, 1) == [3]
    assert choose(pool, 4) == [3, 1, 2, 4]


def test_q6_never_other_projects_guaranteed_or_reserved_nor_own_higher_priority():
    pool = [
        lease(1, OTHER, 4, "guaranteed", "learning"),
        lease(2, OTHER, 4, "reserved", "learning"),
        lease(3, ME, 4, "guaranteed", "production"),
        lease(4, ME, 4, "burst", "experiment"),  # same priority as the request
    ]
    assert choose(pool, 1) is None
    assert choose(pool, 1, priority="production") == [4]


def test_q6_minimisation_drops_a_victim_that_is_not_needed():
    pool = [lease(1, OTHER, 1, "spot"), lease(2, OTHER, 3, "burst")]
    # Greedy: spot (1) then burst (3) = 4 ≥ 3; without the spot 3 still covers it.
    assert choose(pool, 3) == [2]
    assert choose(pool, 3, free=2) == [1]


def test_q6_guarantee_shortfall_needs_own_guaranteed_leases():
    pool = [lease(1, OTHER, 2, "burst"), lease(2, ME, 2, "guaranteed", "learning")]
    assert choose(pool, 2, priority="production", short=2) == [2]
    assert choose(pool, 2, priority="production", short=4) is None


def test_q7_burst_takes_only_spot():
    pool = [lease(1, OTHER, 2, "burst", "learning"), lease(2, OTHER, 1, "spot")]
    assert choose(pool, 1, mode=BURST) == [2]
    assert choose(pool, 2, mode=BURST) is None


def test_r4_reservation_takes_spot_then_other_burst_then_its_own_burst():
    pool = [
        lease(1, ME, 2, "burst", "learning"),
        lease(2, OTHER, 2, "burst"),
        lease(3, OTHER, 2, "spot"),
        lease(4, ME, 2, "guaranteed", "learning"),
        lease(5, OTHER, 2, "guaranteed", "learning"),
        lease(6, OTHER, 2, "reserved", "learning"),
    ]
    assert choose(pool, 4, mode=RESERVED) == [3, 2]
    # The booking's own burst leases are GPUs it borrowed beside the ones it booked.
    assert choose(pool, 6, mode=RESERVED) == [3, 2, 1]
    # Guaranteed and reserved leases, its own included, are never taken.
    assert choose(pool, 8, mode=RESERVED) is None


def test_it_is_empty_when_there_is_room():
    assert choose([lease(1, OTHER, 2, "spot")], 2, free=2) == []


def waiting(id, eligible=False, priority="experiment", over=0, weight="1", minutes=0):
    return Waiting(
        id=id,
        guaranteed_eligible=eligible,
        priority=priority,
        over_guarantee=over,
        weight=Decimal(weight),
        submitted_at=T + timedelta(minutes=minutes),
    )


def order(*leases):
    return [w.id for w in queue_order(list(leases))]


def test_q5_guaranteed_eligible_first():
    assert order(waiting(1, priority="production"), waiting(2, eligible=True)) == [2, 1]


def test_q5_then_priority():
    assert order(waiting(1, priority="learning"), waiting(2, priority="production")) == [2, 1]


def test_q5_then_lowest_over_guarantee_per_weight():
    # (4 − 0) / 4 = 1 beats 2 / 1 = 2, although the second is less over in GPUs.
    assert order(waiting(1, over=2, weight="1"), waiting(2, over=4, weight="4")) == [2, 1]


def test_q5_then_oldest():
    assert order(waiting(1, minutes=5), waiting(2, minutes=1)) == [2, 1]


def test_q2_room_counts_claimed_gpus():
    standing = Standing(guaranteed=2, ceiling=6, used_guaranteed=0, used=0, capacity=8, running=8)
    assert decide(standing, gpu_count=1, priority="experiment", market="on_demand").status == (
        "queued"
    )


def test_q2_a_guaranteed_request_still_stays_within_the_ceiling():
    # A 3-GPU burst lease fills L 3 while G 2 has room: a 1-GPU request fits G, not L.
    standing = Standing(guaranteed=2, ceiling=3, used_guaranteed=0, used=3, capacity=8, running=3)
    decision = decide(standing, gpu_count=1, priority="experiment", market="on_demand")
    assert (decision.status, decision.tier, decision.code) == (
        "pending_approval",
        "guaranteed",
        "over_ceiling",
    )
    approved = decide(
        standing, gpu_count=1, priority="experiment", market="on_demand", approved=True
    )
    assert (approved.status, approved.tier) == ("provisioning", "guaranteed")
