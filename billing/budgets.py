"""Budgets (BU1–BU3): a project's monthly budget and thresholds, evaluated hourly; each
threshold fires at most once a period; at 100 % actual the cap (billing.admission)
refuses new burst, spot and booked leases, and ``stop_burst`` ends the running ones."""

import logging
from collections.abc import Iterable
from dataclasses import dataclass
from datetime import date, datetime, timedelta
from decimal import Decimal
from typing import Any

from django.core.exceptions import ValidationError
from django.db import IntegrityError, transaction
from django.urls import reverse
from django.utils import timezone, translation
from django.utils.translation import gettext as _
from django.utils.translation import gettext_noop

from billing.models import Budget, BudgetAlert
from billing.money import AMOUNT_LIMIT
from billing.periods import period_end, period_start, whole_seconds
from billing.selectors import month_to_date
from billing.services import SOURCE, parse_amount
from billing.thresholds import clean_thresholds, readable_thresholds
from portal import access, audit, notifications
from portal.errors import Conflict, InvalidInput, NotPermitted
from portal.models import Project
from portal.phrases import Phrase
from rental.loans.ending import end_reservation
from rental.models import Reservation, TerminationReason, Tier

log = logging.getLogger(__name__)


@dataclass(frozen=True)
class BudgetStanding:
    """A project's spend against its budget this period."""

    budget: Decimal
    actual: Decimal
    forecast: Decimal | None  # None before 24 h of the period (BU2)
    elapsed_seconds: int
    period_seconds: int

    @property
    def capped(self) -> bool:
        return self.actual >= self.budget

    @property
    def percent(self) -> Decimal:
        if not self.budget:
            return Decimal("0")
        return (self.actual * 100 / self.budget).quantize(Decimal("0.1"))


FORECAST_AFTER = timedelta(hours=24)


def standing(*, budget: Decimal, actual: Decimal, now: datetime) -> BudgetStanding:
    """BU2: actual is accrued to now; forecast = accrued × period length / elapsed, only
    once 24 h of the period have passed."""
    start = period_start(now)
    elapsed = whole_seconds(now - start)
    length = whole_seconds(period_end(start) - start)
    forecast = None
    if now - start >= FORECAST_AFTER and elapsed:
        forecast = (actual * length / elapsed).quantize(Decimal("0.01"))
    return BudgetStanding(
        budget=budget,
        actual=actual,
        forecast=forecast,
        elapsed_seconds=elapsed,
        period_seconds=length,
    )


def crossed_thresholds(
    thresholds: Iterable[dict], standing_: BudgetStanding
) -> list[tuple[int, str, Decimal]]:
    """BU1: the thresholds whose value is strictly greater than budget × percent."""
    fired = []
    for threshold in thresholds:
        percent, kind = int(threshold["percent"]), threshold["kind"]
        value = standing_.actual if kind == "actual" else standing_.forecast
        if value is None:
            continue
        if value * 100 > standing_.budget * percent:
            fired.append((percent, kind, value))
    return fired


def evaluate_budgets(*, now: datetime | None = None) -> list[BudgetAlert]:
    """The hourly task's work: fire each crossed threshold once per period (BU1) and, for a
    budget at its cap with policy ``stop_burst``, end its running burst leases (BU3).

    A budget that cannot be evaluated (thresholds stored malformed by an old version, the
    admin or an import; a spend too large for an alert's column) is skipped with a warning
    naming its project and the fault, and the other budgets are evaluated all the same."""
    now = now or timezone.now()
    budgets = list(Budget.objects.select_related("project").filter(project__is_active=True))
    if not budgets:
        return []
    spend = month_to_date(project_ids=[b.project_id for b in budgets], now=now)
    period = period_start(now).date()
    fired: list[BudgetAlert] = []
    for budget in budgets:
        current = standing(
            budget=budget.monthly_amount,
            actual=spend.get(budget.project_id, Decimal("0.00")),
            now=now,
        )
        fault = _fault(budget, current)
        if fault:
            log.warning("budget of project %s skipped: %s", budget.project.slug, fault)
            continue
        thresholds, _problem = readable_thresholds(budget.thresholds)
        for percent, kind, value in crossed_thresholds(thresholds, current):
            alert = _fire(budget, period=period, percent=percent, kind=kind, value=value, now=now)
            if alert is not None:
                fired.append(alert)
        if current.capped and budget.cap_policy == Budget.CapPolicy.STOP_BURST:
            _stop_burst(budget, now=now)
    return fired


def _fault(budget: Budget, current: BudgetStanding) -> str:
    """Why ``budget`` cannot be evaluated now, in the operators' words; "" when it can."""
    with translation.override("en"):
        _kept, problem = readable_thresholds(budget.thresholds)
        if problem:
            return f"its thresholds are malformed ({problem})"
    for name, value in (("actual", current.actual), ("forecast", current.forecast)):
        if value is not None and abs(value) >= AMOUNT_LIMIT:
            return f"its {name} spend {value} is too large for an alert (at most 14 digits)"
    return ""


# A threshold's kind as a word in a sentence ("forecast spend passed 80 %").
SPEND_WORDS = {
    BudgetAlert.Kind.ACTUAL: gettext_noop("actual"),
    BudgetAlert.Kind.FORECAST: gettext_noop("forecast"),
}


def _fire(
    budget: Budget, *, period: date, percent: int, kind: str, value: Decimal, now: datetime
) -> BudgetAlert | None:
    try:
        with transaction.atomic():
            alert = BudgetAlert.objects.create(
                budget=budget, period=period, percent=percent, kind=kind, value=value, fired_at=now
            )
            audit.record(
                actor=None,
                verb="budget.alert",
                obj=alert,
                project=budget.project,
                source="worker",
                after={"percent": percent, "kind": kind, "value": value},
                at=now,
            )
            notifications.notify(
                [*notifications.managers_of(budget.project)],
                subject=Phrase(
                    gettext_noop("%(project)s: %(kind)s spend passed %(percent)s%% of its budget"),
                    project=budget.project.name,
                    kind=Phrase(SPEND_WORDS[kind]) if kind in SPEND_WORDS else kind,
                    percent=percent,
                ),
                body=Phrase(
                    gettext_noop("%(value)s of %(budget)s"),
                    value=value,
                    budget=budget.monthly_amount,
                ),
                link=reverse("rental:project", args=[budget.project.slug]),
                event=notifications.Event.BUDGET_THRESHOLD,
                project=budget.project,
            )
    except IntegrityError:
        return None  # fired already this period (the unique constraint says so)
    return alert


def _stop_burst(budget: Budget, *, now: datetime) -> None:
    """BU3 with policy ``stop_burst``: the project's running burst and spot leases end
    (as if its manager ended them: the project's own policy, so the B1 minimum holds)."""
    for lease in Reservation.objects.filter(
        project=budget.project,
        status__in=(Reservation.Status.PROVISIONING, Reservation.Status.ACTIVE),
        tier__in=(Tier.BURST, Tier.SPOT),
    ):
        with transaction.atomic():
            end_reservation(
                actor=None,
                reservation=lease,
                reason=TerminationReason.USER,
                now=now,
                source="worker",
            )


@transaction.atomic
def set_budget(
    *,
    project: Project,
    actor: Any,
    monthly_amount: Any,
    thresholds: list[dict],
    cap_policy: str = Budget.CapPolicy.REFUSE_NEW,
    source: str = SOURCE,
) -> Budget:
    """A manager sets the project's monthly budget and its thresholds."""
    if not access.can_manage(actor, project):
        raise NotPermitted(_("Only the project's manager sets its budget."))
    label = _("Monthly amount")
    amount = parse_amount(monthly_amount, field="monthly_amount", label=label)
    if amount < 0:
        raise InvalidInput(
            _("%(field)s: %(problem)s")
            % {"field": label, "problem": _("A budget is not negative.")},
            field="monthly_amount",
        )
    if cap_policy not in Budget.CapPolicy.values:
        raise InvalidInput(_("Choose a cap policy."), field="cap_policy")

    try:
        cleaned = clean_thresholds(thresholds)
    except ValidationError as invalid:
        message = " ".join(invalid.messages)
        if invalid.code == "duplicate":  # a rule over two items, which no schema says
            raise Conflict(message, code="duplicate_threshold", field="thresholds") from None
        raise InvalidInput(message, field="thresholds") from None
    budget = Budget.objects.select_for_update().filter(project=project).first()
    before = (
        {"monthly_amount": budget.monthly_amount, "thresholds": budget.thresholds} if budget else {}
    )
    if budget is None:
        budget = Budget(project=project)
    budget.monthly_amount = amount
    budget.thresholds = cleaned
    budget.cap_policy = cap_policy
    budget.save()
    audit.record(
        actor=actor,
        verb="budget.set",
        obj=budget,
        project=project,
        source=source,
        before=before,
        after={"monthly_amount": amount, "thresholds": cleaned, "cap_policy": cap_policy},
    )
    return budget
