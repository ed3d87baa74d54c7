"""Give each demo project a monthly budget with alert thresholds, and close last month.
Idempotent.

Runs after ``seed_demo`` (``manage.py demo`` calls both); a project that already has a
budget keeps it.
"""

from datetime import timedelta
from decimal import Decimal
from typing import Any

from django.contrib.auth import get_user_model
from django.core.management.base import BaseCommand
from django.db import transaction
from django.utils import timezone

from billing import services
from billing.models import Budget
from billing.periods import period_start
from portal import audit
from portal.models import Project

# project slug → monthly amount, cap policy
DEMO_BUDGETS: dict[str, tuple[Decimal, str]] = {
    "vision": (Decimal("2000.00"), Budget.CapPolicy.REFUSE_NEW),
    "nlp": (Decimal("6000.00"), Budget.CapPolicy.REFUSE_NEW),
    "speech": (Decimal("1200.00"), Budget.CapPolicy.STOP_BURST),
}
DEMO_THRESHOLDS = [
    {"percent": 50, "kind": "actual"},
    {"percent": 80, "kind": "actual"},
    {"percent": 100, "kind": "forecast"},
    {"percent": 100, "kind": "actual"},
]


class Command(BaseCommand):
    help = "Give the demo projects budgets (idempotent)."

    @transaction.atomic
    def handle(self, *args: Any, **options: Any) -> None:
        admin = get_user_model().objects.filter(username="admin").first()
        for project in Project.objects.filter(slug__in=DEMO_BUDGETS):
            amount, cap_policy = DEMO_BUDGETS[project.slug]
            budget, created = Budget.objects.get_or_create(
                project=project,
                defaults={
                    "monthly_amount": amount,
                    "thresholds": DEMO_THRESHOLDS,
                    "cap_policy": cap_policy,
                },
            )
            if created:
                audit.record(
                    actor=admin,
                    verb="budget.set",
                    obj=budget,
                    project=project,
                    source="command",
                    after={"monthly_amount": amount, "cap_policy": cap_policy},
                )
                self.stdout.write(f"  budget {project.slug}: {amount}/month")
        # Close last month (its history is seeded), so sign-off, disputes and the
        # finance page have a real closed month to show. Closing again does nothing.
        now = timezone.now()
        previous = period_start(period_start(now) - timedelta(days=1))
        closed = services.close_period(period=previous, actor=admin, now=now)
        if closed:
            self.stdout.write(f"  closed {previous:%Y-%m}: {closed} statements")
