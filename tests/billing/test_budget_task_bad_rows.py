"""The budget task over a budget it cannot evaluate (thresholds stored malformed by an
old version, the admin or an import; a spend too large for an alert's column): that
budget is skipped and reported by name, and every other budget is evaluated as usual."""

import logging
from datetime import timedelta
from decimal import Decimal

import pytest
from django.db import connection

from billing import budgets, spend
from billing.models import Budget, BudgetAlert, SpendSnapshot
from billing.tasks import evaluate_budgets_task
from rental.models import Instance, UsageRecord
from tests.billing.helpers import at, lease, run

APRIL = at(2026, 4, 1)
NOW = at(2026, 4, 3)  # 48 h of April: actual and forecast both known

MALFORMED = [
    ('[{"percent": 1000000000000000000000000000000, "kind": "actual"}]', "percent"),
    ('[{"percent": "abc", "kind": "actual"}]', "percent"),
    ('[{"percent": 50}]', "Each threshold"),
    ('[{"percent": 50, "kind": "sideways"}]', "kind"),
    ('["50:actual"]', "Each threshold"),
    ('{"percent": 50, "kind": "actual"}', "not a list"),
    ('"abc"', "not a list"),
    ("null", "not a list"),
]


@pytest.fixture
def two_budgets(f0):
    """alpha and gamma each run 1 GPU at $2.50 from April 1: $120.00 by NOW. gamma's $100
    budget has a well-formed 50 % actual threshold; alpha's is the one under test."""
    for project in (f0.alpha, f0.gamma):
        run(lease(f0, project, tier="burst", status="active"), start=APRIL)
    Budget.objects.create(
        project=f0.alpha,
        monthly_amount=Decimal("100.00"),
        thresholds=[{"percent": 50, "kind": "actual"}],
    )
    Budget.objects.create(
        project=f0.gamma,
        monthly_amount=Decimal("100.00"),
        thresholds=[{"percent": 50, "kind": "actual"}],
    )
    return f0


def store_thresholds(project, json_text: str) -> None:
    """As an old version or a hand-made UPDATE left them: past every check."""
    with connection.cursor() as cursor:
        cursor.execute(
            "UPDATE billing_budget SET thresholds = %s::jsonb WHERE project_id = %s",
            [json_text, project.pk],
        )


def fired_for(project) -> list[tuple[int, str]]:
    return list(BudgetAlert.objects.filter(budget__project=project).values_list("percent", "kind"))


@pytest.mark.parametrize(("stored", "says"), MALFORMED)
def test_it_skips_a_budget_with_malformed_thresholds_and_evaluates_the_others(
    two_budgets, caplog, stored, says
):
    store_thresholds(two_budgets.alpha, stored)
    with caplog.at_level(logging.WARNING, logger="billing.budgets"):
        fired = budgets.evaluate_budgets(now=NOW)
    assert [(alert.budget.project.slug, alert.percent) for alert in fired] == [("gamma", 50)]
    assert fired_for(two_budgets.gamma) == [(50, "actual")]
    assert fired_for(two_budgets.alpha) == []
    [warning] = [r for r in caplog.records if r.name == "billing.budgets"]
    assert warning.levelno == logging.WARNING
    assert "alpha" in warning.getMessage() and says in warning.getMessage()
    assert "gamma" not in warning.getMessage()


def test_the_task_itself_does_not_fail_on_a_bad_budget(two_budgets):
    store_thresholds(two_budgets.alpha, '"abc"')
    evaluate_budgets_task.apply().get()  # in this process, as the beat would run it
    assert fired_for(two_budgets.gamma) == [(50, "actual")]


def huge_spend(f0, project) -> None:
    """The project's run billed at the highest rate its columns hold, on 32,767 GPUs:
    about $1.6 × 10¹² by NOW, more than an alert's value column (14 digits) holds."""
    record = UsageRecord.objects.get(project=project)
    UsageRecord.objects.filter(pk=record.pk).update(
        rate=Decimal("999999.999999"), gpu_count=2**15 - 1
    )
    Instance.objects.filter(pk=record.instance_id).update(gpu_count=2**15 - 1)


def test_it_skips_a_budget_whose_spend_overflows_an_alert_and_evaluates_the_others(
    two_budgets, caplog
):
    huge_spend(two_budgets, two_budgets.alpha)
    with caplog.at_level(logging.WARNING, logger="billing.budgets"):
        budgets.evaluate_budgets(now=NOW)
    assert fired_for(two_budgets.gamma) == [(50, "actual")]
    assert fired_for(two_budgets.alpha) == []
    [warning] = [r for r in caplog.records if r.name == "billing.budgets"]
    assert "alpha" in warning.getMessage() and "too large" in warning.getMessage()


def test_a_good_budget_with_a_bad_neighbour_fires_once_per_period(two_budgets):
    store_thresholds(two_budgets.alpha, "null")
    for hour in range(3):
        budgets.evaluate_budgets(now=NOW + timedelta(hours=hour))
    assert fired_for(two_budgets.gamma) == [(50, "actual")]


def test_the_spend_refresh_keeps_every_row_but_one_too_large_for_its_column(two_budgets, caplog):
    huge_spend(two_budgets, two_budgets.alpha)
    with caplog.at_level(logging.WARNING, logger="billing.spend"):
        written = spend.refresh(now=NOW)
    kept = dict(SpendSnapshot.objects.values_list("project__slug", "amount"))
    assert kept["gamma"] == Decimal("120.00")
    assert "alpha" not in kept
    assert written == len(kept)
    assert any("alpha" in r.getMessage() for r in caplog.records if r.name == "billing.spend")
