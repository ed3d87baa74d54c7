"""Celery tasks of the money side: thin interfaces to services."""

from celery import shared_task

from billing import budgets, reports, services, spend


@shared_task(acks_late=True, ignore_result=True)
def evaluate_budgets_task() -> None:
    budgets.evaluate_budgets()


@shared_task(acks_late=True, ignore_result=True)
def close_due_periods_task() -> None:
    services.close_due_periods()


@shared_task(acks_late=True, ignore_result=True)
def refresh_spend_task() -> None:
    spend.refresh()


@shared_task(acks_late=True, ignore_result=True)
def keep_commitment_advice_task() -> None:
    reports.keep_commitment_advice()
