"""GPU-hour allocations (GA1–GA3): used GPU-hours from the month's billed GPU-seconds,
thresholds fired once each at the exact crossing, the hard stop refusing new burst and
spot leases but never guaranteed ones or bookings, and the figures on the pages."""

import random
from datetime import timedelta
from decimal import Decimal

import pytest
from django.urls import reverse
from django.utils import timezone

from billing import allocations, rollups, spend
from billing.admission import gpu_hour_cap
from billing.models import GpuHourAlert, GpuHourAllocation
from billing.periods import period_start
from billing.services import close_period
from portal import projectconfig
from portal.errors import Conflict, DomainError, InvalidInput, NotPermitted
from portal.models import AuditEvent, Membership, Notification
from rental.loans import admission
from rental.models import Reservation, UsageRecord
from tests import factories
from tests.api.leases_world import client_for
from tests.billing.helpers import at, lease, run
from tests.billing.test_page_costs import MOST_QUERIES, queries
from tests.billing.test_rollups import MAY, awkward_runs

APRIL = at(2026, 4, 1)


def allocate(f0, project=None, *, hours="10", thresholds=(), hard_stop=False, model=None):
    return allocations.set_allocation(
        project=project or f0.alpha,
        actor=f0.admin,
        gpu_model=model or f0.model,
        monthly_hours=hours,
        thresholds=list(thresholds),
        hard_stop=hard_stop,
    )


def check(f0, project=None, *, tier="burst", is_reservation=False, now, model=None):
    return gpu_hour_cap(
        project=project or f0.alpha,
        gpu_model=model or f0.model,
        gpu_count=1,
        tier=tier,
        market="spot" if tier == "spot" else "on_demand",
        starts_at=now,
        ends_at=now + timedelta(hours=2),
        is_reservation=is_reservation,
        now=now,
    )


@pytest.fixture
def seven_and_a_half(f0):
    """alpha's April on the A100: 3 runs = 7.5 GPU-hours billed in April (2 GPUs × 2 h,
    1 GPU × 1.5 h, and the 2 April hours of a 3-hour run begun on March 31 at 23:00);
    beside them, runs that do not count: another project's, another model's, May's."""
    burst = lease(f0, f0.alpha, tier="burst", gpus=2)
    run(burst, start=APRIL + timedelta(hours=1), hours=2, gpus=2)
    run(burst, start=APRIL + timedelta(days=3), hours=1.5)
    run(burst, start=APRIL - timedelta(hours=1), hours=3)
    run(lease(f0, f0.beta, tier="burst"), start=APRIL, hours=50)
    h100 = factories.gpu_model("H100 80GB")
    other = lease(f0, f0.alpha, tier="burst")
    Reservation.objects.filter(pk=other.pk).update(gpu_model=h100)
    other.refresh_from_db()
    run(other, start=APRIL, hours=20)
    run(burst, start=at(2026, 5, 1), hours=4)
    return burst


# --- Used GPU-hours ----------------------------------------------------------------------


def test_used_hours_are_the_months_billed_gpu_seconds_over_3600(f0, seven_and_a_half):
    end_of_april = at(2026, 4, 30, 12)
    used = allocations.used_seconds(project_ids=[f0.alpha.pk], period=APRIL, now=end_of_april)
    assert used[(f0.alpha.pk, f0.model.pk)] == 27_000  # 7.5 × 3,600
    # Rolled up or read live, the same seconds, counted once.
    assert rollups.roll_up_usage() > 0
    again = allocations.used_seconds(project_ids=[f0.alpha.pk], period=APRIL, now=end_of_april)
    assert again == used
    allocate(f0)
    (current,) = allocations.project_standings(f0.alpha.pk, period=APRIL, now=end_of_april)
    assert (current.used_hours, current.allocated_hours, current.percent) == (
        Decimal("7.50"),
        Decimal("10.00"),
        Decimal("75.0"),
    )
    assert not current.used_up


def test_a_running_lease_counts_up_to_now_and_the_minimum_is_billed(f0):
    running = lease(f0, f0.alpha, tier="burst", status="active")
    run(running, start=APRIL, gpus=2)  # open
    run(running, start=APRIL + timedelta(hours=5), seconds=10)  # short: billed the minimum
    used = allocations.used_seconds(
        project_ids=[f0.alpha.pk], period=APRIL, now=APRIL + timedelta(hours=3)
    )
    assert used == {(f0.alpha.pk, f0.model.pk): 2 * 3 * 3600}
    later = allocations.used_seconds(
        project_ids=[f0.alpha.pk], period=APRIL, now=APRIL + timedelta(hours=6)
    )
    minimum = 60  # PORTAL_MINIMUM_BILLED_SECONDS in the test settings
    assert later == {(f0.alpha.pk, f0.model.pk): 2 * 6 * 3600 + max(10, minimum)}


@pytest.mark.parametrize("seed", [1, 2])
def test_one_statement_and_read_usage_and_the_runs_agree_to_the_second(f0, seed):
    """Awkward runs around May's start, some rolled up, some running: the pages' one
    statement, ``read_usage`` in the database or row by row give the same seconds: now,
    in a replay before the roll-up (which must read the runs), and once May has ended."""
    rng = random.Random(seed)
    awkward_runs(f0, rng, 60, around=MAY)
    for project in (f0.alpha, f0.beta, f0.gamma):
        allocate(f0, project)
    now = MAY + timedelta(days=1)
    rollups.roll_up_usage()
    awkward_runs(f0, rng, 20, around=MAY)  # not rolled up
    everyone = [f0.alpha.pk, f0.beta.pk, f0.gamma.pk]
    seen = []
    for moment in (now, MAY + timedelta(seconds=30), MAY + timedelta(days=40)):
        reference = allocations.used_seconds(
            project_ids=everyone, period=MAY, now=moment, in_database=False
        )
        assert allocations.used_seconds(project_ids=everyone, period=MAY, now=moment) == reference
        measured = allocations.measured(
            GpuHourAllocation.objects.all(), period=MAY, now=moment, in_database=True
        )
        got = {
            (row.allocation.project_id, row.allocation.gpu_model_id): row.used_seconds
            for row in measured
            if row.used_seconds
        }
        assert got == reference
        seen.append(sum(reference.values()))
    assert all(seen) and seen[0] < seen[2]


# --- Thresholds (GA1) -------------------------------------------------------------------


@pytest.fixture
def alpha_running(f0):
    """alpha: 10 GPU-hours of A100 in April, warned at 50 % and 80 % actual; 1 GPU running
    from April 1 00:00 (one GPU-hour an hour)."""
    allocate(f0, thresholds=[{"percent": 50, "kind": "actual"}, {"percent": 80, "kind": "actual"}])
    running = lease(f0, f0.alpha, tier="burst", status="active")
    run(running, start=APRIL)
    return running


def test_each_threshold_fires_once_at_the_exact_crossing(f0, alpha_running):
    # Exactly 5 GPU-hours is 50 %, not more: nothing yet.
    assert allocations.evaluate_allocations(now=APRIL + timedelta(hours=5)) == []
    fired = allocations.evaluate_allocations(now=APRIL + timedelta(hours=5, seconds=1))
    assert [(alert.percent, alert.kind, alert.value) for alert in fired] == [
        (50, "actual", Decimal("5.00"))
    ]
    moment = APRIL + timedelta(hours=5, minutes=30)
    while moment <= APRIL + timedelta(hours=12):
        allocations.evaluate_allocations(now=moment)
        moment += timedelta(minutes=30)
    alerts = {
        (alert.percent, alert.kind): (alert.fired_at, alert.value)
        for alert in GpuHourAlert.objects.all()
    }
    assert alerts == {
        (50, "actual"): (APRIL + timedelta(hours=5, seconds=1), Decimal("5.00")),
        (80, "actual"): (APRIL + timedelta(hours=8, minutes=30), Decimal("8.50")),
    }
    # The managers are told once per threshold, and each alert is audited once.
    assert Notification.objects.filter(user=f0.alpha_manager).count() == 2
    assert Notification.objects.exclude(user=f0.alpha_manager).count() == 0
    assert AuditEvent.objects.filter(verb="allocation.alert", project=f0.alpha).count() == 2
    subject = str(Notification.objects.order_by("pk").first().subject)
    assert "50%" in subject and "A100 80GB" in subject


def test_the_rules_example_hourly_evaluation_and_the_hard_stop(f0, alpha_running):
    """docs/rules.md, GA1–GA3: evaluated every hour, 50 % fires at 06:00 (6.00; at 05:00
    it is exactly 5.00 and does not), 80 % at 09:00 (9.00); the hard stop from 10:00."""
    GpuHourAllocation.objects.update(hard_stop=True)
    for hour in range(1, 13):
        allocations.evaluate_allocations(now=APRIL + timedelta(hours=hour))
    assert {
        (alert.percent, alert.fired_at, alert.value) for alert in GpuHourAlert.objects.all()
    } == {
        (50, APRIL + timedelta(hours=6), Decimal("6.00")),
        (80, APRIL + timedelta(hours=9), Decimal("9.00")),
    }
    assert check(f0, now=APRIL + timedelta(hours=9, minutes=59, seconds=59)) is None
    assert check(f0, now=APRIL + timedelta(hours=10))[2] == {
        "used_gpu_hours": Decimal("10.00"),
        "allocated_gpu_hours": Decimal("10.00"),
    }
    assert check(f0, tier="guaranteed", now=APRIL + timedelta(hours=10)) is None


def test_a_threshold_fires_again_in_the_next_month_and_not_for_other_projects(f0, alpha_running):
    allocations.evaluate_allocations(now=at(2026, 4, 30, 23))
    allocations.evaluate_allocations(now=at(2026, 4, 30, 23, 30))
    assert GpuHourAlert.objects.filter(percent=50).count() == 1
    # May: the run goes on, 6 GPU-hours by 06:00 → 60 % of May's 10.
    allocations.evaluate_allocations(now=at(2026, 5, 1, 6))
    assert GpuHourAlert.objects.filter(percent=50).count() == 2
    assert GpuHourAlert.objects.filter(percent=80).count() == 1
    assert not GpuHourAlert.objects.exclude(allocation__project=f0.alpha).exists()


def test_forecast_waits_for_24_hours_then_fires_on_the_pace(f0):
    allocate(f0, hours="1000", thresholds=[{"percent": 100, "kind": "forecast"}])
    run(lease(f0, f0.alpha, tier="burst", status="active"), start=APRIL, gpus=2)
    assert allocations.evaluate_allocations(now=at(2026, 4, 1, 23, 59, 59)) == []
    (alert,) = allocations.evaluate_allocations(now=at(2026, 4, 2))
    # 48 GPU-hours in 24 h → 48 × 720 / 24 = 1,440 for the month, over 1,000.
    assert (alert.kind, alert.value) == ("forecast", Decimal("1440.00"))
    assert allocations.evaluate_allocations(now=at(2026, 4, 3)) == []


# --- The hard stop (GA3) ----------------------------------------------------------------


def test_the_hard_stop_refuses_burst_and_spot_but_never_guaranteed_or_bookings(f0):
    allocate(f0, hours="7.5", hard_stop=True)
    burst = lease(f0, f0.alpha, tier="burst", gpus=2)
    run(burst, start=APRIL, hours=2, gpus=2)  # 4 h
    run(burst, start=APRIL + timedelta(hours=3), hours=3.5)  # 3.5 h: 7.5 at 06:30
    before = APRIL + timedelta(hours=6, minutes=29, seconds=59)
    used_up = APRIL + timedelta(hours=6, minutes=30)
    assert check(f0, now=before) is None
    code, message, figures = check(f0, now=used_up)
    assert code == "gpu_hour_cap"
    assert figures == {"used_gpu_hours": Decimal("7.50"), "allocated_gpu_hours": Decimal("7.50")}
    said = str(message)
    assert "7.50 of its 7.50 GPU-hours of A100 80GB" in said
    assert "Guaranteed leases still run" in said
    assert check(f0, tier="spot", now=used_up)[0] == "gpu_hour_cap"
    assert check(f0, tier="guaranteed", now=used_up) is None
    assert check(f0, tier="reserved", is_reservation=True, now=used_up) is None
    assert check(f0, tier="burst", is_reservation=True, now=used_up) is None
    # Another project, or another GPU model, is not stopped by alpha's A100 allocation.
    assert check(f0, f0.beta, now=used_up) is None
    assert check(f0, model=factories.gpu_model("H100 80GB"), now=used_up) is None


def test_without_a_hard_stop_nothing_is_refused(f0):
    allocate(f0, hours="0", hard_stop=False)
    run(lease(f0, f0.alpha, tier="burst"), start=APRIL, hours=3)
    assert check(f0, now=APRIL + timedelta(hours=4)) is None


def test_the_check_costs_nothing_for_guaranteed_one_query_without_a_hard_stop_and_two_with(
    f0, django_assert_num_queries
):
    """Most projects have no hard stop: their check is one plain look. With one, that look
    and then the allocation and the model's use this month in one more query."""
    with django_assert_num_queries(0):
        assert check(f0, tier="guaranteed", now=APRIL) is None
        assert check(f0, is_reservation=True, now=APRIL) is None
    with django_assert_num_queries(1):
        assert check(f0, now=APRIL) is None
    allocate(f0, hours="5", hard_stop=False)  # no hard stop: still the one query
    with django_assert_num_queries(1):
        assert check(f0, now=APRIL) is None
    # With a hard stop, the allocation and the model's use this month in one more query.
    allocate(f0, hours="7", hard_stop=True)
    run(lease(f0, f0.alpha, tier="burst"), start=APRIL, hours=6)
    rollups.roll_up_usage()
    run(lease(f0, f0.alpha, tier="burst", status="active"), start=APRIL)
    with django_assert_num_queries(2):  # 6 rolled up + 6.5 running: 12.5 of 7
        assert check(f0, now=APRIL + timedelta(hours=6, minutes=30))[0] == "gpu_hour_cap"
    Reservation.objects.update(status="ended")
    UsageRecord.objects.filter(end__isnull=True).update(end=APRIL + timedelta(minutes=30))
    with django_assert_num_queries(2):  # 6 rolled up + 0.5 not yet: 6.5 of 7
        assert check(f0, now=APRIL + timedelta(hours=7)) is None


def test_a_submission_is_refused_at_admission_only_in_burst_and_spot(f0):
    """Through the real admission: an allocation of 0 hours with a hard stop is used up
    from the first second (as a budget of 0.00 caps)."""
    allocate(f0, hours="0", hard_stop=True)

    def submit(gpus: int, market: str = "on_demand"):
        return admission.submit_reservation(
            actor=f0.alice,
            project=f0.alpha,
            gpu_model=f0.model,
            gpu_count=gpus,
            duration_hours=2,
            priority="experiment",
            market=market,
        )

    guaranteed = submit(2)  # within alpha's guarantee of 2
    assert guaranteed.tier == "guaranteed"
    for gpus, market in ((4, "on_demand"), (1, "spot")):
        with pytest.raises(DomainError) as refused:
            submit(gpus, market)
        assert refused.value.code == "gpu_hour_cap"
        assert refused.value.figures == {
            "used_gpu_hours": Decimal("0.00"),
            "allocated_gpu_hours": Decimal("0.00"),
        }
    assert Reservation.objects.filter(project=f0.alpha).count() == 1


def test_the_setting_registers_the_check(settings):
    assert "billing.admission.gpu_hour_cap" in settings.PORTAL_ADMISSION_CHECKS


# --- Setting, validation and access -----------------------------------------------------


def test_a_manager_sets_changes_and_removes_an_allocation_and_an_engineer_cannot(f0):
    made = allocations.set_allocation(
        project=f0.alpha,
        actor=f0.alpha_manager,
        gpu_model=f0.model.name,
        monthly_hours="120.5",
        thresholds=[{"percent": "80", "kind": "actual"}],
        hard_stop=True,
    )
    assert (made.monthly_hours, made.thresholds, made.hard_stop) == (
        Decimal("120.50"),
        [{"percent": 80, "kind": "actual"}],
        True,
    )
    changed = allocate(f0, hours="200")
    assert changed.pk == made.pk and GpuHourAllocation.objects.count() == 1
    assert AuditEvent.objects.filter(verb="allocation.set", project=f0.alpha).count() == 2
    for who in (f0.alice, f0.bob, f0.outsider):
        with pytest.raises(NotPermitted):
            allocations.set_allocation(
                project=f0.alpha, actor=who, gpu_model=f0.model, monthly_hours="1", thresholds=[]
            )
        with pytest.raises(NotPermitted):
            allocations.remove_allocation(project=f0.alpha, actor=who, gpu_model=f0.model)
    allocations.remove_allocation(project=f0.alpha, actor=f0.alpha_manager, gpu_model=f0.model)
    assert not GpuHourAllocation.objects.exists()
    assert AuditEvent.objects.filter(verb="allocation.remove").count() == 1


@pytest.mark.parametrize(
    ("changes", "field"),
    [
        ({"monthly_hours": "-1"}, "monthly_hours"),
        ({"monthly_hours": "ten"}, "monthly_hours"),
        ({"monthly_hours": "1.005"}, "monthly_hours"),
        ({"monthly_hours": "10000000000"}, "monthly_hours"),
        ({"monthly_hours": ""}, "monthly_hours"),
        ({"gpu_model": "No such GPU"}, "gpu_model"),
        ({"gpu_model": ""}, "gpu_model"),
        ({"thresholds": [{"percent": 0, "kind": "actual"}]}, "thresholds"),
        ({"thresholds": [{"percent": 80, "kind": "someday"}]}, "thresholds"),
        ({"thresholds": "80"}, "thresholds"),
        ({"hard_stop": "yes"}, "hard_stop"),
    ],
)
def test_bad_input_names_its_field_and_writes_nothing(f0, changes, field):
    given = {
        "gpu_model": f0.model,
        "monthly_hours": "10",
        "thresholds": [],
        "hard_stop": False,
        **changes,
    }
    with pytest.raises(InvalidInput) as refused:
        allocations.set_allocation(project=f0.alpha, actor=f0.admin, **given)
    assert refused.value.field == field
    assert not GpuHourAllocation.objects.exists()
    assert not AuditEvent.objects.filter(verb="allocation.set").exists()


def test_a_threshold_listed_twice_is_a_conflict_on_thresholds(f0):
    twice = [{"percent": 80, "kind": "actual"}, {"percent": 80, "kind": "actual"}]
    with pytest.raises(Conflict) as refused:
        allocate(f0, thresholds=twice)
    assert (refused.value.field, refused.value.code) == ("thresholds", "duplicate_threshold")


# --- Pages ------------------------------------------------------------------------------


@pytest.fixture
def this_month(f0):
    """alpha this month: 10 GPU-hours of A100 with a hard stop; 3 runs = 7.5 GPU-hours,
    all ended an hour or more ago."""
    allocate(f0, hard_stop=True)
    start = period_start(timezone.now())
    burst = lease(f0, f0.alpha, tier="burst", gpus=2)
    # Short enough to fit in the first minutes of a month; the test waits for none.
    run(burst, start=start, seconds=2 * 3600, gpus=2)
    run(burst, start=start, seconds=5400)
    run(burst, start=start, seconds=7200)
    return start


def test_the_project_pages_spend_section_shows_used_of_allocated(f0, client, this_month):
    if timezone.now() < this_month + timedelta(hours=2):
        pytest.skip("the month's first two hours: the runs have not ended yet")
    client.force_login(f0.alice)
    page = client.get(reverse("billing:statement_partial", args=[f0.alpha.slug]))
    text = page.content.decode()
    assert "used 7.50 of 10.00 GPU-hours of A100 80GB" in text
    assert 'data-width="75"' in text
    assert "allocations-link" not in text  # an engineer does not set allocations
    client.force_login(f0.alpha_manager)
    text = client.get(reverse("billing:statement_partial", args=[f0.alpha.slug])).content
    assert b"allocations-link" in text


def test_the_statement_shows_the_gpu_hours_against_the_allocation(f0, client):
    allocate(f0)
    burst = lease(f0, f0.alpha, tier="burst", gpus=2)
    run(burst, start=APRIL, hours=2, gpus=2)
    run(burst, start=APRIL + timedelta(days=2), hours=1.5)
    run(burst, start=APRIL + timedelta(days=9), hours=2)
    close_period(period=APRIL, now=at(2026, 5, 3))
    client.force_login(f0.alice)
    page = client.get(reverse("billing:statement", args=[f0.alpha.slug]) + "?period=2026-04")
    assert page.status_code == 200
    text = page.content.decode()
    assert 'id="statement-gpu-hours"' in text
    assert "used 7.50 of 10.00 GPU-hours of A100 80GB" in text


def test_the_allocations_page_is_for_managers_and_names_the_bad_field(f0, client):
    url = reverse("billing:allocations", args=[f0.alpha.slug])
    client.force_login(f0.alice)
    assert client.get(url).status_code == 404
    assert client.post(url, {"gpu_model": f0.model.pk, "monthly_hours": "5"}).status_code == 404
    assert not GpuHourAllocation.objects.exists()
    client.force_login(f0.alpha_manager)
    assert client.get(url).status_code == 200
    refused = client.post(url, {"gpu_model": f0.model.pk, "monthly_hours": "lots"})
    assert refused.status_code == 400
    assert 'id="error-allocation-monthly_hours"' in refused.content.decode()
    assert not GpuHourAllocation.objects.exists()
    saved = client.post(
        url,
        {
            "gpu_model": f0.model.pk,
            "monthly_hours": "12.5",
            "thresholds": ["80:actual", "100:forecast", ""],
            "hard_stop": "on",
        },
    )
    assert saved.status_code == 302
    made = GpuHourAllocation.objects.get(project=f0.alpha)
    assert (made.monthly_hours, made.hard_stop) == (Decimal("12.50"), True)
    assert made.thresholds == [
        {"percent": 80, "kind": "actual"},
        {"percent": 100, "kind": "forecast"},
    ]
    assert "used 0.00 of 12.50 GPU-hours" in client.get(url).content.decode()
    remove = reverse("billing:allocation_remove", args=[f0.alpha.slug])
    client.force_login(f0.alice)
    assert client.post(remove, {"gpu_model": f0.model.pk}).status_code == 404
    client.force_login(f0.alpha_manager)
    assert client.post(remove, {"gpu_model": f0.model.pk}).status_code == 302
    assert not GpuHourAllocation.objects.exists()


# --- The API and configuration as code ---------------------------------------------------


def test_the_api_sets_lists_and_removes_allocations_for_managers_only(f0):
    listing = reverse("api:gpu-hour-allocation-list")
    body = {
        "project": "alpha",
        "gpu_model": "A100 80GB",
        "monthly_hours": "10.00",
        "hard_stop": True,
        "thresholds": [{"percent": 80, "kind": "actual"}],
    }
    assert client_for(f0.alice).post(listing, body, format="json").status_code == 404
    assert not GpuHourAllocation.objects.exists()
    made = client_for(f0.alpha_manager).post(listing, body, format="json")
    assert made.status_code == 201, made.content
    assert made.json() | {"id": 0} == {
        "id": 0,
        "project": "alpha",
        "gpu_model": "A100 80GB",
        "monthly_hours": "10.00",
        "hard_stop": True,
        "thresholds": [{"percent": 80, "kind": "actual"}],
        "used_gpu_hours": "0.00",
    }
    again = client_for(f0.alpha_manager).post(
        listing, {**body, "monthly_hours": "-1"}, format="json"
    )
    assert again.status_code == 400 and "monthly_hours" in again.json()["errors"]
    unknown = client_for(f0.alpha_manager).post(listing, {**body, "gpu_model": "Z9"}, format="json")
    assert (unknown.status_code, unknown.json()["field"]) == (400, "gpu_model")
    assert [row["project"] for row in client_for(f0.alice).get(listing).json()["results"]] == [
        "alpha"
    ]
    assert client_for(f0.bob).get(listing).json()["results"] == []
    detail = reverse("api:gpu-hour-allocation-detail", kwargs={"pk": made.json()["id"]})
    assert client_for(f0.alice).delete(detail).status_code == 404
    assert client_for(f0.bob).delete(detail).status_code == 404
    assert client_for(f0.alpha_manager).delete(detail).status_code == 204
    assert not GpuHourAllocation.objects.exists()


def test_configuration_as_code_exports_sets_and_removes_allocations(f0):
    allocate(f0, hours="10", thresholds=[{"percent": 80, "kind": "actual"}], hard_stop=True)
    text = projectconfig.export_project(f0.alpha)
    assert "gpu_hour_allocations:\n- gpu_model: A100 80GB\n  monthly_hours: '10.00'" in text
    changed = text.replace("monthly_hours: '10.00'", "monthly_hours: '12.5'")
    plan = projectconfig.plan(changed, actor=f0.alpha_manager)
    assert "gpu_hour_allocations[A100 80GB].monthly_hours: 10.00 → 12.50" in plan.changes
    projectconfig.apply(plan, actor=f0.alpha_manager)
    assert GpuHourAllocation.objects.get().monthly_hours == Decimal("12.50")
    # A document without the key changes none (one written before allocations existed).
    start, end = changed.index("gpu_hour_allocations:"), changed.index("\nmembers:")
    without = changed[:start] + changed[end + 1 :]
    assert "gpu_hour" not in without
    assert projectconfig.plan(without, actor=f0.alpha_manager).changes == []
    bad = changed.replace("monthly_hours: '12.5'", "monthly_hours: lots")
    with pytest.raises(InvalidInput) as refused:
        projectconfig.plan(bad, actor=f0.alpha_manager)
    assert refused.value.field == "gpu_hour_allocations[0].monthly_hours"
    with pytest.raises(NotPermitted):
        projectconfig.plan(changed.replace("'12.5'", "'13'"), actor=f0.alice)
    # An empty list removes them.
    emptied = changed[:start] + "gpu_hour_allocations: []" + changed[end:]
    plan = projectconfig.plan(emptied, actor=f0.alpha_manager)
    assert plan.changes == ["gpu_hour_allocations: remove A100 80GB"]
    projectconfig.apply(plan, actor=f0.alpha_manager)
    assert not GpuHourAllocation.objects.exists()


def test_the_pages_with_allocations_keep_their_queries_at_any_size(f0, client):
    """An allocation adds one query to a page (the allocations with their use), however
    many runs and allocations there are."""
    Membership.objects.filter(user=f0.alpha_manager, project=f0.alpha).update(role="manager")
    client.force_login(f0.alpha_manager)
    rng = random.Random(5)
    slug = f0.alpha.slug
    urls = [
        reverse("billing:statement", args=[slug]),
        reverse("billing:statement_partial", args=[slug]),
        reverse("billing:allocations", args=[slug]),
    ]

    def grow(runs: int) -> dict[str, int]:
        # Runs of the last two days: the ended ones rolled up, every seventh running.
        leases = [lease(f0, project, tier="burst") for project in (f0.alpha, f0.beta)]
        for index in range(runs):
            start = timezone.now() - timedelta(seconds=rng.randint(3 * 3600, 2 * 86400))
            end = None if index % 7 == 0 else start + timedelta(seconds=rng.randint(0, 7200))
            run(rng.choice(leases), start=start, end=end, gpus=rng.randint(1, 4))
        spend.refresh(now=timezone.now())  # rolls the ended runs up
        return {url: queries(client, url) for url in urls}

    allocate(f0, hard_stop=True)
    few = grow(6)
    allocate(f0, model=factories.gpu_model("H100 80GB"))
    many = grow(40)
    assert few == many, (few, many)
    assert max(many.values()) <= MOST_QUERIES, many
