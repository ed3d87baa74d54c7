"""Celery tasks of the money side: thin interfaces to services."""

from celery import shared_task

from billing import allocations, budgets, reports, services, spend


@shared_task(acks_late=True, ignore_result=True)
def evaluate_budgets_task() -> None:
    """Hourly: budgets' thresholds and cap policy (BU1, BU3), then GPU-hour allocations'
    thresholds (GA1)."""
    budgets.evaluate_budgets()
    allocations.evaluate_allocations()


@shared_task(acks_late=True, ignore_result=True)
def close_due_periods_task() -> None:
    services.close_due_periods()


@shared_task(acks_late=True, ignore_result=True)
def refresh_spend_task() -> None:
    spend.refresh()


@shared_task(acks_late=True, ignore_result=True)
def keep_commitment_advice_task() -> None:
    reports.keep_commitment_advice()
