"""Fair share over time (Q5, extended): in a pool with fair share on, waiting burst and spot
leases of one priority go by their projects' decayed usage of the pool per share, oldest
submission breaking ties; guarantees, ceilings, reclaim and notices are unchanged. The
worked example of docs/rules.md ("Fair share") in exact figures, a property over random
histories, the pages' words, and the pool settings' validation."""

import itertools
import math
import random
from datetime import UTC, datetime, timedelta
from decimal import Decimal
from unittest import mock

import pytest
from django.contrib.auth import get_user_model
from django.db import connection, transaction
from django.test.utils import CaptureQueriesContext
from django.urls import reverse
from hypothesis import HealthCheck, assume, given, note, settings
from hypothesis import strategies as st
from rest_framework.test import APIClient

from portal.models import AuditEvent
from rental.loans import admission, ending, fair_share, pools, queue
from rental.loans.queue import queue_in_order, queue_positions
from rental.loans.queue_rules import (
    Run,
    Waiting,
    decay_integral,
    decayed_gpu_seconds,
    queue_order,
    usage_per_share,
)
from rental.models import Pool, Quota, Reservation, Tier
from tests import factories
from tests.billing.helpers import lease as past_lease
from tests.billing.helpers import run
from tests.rental.loans import test_properties

Status = Reservation.Status
pytestmark = pytest.mark.django_db

DAY = timedelta(days=1)
MONDAY = datetime(2026, 4, 6, tzinfo=UTC)
NOW = MONDAY + 2 * DAY  # Wednesday 00:00:00, the end of the example's two days
K = 24 / math.log(2)  # h / ln 2 in hours, for a half-life of one day


def fair(f0, hours="24") -> Pool:
    Pool.objects.filter(pk=f0.pool.pk).update(
        fair_share=True, fair_share_half_life_hours=Decimal(hours)
    )
    f0.pool.refresh_from_db()
    return f0.pool


def example_history(f0) -> None:
    """docs/rules.md: alpha ran 2 GPUs all Monday, beta 4 GPUs Tuesday 12:00-24:00, gamma
    1 GPU both days: 48 GPU-hours each, undecayed."""
    for project, gpus, start, end in (
        (f0.alpha, 2, MONDAY, MONDAY + DAY),
        (f0.beta, 4, MONDAY + DAY + timedelta(hours=12), NOW),
        (f0.gamma, 1, MONDAY, NOW),
    ):
        run(past_lease(f0, project, gpus=gpus), start=start, end=end, gpus=gpus)


def submit(f0, project, gpus, when, *, priority="experiment", market="on_demand"):
    return admission.submit_reservation(
        actor=f0.engineer_of(project),
        project=project,
        gpu_model=f0.model,
        gpu_count=gpus,
        duration_hours=8,
        priority=priority,
        market=market,
        now=when,
    )


def example_queue(f0):
    """The pool full (beta 4, alpha 2 guaranteed, gamma 2 burst; nothing a burst request
    may take back), then three 1-GPU burst experiment requests: gamma's, beta's, alpha's."""
    before = NOW - timedelta(minutes=10)
    submit(f0, f0.beta, 4, before)
    submit(f0, f0.alpha, 2, before)
    filler = submit(f0, f0.gamma, 2, before)
    waiting = [
        submit(f0, project, 1, before + timedelta(minutes=n + 1))
        for n, project in enumerate((f0.gamma, f0.beta, f0.alpha))
    ]
    assert {lease.status for lease in waiting} == {Status.QUEUED}
    assert {lease.tier for lease in waiting} == {Tier.BURST}
    return filler, waiting


# --- The worked example, exact figures ----------------------------------------------------


def test_the_closed_form_is_the_integral_of_the_decay():
    """h / ln 2 × (2^(−a_end/h) − 2^(−a_start/h)) against a midpoint sum over seconds."""
    now, start, end = NOW, NOW - timedelta(hours=30), NOW - timedelta(hours=5)
    exact = decay_integral(start, end, now=now, half_life=DAY)
    step = 60
    summed = sum(
        2 ** (-(30 * 3600 - (i + 0.5) * step) / 86400) * step for i in range(25 * 3600 // step)
    )
    assert exact == pytest.approx(summed, rel=1e-7)


def test_the_worked_example_in_exact_figures(f0):
    fair(f0)
    example_history(f0)
    seconds = fair_share.decayed_gpu_seconds(
        f0.pool, {f0.alpha.pk, f0.beta.pk, f0.gamma.pk}, now=NOW
    )
    # alpha: 2 × K × (2^-1 − 2^-2); beta: 4 × K × (1 − 2^-½); gamma: 1 × K × (1 − 2^-2).
    hours = {pid: value / 3600 for pid, value in seconds.items()}
    assert hours[f0.alpha.pk] == pytest.approx(2 * K * 0.25, rel=1e-9)
    assert hours[f0.beta.pk] == pytest.approx(4 * K * (1 - 2**-0.5), rel=1e-9)
    assert hours[f0.gamma.pk] == pytest.approx(K * 0.75, rel=1e-9)
    assert round(hours[f0.alpha.pk], 2) == 17.31
    assert round(hours[f0.beta.pk], 2) == 40.57
    assert round(hours[f0.gamma.pk], 2) == 25.97
    per_share = {
        f0.alpha.pk: usage_per_share(seconds[f0.alpha.pk], guaranteed=2),
        f0.beta.pk: usage_per_share(seconds[f0.beta.pk], guaranteed=4),
        f0.gamma.pk: usage_per_share(seconds[f0.gamma.pk], guaranteed=0),  # share 1
    }
    assert {pid: round(value, 2) for pid, value in per_share.items()} == {
        f0.alpha.pk: Decimal("8.66"),
        f0.beta.pk: Decimal("10.14"),
        f0.gamma.pk: Decimal("25.97"),
    }


def test_the_worked_example_orders_and_admits_by_decayed_usage(f0):
    example_history(f0)
    filler, (gamma, beta, alpha) = example_queue(f0)
    # Without fair share: (U − G)⁺ / w is 0 for alpha and beta, 2 for gamma; then sent.
    assert queue_positions(f0.model, now=NOW) == {beta.pk: 1, alpha.pk: 2, gamma.pk: 3}
    fair(f0)
    assert queue_positions(f0.model, now=NOW) == {alpha.pk: 1, beta.pk: 2, gamma.pk: 3}
    ending.end_reservation(actor=f0.gary, reservation=filler, now=NOW)
    admitted = queue.admit_queued(gpu_model=f0.model, now=NOW)
    assert [lease.pk for lease in admitted] == [alpha.pk, beta.pk]
    assert Reservation.objects.get(pk=gamma.pk).status == Status.QUEUED


def test_the_same_example_with_a_week_half_life_keeps_the_order_but_not_the_figures(f0):
    """With h = 7 days the usage barely decays in two days: beta's 12/GPU goes first."""
    fair(f0, hours="168")
    example_history(f0)
    _filler, (gamma, beta, alpha) = example_queue(f0)
    order = queue_positions(f0.model, now=NOW)
    assert order == {beta.pk: 1, alpha.pk: 2, gamma.pk: 3}
    figures = queue.pool_queue(f0.model, now=NOW).order.usage
    assert {pid: round(value, 1) for pid, value in figures.items()} == {
        f0.alpha.pk: Decimal("20.7"),
        f0.beta.pk: Decimal("11.7"),
        f0.gamma.pk: Decimal("43.5"),
    }


def test_ties_go_to_the_oldest_submission_and_g0_counts_as_a_share_of_one(f0):
    """alpha (G 2) used 2 GPUs as long as gamma (G 0) used 1: the same figure per share;
    gamma sent first, so it goes first."""
    fair(f0)
    run(past_lease(f0, f0.alpha, gpus=2), start=MONDAY, end=MONDAY + DAY, gpus=2)
    run(past_lease(f0, f0.gamma, gpus=1), start=MONDAY, end=MONDAY + DAY, gpus=1)
    _filler, (gamma, beta, alpha) = example_queue(f0)
    assert queue_positions(f0.model, now=NOW) == {beta.pk: 1, gamma.pk: 2, alpha.pk: 3}


def test_usage_of_other_gpu_models_and_before_the_window_is_not_read(f0):
    fair(f0)
    other = factories.gpu_model("H100 80GB")
    old = past_lease(f0, f0.alpha, gpus=4)
    run(old, start=NOW - 11 * DAY, end=NOW - 10 * DAY - timedelta(seconds=1), gpus=4)
    elsewhere = run(past_lease(f0, f0.beta, gpus=1), start=MONDAY, end=NOW, gpus=1)
    elsewhere.gpu_model = other
    elsewhere.save()
    straddling = run(past_lease(f0, f0.gamma), start=NOW - 11 * DAY, end=NOW - 9 * DAY)
    ids = {f0.alpha.pk, f0.beta.pk, f0.gamma.pk}
    with CaptureQueriesContext(connection) as queries:
        seconds = fair_share.decayed_gpu_seconds(f0.pool, ids, now=NOW)
    assert len(queries) == 1
    assert seconds[f0.alpha.pk] == 0.0
    assert seconds[f0.beta.pk] == 0.0
    # Only its part within the window counts: 1 GPU over [now − 10 d, now − 9 d).
    assert seconds[f0.gamma.pk] == pytest.approx(86400 / math.log(2) * (2**-9 - 2**-10), rel=1e-9)
    assert straddling.gpu_count == 1


def test_a_pool_without_fair_share_reads_no_usage(f0):
    example_history(f0)
    example_queue(f0)
    pool = Pool.objects.get(pk=f0.pool.pk)
    queued = list(Reservation.objects.filter(status=Status.QUEUED))
    with CaptureQueriesContext(connection) as plain:
        queue_in_order(pool, queued, now=NOW)
    fair(f0)
    with CaptureQueriesContext(connection) as fairly:
        queue_in_order(f0.pool, queued, now=NOW)
    assert not any("rental_usagerecord" in q["sql"] for q in plain.captured_queries)
    usage_reads = [q for q in fairly.captured_queries if "rental_usagerecord" in q["sql"]]
    assert len(usage_reads) == 1
    assert len(fairly) == len(plain) + 1


def test_a_running_run_counts_up_to_now(f0):
    fair(f0)
    run(past_lease(f0, f0.alpha, gpus=2, status="active"), start=NOW - DAY, gpus=2)
    seconds = fair_share.decayed_gpu_seconds(f0.pool, {f0.alpha.pk}, now=NOW)
    assert seconds[f0.alpha.pk] / 3600 == pytest.approx(2 * K * 0.5, rel=1e-9)


# --- Properties over random histories -------------------------------------------------------


def reference_hours(runs, *, now, half_life_hours) -> float:
    """The decayed GPU-hours counted independently of the code: e^(−ln2 · age/h) closed form
    over each run clipped to the ten half-lives before now."""
    h = half_life_hours * 3600
    since = now - timedelta(seconds=10 * h)
    total = 0.0
    for gpus, start, end in runs:
        s, e = max(start, since), min(end or now, now)
        if e <= s:
            continue
        age_s, age_e = (now - s).total_seconds(), (now - e).total_seconds()
        total += (
            gpus
            * h
            / math.log(2)
            * (math.exp(-math.log(2) * age_e / h) - math.exp(-math.log(2) * age_s / h))
        )
    return total / 3600


histories = st.lists(
    st.tuples(
        st.integers(0, 2),  # project
        st.integers(1, 4),  # GPUs
        st.integers(0, 30 * 86400),  # start, seconds before now
        st.one_of(st.none(), st.integers(1, 5 * 86400)),  # length; None: still running
    ),
    max_size=12,
)
waiting_leases = st.lists(
    st.tuples(
        st.integers(0, 2),  # project
        st.integers(1, 3),  # GPUs
        st.sampled_from(("production", "experiment", "learning")),
        st.sampled_from(("on_demand", "on_demand", "spot")),
        st.integers(0, 3600),  # sent, seconds before now
    ),
    min_size=1,
    max_size=10,
)
limits = st.tuples(st.integers(0, 3), st.integers(0, 3), st.integers(0, 2))
half_lives = st.sampled_from(("1", "6.5", "24", "168"))


@settings(
    max_examples=40,
    deadline=None,
    derandomize=True,
    suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow],
)
@given(history=histories, queued=waiting_leases, guarantees=limits, half_life=half_lives)
def test_the_order_is_exactly_the_decayed_usage_order_within_a_priority(
    f0, history, queued, guarantees, half_life
):
    note(f"{history=} {queued=} {guarantees=} {half_life=}")
    projects = (f0.alpha, f0.beta, f0.gamma)
    with transaction.atomic():
        for project, g in zip(projects, guarantees, strict=True):
            Quota.objects.filter(project=project).update(guaranteed=g, ceiling=8)
        runs: dict[int, list] = {p.pk: [] for p in projects}
        for who, gpus, before, length in history:
            start = NOW - timedelta(seconds=before)
            end = None if length is None else min(start + timedelta(seconds=length), NOW)
            status = "active" if end is None else "ended"
            run(
                past_lease(f0, projects[who], gpus=gpus, status=status),
                start=start,
                end=end,
                gpus=gpus,
            )
            runs[projects[who].pk].append((gpus, start, end))
        leases = [
            Reservation.objects.create(
                project=projects[who],
                requester=f0.engineer_of(projects[who]),
                gpu_model=f0.model,
                gpu_count=gpus,
                offering=f0.offering,
                start=NOW,
                end=NOW + timedelta(hours=1),
                status=Status.QUEUED,
                tier=Tier.SPOT if market == "spot" else Tier.BURST,
                market=market,
                priority=priority,
                submitted_at=NOW - timedelta(seconds=sent),
            )
            for who, gpus, priority, market, sent in queued
        ]
        plain = queue_in_order(Pool.objects.get(pk=f0.pool.pk), leases, now=NOW)
        order = queue_in_order(fair(f0, half_life), leases, now=NOW)
        reference = {
            pid: reference_hours(rows, now=NOW, half_life_hours=float(half_life))
            / max(guarantees[i], 1)
            for i, (pid, rows) in enumerate(runs.items())
        }
        for pid, value in order.usage.items():
            assert float(value) == pytest.approx(reference[pid], rel=1e-7, abs=1e-6)

        def group(w: Waiting) -> tuple:
            return (not w.guaranteed_eligible, w.priority)

        fair_seq = [order.waiting[lease.pk] for lease in order.leases]
        plain_seq = [plain.waiting[lease.pk] for lease in plain.leases]
        # Fair share only moves leases within a group of the same priority beyond a
        # guarantee: the groups come in the same order, the guaranteed-eligible unchanged.
        assert [group(w) for w in fair_seq] == [group(w) for w in plain_seq]
        assert [w.id for w in fair_seq if w.guaranteed_eligible] == [
            w.id for w in plain_seq if w.guaranteed_eligible
        ]
        for first, second in itertools.pairwise(fair_seq):
            if group(first) != group(second) or first.guaranteed_eligible:
                continue
            one, other = reference[first.project_id], reference[second.project_id]
            if abs(one - other) > 1e-5:
                assert one < other, (first, second, one, other)
            elif first.project_id == second.project_id or one == other:
                assert (first.submitted_at, first.id) < (second.submitted_at, second.id)
        transaction.set_rollback(True)


def test_the_rules_order_is_a_pure_sort_by_figure_then_submission():
    """queue_order over plain numbers, as the expected start reads it."""
    sent = NOW - timedelta(hours=1)
    rows = [
        Waiting(1, False, "experiment", 0, Decimal(1), sent, Decimal("30.1"), 1),
        Waiting(2, False, "experiment", 3, Decimal(1), sent + timedelta(1), Decimal("12.5"), 2),
        Waiting(3, True, "learning", 0, Decimal(1), sent + timedelta(2), Decimal("99"), 3),
        Waiting(4, False, "production", 5, Decimal(1), sent + timedelta(3), Decimal("50"), 1),
        Waiting(5, False, "experiment", 0, Decimal(1), sent - timedelta(1), Decimal("12.5"), 4),
    ]
    assert [w.id for w in queue_order(rows)] == [3, 4, 5, 2, 1]
    assert decayed_gpu_seconds([Run(1, NOW - DAY, None)], now=NOW, half_life=DAY) == (
        pytest.approx(86400 / math.log(2) / 2)
    )


fair_setups = st.tuples(
    test_properties.config,
    st.lists(st.tuples(st.integers(0, 2), st.integers(1, 4), st.integers(1, 72)), max_size=4),
)
invariants_hold = test_properties.test_the_loan_model_keeps_its_invariants.hypothesis.inner_test


def holds_without_fair_share(f0, config, steps) -> bool:
    """Whether the same history keeps the invariants in the same pool without fair share
    (the loan model's own property, whose examples are not these)."""
    try:
        with transaction.atomic():
            invariants_hold(f0, config, steps)
    except AssertionError:
        return False
    return True


@settings(
    max_examples=20,
    deadline=None,
    derandomize=True,
    suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow],
)
@given(setup=fair_setups, steps=test_properties.operations)
def test_guarantees_ceilings_and_notices_hold_with_fair_share_on(f0, setup, steps):
    """The loan model's invariants (tests/rental/loans/test_properties.py: capacity, G, L
    now and over time, victims allowed and minimal, R2, no waiting lease that fits) after
    every step of a random history, in a fair pool with random past usage: fair share
    breaks none that held without it."""
    config, past = setup
    note(f"{past=}")
    projects = (f0.alpha, f0.beta, f0.gamma)
    with transaction.atomic():
        for who, gpus, hours_ago in past:
            start = test_properties.at("09:00") - timedelta(hours=hours_ago)
            run(
                past_lease(f0, projects[who], gpus=gpus),
                start=start,
                hours=hours_ago / 2,
                gpus=gpus,
            )
        assume(holds_without_fair_share(f0, config, steps))
        fair(f0, "6")
        invariants_hold(f0, config, steps)
        transaction.set_rollback(True)


# --- Pages ----------------------------------------------------------------------------------


@pytest.fixture
def clock():
    with mock.patch("django.utils.timezone.now", return_value=NOW):
        yield


def test_the_lease_page_says_why_the_lease_ahead_goes_first(f0, client, clock):
    fair(f0)
    example_history(f0)
    _filler, (gamma, beta, _alpha) = example_queue(f0)
    client.force_login(f0.bob)
    page = client.get(reverse("rental:lease", kwargs={"pk": beta.pk})).content.decode()
    assert "Place 2 of 3 in the A100 80GB queue." in page
    assert (
        "Ahead: same priority, project Alpha used 8.7 decayed GPU-hours per guaranteed GPU, "
        "Beta 10.1." in page
    )
    assert "Fair share: Beta used 10.1 decayed GPU-hours of this pool per guaranteed GPU" in page
    client.force_login(f0.gary)
    page = client.get(reverse("rental:lease", kwargs={"pk": gamma.pk})).content.decode()
    assert "project Beta used 10.1 decayed GPU-hours per guaranteed GPU, Gamma 26.0." in page


def test_the_lease_page_of_a_pool_without_fair_share_gives_the_old_reasons(f0, client, clock):
    example_history(f0)
    _filler, (gamma, _beta, _alpha) = example_queue(f0)
    client.force_login(f0.gary)
    page = client.get(reverse("rental:lease", kwargs={"pk": gamma.pk})).content.decode()
    assert "Place 3 of 3" in page
    assert "runs fewer GPUs beyond its guarantee (per weight) than Gamma" in page
    assert "Fair share:" not in page


def test_the_pool_page_lists_the_queue_and_each_projects_figure(f0, client, clock):
    fair(f0)
    example_history(f0)
    example_queue(f0)
    client.force_login(f0.alice)
    page = client.get(reverse("rental:pool_queue", args=[f0.pool.pk])).content.decode()
    assert "Fair share is on" in page
    assert "8.7 decayed GPU-hours per guaranteed GPU (17.3 over a share of 2)" in page
    assert "10.1 decayed GPU-hours per guaranteed GPU (40.6 over a share of 4)" in page
    assert "26.0 decayed GPU-hours per guaranteed GPU (26.0 over a share of 1)" in page
    rows = page.split('id="queue-table"')[1]
    assert rows.index(">Alpha<") < rows.index(">Beta<") < rows.index(">Gamma<")
    assert "project Alpha used 8.7 decayed GPU-hours per guaranteed GPU, Beta 10.1." in rows


def test_the_pool_page_without_fair_share_says_how_the_queue_goes(f0, client, clock):
    example_queue(f0)
    client.force_login(f0.alice)
    page = client.get(reverse("rental:pool_queue", args=[f0.pool.pk])).content.decode()
    assert "Fair share is on" not in page
    assert 'id="queue-table"' in page
    assert "sent earlier (at 2026-04-07 23:52:00 UTC)" in page


# --- Pool settings ----------------------------------------------------------------------------

SETTINGS = {
    "capacity": "8",
    "committed_gpus": "0",
    "committed_monthly_cost": "0",
    "apportionment": "hybrid",
    "residual": "shared",
}


def test_an_admin_turns_fair_share_on_with_a_half_life(f0, client):
    client.force_login(f0.admin)
    url = reverse("rental:pool_settings", args=[f0.pool.pk])
    answer = client.post(
        url, SETTINGS | {"fair_share": "true", "fair_share_half_life_hours": "36.5"}
    )
    assert answer.status_code == 302
    pool = Pool.objects.get()
    assert (pool.fair_share, pool.fair_share_half_life_hours) == (True, Decimal("36.5"))
    event = AuditEvent.objects.get(verb="pool.changed")
    assert (event.before, event.after) == (
        {"fair_share": False, "fair_share_half_life_hours": "168.00"},
        {"fair_share": True, "fair_share_half_life_hours": "36.50"},
    )
    page = client.get(reverse("rental:pool", args=[f0.pool.pk])).content.decode()
    assert 'value="36.5"' in page


def test_the_default_half_life_is_seven_days(f0):
    assert f0.pool.fair_share is False
    assert f0.pool.fair_share_half_life_hours == Decimal("168")


@pytest.mark.parametrize("value", ["0", "-1", "", "abc", "1.005", "10000", "9999.991", "1e9"])
def test_a_bad_half_life_is_refused_on_its_field_and_nothing_is_written(f0, client, value):
    client.force_login(f0.admin)
    answer = client.post(
        reverse("rental:pool_settings", args=[f0.pool.pk]),
        SETTINGS | {"fair_share": "true", "fair_share_half_life_hours": value},
    )
    assert answer.status_code == 400
    page = answer.content.decode()
    assert 'id="error-fair_share_half_life_hours"' in page
    assert "Fair share half-life: enter a number of hours more than 0" in page
    pool = Pool.objects.get()
    assert (pool.fair_share, pool.fair_share_half_life_hours) == (False, Decimal("168"))
    assert not AuditEvent.objects.exists()


def test_a_bad_yes_or_no_is_refused_on_its_field(f0, client):
    client.force_login(f0.admin)
    answer = client.post(
        reverse("rental:pool_settings", args=[f0.pool.pk]), SETTINGS | {"fair_share": "maybe"}
    )
    assert answer.status_code == 400
    assert 'id="error-fair_share"' in answer.content.decode()


def test_the_api_sets_and_shows_fair_share(f0):
    client = APIClient()
    client.force_authenticate(f0.admin)
    url = f"/api/v1/pools/{f0.pool.pk}"
    answer = client.patch(
        url, {"fair_share": True, "fair_share_half_life_hours": "24"}, format="json"
    )
    assert answer.status_code == 200, answer.content
    assert (answer.json()["fair_share"], answer.json()["fair_share_half_life_hours"]) == (
        True,
        "24.00",
    )
    refused = client.patch(url, {"fair_share_half_life_hours": "0"}, format="json")
    assert refused.status_code == 400
    assert "fair_share_half_life_hours" in refused.content.decode()
    assert Pool.objects.get().fair_share_half_life_hours == Decimal("24")


def test_djangos_admin_refuses_a_zero_half_life_on_its_field(f0, client):
    superuser = get_user_model().objects.create_superuser(username="su", password="x")
    client.force_login(superuser)
    url = reverse("admin:rental_pool_change", args=[f0.pool.pk])
    form = SETTINGS | {"committed_monthly_cost": "0.00", "fair_share": "on"}
    refused = client.post(url, form | {"fair_share_half_life_hours": "0"})
    assert refused.status_code == 200
    assert "Fair share half-life: enter a number of hours more than 0" in refused.content.decode()
    assert Pool.objects.get().fair_share is False
    assert client.post(url, form | {"fair_share_half_life_hours": "12"}).status_code == 302
    pool = Pool.objects.get()
    assert (pool.fair_share, pool.fair_share_half_life_hours) == (True, Decimal("12"))


def test_random_half_lives_round_trip_through_the_settings(f0):
    """Seeded: any half-life to the hundredth from 0.01 to 9,999.99 hours is kept exactly."""
    rng = random.Random(22)
    for _ in range(20):
        hours = Decimal(rng.randint(1, 999_999)) / 100
        values = pools.check_settings(f0.pool, guaranteed=6, fair_share_half_life_hours=str(hours))
        assert values["fair_share_half_life_hours"] == hours
