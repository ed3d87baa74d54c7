"""Budgets (BU1–BU3), SCENARIOS.md 14, and the admission check through its contract."""

from datetime import timedelta
from decimal import Decimal

import pytest

from billing import budgets
from billing.admission import budget_cap
from billing.models import Budget, BudgetAlert
from portal.errors import NotPermitted
from portal.models import AuditEvent, Notification
from rental.models import Reservation
from tests import factories
from tests.billing.helpers import at, lease, run

APRIL = at(2026, 4, 1)


def check(project, *, tier="burst", is_reservation=False, now):
    return budget_cap(
        project=project,
        gpu_model=None,
        gpu_count=1,
        tier=tier,
        market="spot" if tier == "spot" else "on_demand",
        starts_at=now,
        ends_at=now + timedelta(hours=2),
        is_reservation=is_reservation,
        now=now,
    )


@pytest.fixture
def gamma_running(f0):
    """gamma: a $1,000 April budget; 2 GPUs running from Apr 1 00:00 at $2.50 ($5.00/h)."""
    Budget.objects.create(
        project=f0.gamma,
        monthly_amount=Decimal("1000.00"),
        thresholds=[
            {"percent": 50, "kind": "actual"},
            {"percent": 80, "kind": "actual"},
            {"percent": 100, "kind": "forecast"},
        ],
    )
    running = lease(f0, f0.gamma, tier="burst", gpus=2, status="active")
    run(running, start=APRIL, gpus=2)
    factories.member(factories.user("gina"), f0.gamma, "manager")
    return running


def test_scenario_14_each_threshold_fires_once_when_strictly_greater(f0, gamma_running):
    moment = APRIL + timedelta(hours=1)
    while moment <= at(2026, 4, 10):
        budgets.evaluate_budgets(now=moment)
        moment += timedelta(hours=1)
    fired = {
        (alert.percent, alert.kind): (alert.fired_at, alert.value)
        for alert in BudgetAlert.objects.filter(budget__project=f0.gamma)
    }
    assert fired == {
        (50, "actual"): (at(2026, 4, 5, 5), Decimal("505.00")),
        (80, "actual"): (at(2026, 4, 7, 17), Decimal("805.00")),
        (100, "forecast"): (at(2026, 4, 2), Decimal("3600.00")),
    }
    assert BudgetAlert.objects.count() == 3
    assert Notification.objects.filter(user__username="gina").count() == 3
    assert AuditEvent.objects.filter(verb="budget.alert").count() == 3


def test_exactly_the_threshold_does_not_fire(f0, gamma_running):
    budgets.evaluate_budgets(now=at(2026, 4, 5, 4))  # exactly $500
    assert not BudgetAlert.objects.filter(percent=50).exists()
    budgets.evaluate_budgets(now=at(2026, 4, 5, 5))
    assert BudgetAlert.objects.filter(percent=50).count() == 1


def test_forecast_waits_for_24_hours(f0, gamma_running):
    budgets.evaluate_budgets(now=at(2026, 4, 1, 23, 59, 59))
    assert not BudgetAlert.objects.filter(kind="forecast").exists()
    budgets.evaluate_budgets(now=at(2026, 4, 2))
    assert BudgetAlert.objects.filter(kind="forecast").count() == 1


def test_a_threshold_fires_again_in_the_next_period(f0, gamma_running):
    budgets.evaluate_budgets(now=at(2026, 4, 30, 23))
    budgets.evaluate_budgets(now=at(2026, 4, 30, 23, 30))
    assert BudgetAlert.objects.filter(percent=50).count() == 1
    # May: 101 h → $505 again.
    budgets.evaluate_budgets(now=at(2026, 5, 5, 5))
    assert BudgetAlert.objects.filter(percent=50).count() == 2


def test_the_cap_refuses_new_burst_spot_and_reservations_at_100_percent(f0, gamma_running):
    before = at(2026, 4, 9, 7)
    capped = at(2026, 4, 9, 8)  # $1,000.00: reached
    assert check(f0.gamma, now=before) is None
    code, message, figures = check(f0.gamma, now=capped)
    assert code == "budget_cap"
    assert "1000.00" in str(message)
    assert figures == {"spent": Decimal("1000.00"), "budget": Decimal("1000.00")}
    assert check(f0.gamma, tier="spot", now=capped)[0] == "budget_cap"
    assert check(f0.gamma, tier="guaranteed", is_reservation=True, now=capped)[0] == "budget_cap"
    assert check(f0.gamma, tier="guaranteed", now=capped) is None
    # Another project is not capped by gamma's budget.
    assert check(f0.alpha, now=capped) is None
    # The running lease continues under the default policy.
    budgets.evaluate_budgets(now=capped)
    gamma_running.refresh_from_db()
    assert gamma_running.status == "active"


def test_policy_stop_burst_ends_running_burst_leases_at_the_cap(f0, gamma_running):
    Budget.objects.filter(project=f0.gamma).update(cap_policy=Budget.CapPolicy.STOP_BURST)
    budgets.evaluate_budgets(now=at(2026, 4, 9, 7))
    gamma_running.refresh_from_db()
    assert gamma_running.status == "active"
    budgets.evaluate_budgets(now=at(2026, 4, 9, 8))
    gamma_running.refresh_from_db()
    assert gamma_running.status in (Reservation.Status.ENDING, Reservation.Status.ENDED)


def test_no_budget_no_cap(f0):
    assert check(f0.alpha, now=at(2026, 4, 9)) is None


def test_the_setting_registers_the_check(settings):
    assert "billing.admission.budget_cap" in settings.PORTAL_ADMISSION_CHECKS


def test_a_manager_sets_the_budget_and_an_engineer_cannot(f0):
    budget = budgets.set_budget(
        project=f0.alpha,
        actor=f0.alpha_manager,
        monthly_amount="2500.00",
        thresholds=[{"percent": 80, "kind": "actual"}],
    )
    assert budget.monthly_amount == Decimal("2500.00")
    assert AuditEvent.objects.filter(verb="budget.set", project=f0.alpha).exists()
    with pytest.raises(NotPermitted):
        budgets.set_budget(project=f0.alpha, actor=f0.alice, monthly_amount="1.00", thresholds=[])
