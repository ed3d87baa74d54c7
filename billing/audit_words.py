"""How billing's audit events read (``portal.audit_log``): budgets and their alerts,
statements, their lines, disputes and corrections, in the reader's language."""

from collections.abc import Mapping
from typing import Any

from django.urls import reverse
from django.utils.translation import gettext_lazy as _

from billing.models import (
    Budget,
    BudgetAlert,
    GpuHourAlert,
    GpuHourAllocation,
    LineDispute,
    Statement,
    StatementLine,
)
from billing.reconcile_models import CostImport
from portal.audit_log import (
    Kind,
    Named,
    Value,
    Verb,
    amount,
    choice,
    data,
    numeric_ids,
    plain,
)
from portal.templatetags.portal_tags import money


def _statement_url(statement: Statement) -> str:
    if statement.project is None:
        return reverse("billing:finance")
    url = reverse("billing:statement", args=[statement.project.slug])
    return f"{url}?period={statement.period:%Y-%m}"


def _statement_name(statement: Statement) -> str:
    owner = statement.project.name if statement.project else _("the platform")
    return _("the %(period)s statement of %(project)s") % {
        "period": f"{statement.period:%Y-%m}",
        "project": owner,
    }


def _statements(ids: list[str]) -> Mapping[str, Named]:
    found = Statement.objects.filter(pk__in=numeric_ids(ids)).select_related("project")
    return {str(s.pk): Named(_statement_name(s), _statement_url(s)) for s in found}


def _lines(ids: list[str]) -> Mapping[str, Named]:
    found = StatementLine.objects.filter(pk__in=numeric_ids(ids)).select_related(
        "statement__project"
    )
    return {
        str(line.pk): Named(
            _("a line of %(statement)s") % {"statement": _statement_name(line.statement)},
            _statement_url(line.statement),
        )
        for line in found
    }


def _disputes(ids: list[str]) -> Mapping[str, Named]:
    found = LineDispute.objects.filter(pk__in=numeric_ids(ids)).select_related(
        "line__statement__project"
    )
    return {
        str(dispute.pk): Named(
            _("the dispute of a line of %(statement)s")
            % {"statement": _statement_name(dispute.line.statement)},
            _statement_url(dispute.line.statement),
        )
        for dispute in found
    }


def _budgets(ids: list[str]) -> Mapping[str, Named]:
    found = Budget.objects.filter(pk__in=numeric_ids(ids)).select_related("project")
    return {
        str(budget.pk): Named(
            _("the budget of %(project)s") % {"project": budget.project.name},
            reverse("rental:project", args=[budget.project.slug]),
        )
        for budget in found
    }


def _alerts(ids: list[str]) -> Mapping[str, Named]:
    found = BudgetAlert.objects.filter(pk__in=numeric_ids(ids)).select_related("budget__project")
    return {
        str(alert.pk): Named(
            _("the budget of %(project)s") % {"project": alert.budget.project.name},
            reverse("rental:project", args=[alert.budget.project.slug]),
        )
        for alert in found
    }


def _allocation_name(allocation: GpuHourAllocation) -> Named:
    return Named(
        _("the %(model)s GPU-hour allocation of %(project)s")
        % {"model": allocation.gpu_model.name, "project": allocation.project.name},
        reverse("rental:project", args=[allocation.project.slug]),
    )


def _allocations(ids: list[str]) -> Mapping[str, Named]:
    found = GpuHourAllocation.objects.filter(pk__in=numeric_ids(ids)).select_related(
        "project", "gpu_model"
    )
    return {str(allocation.pk): _allocation_name(allocation) for allocation in found}


def _hour_alerts(ids: list[str]) -> Mapping[str, Named]:
    found = GpuHourAlert.objects.filter(pk__in=numeric_ids(ids)).select_related(
        "allocation__project", "allocation__gpu_model"
    )
    return {str(alert.pk): _allocation_name(alert.allocation) for alert in found}


def _bills(ids: list[str]) -> Mapping[str, Named]:
    found = CostImport.objects.filter(pk__in=numeric_ids(ids))
    return {
        str(bill.pk): Named(
            _("the provider bill %(file)s of %(period)s")
            % {"file": bill.file_name, "period": f"{bill.period:%Y-%m}"},
            reverse("billing:reconcile_import", args=[bill.pk]),
        )
        for bill in found
    }


def _percent(value: Any) -> str:
    return "—" if value in (None, "") else f"{value} %"


KINDS_OF_SPEND = dict(BudgetAlert.Kind.choices)


def _thresholds(value: Any) -> str:
    """``[{"percent": 80, "kind": "actual"}]`` as "80 % (actual)"."""
    items = data(value)
    if not isinstance(items, list):
        return plain(items)
    said = []
    for item in items:
        if isinstance(item, dict):
            kind = KINDS_OF_SPEND.get(item.get("kind"), item.get("kind", ""))
            said.append(f"{_percent(item.get('percent'))} ({str(kind).lower()})")
        else:
            said.append(plain(item))
    return ", ".join(said) or "—"


VERBS = {
    "budget.set": Verb(
        _("%(actor)s set %(object)s to %(monthly_amount)s a month"), _("Budget set")
    ),
    "budget.alert": Verb(
        _("%(object)s passed %(percent)s (%(kind)s): %(value)s"), _("Budget alert")
    ),
    "allocation.set": Verb(
        _("%(actor)s set %(object)s to %(monthly_hours)s GPU-hours a month"),
        _("GPU-hour allocation set"),
    ),
    "allocation.remove": Verb(_("%(actor)s removed %(object)s"), _("GPU-hour allocation removed")),
    "allocation.alert": Verb(
        _("%(object)s passed %(percent)s (%(kind)s): %(gpu_hours)s GPU-hours"),
        _("GPU-hour alert"),
    ),
    "statement.close": Verb(
        _("%(actor)s closed %(object)s: %(total)s in %(lines)s lines"), _("Statement closed")
    ),
    "statement.approve": Verb(_("%(actor)s signed off %(object)s"), _("Statement signed off")),
    "statement.dispute": Verb(
        _("%(actor)s disputed %(object)s (%(amount)s): %(comment)s"), _("Line disputed")
    ),
    "statement.dispute_answer": Verb(
        _("%(actor)s answered %(object)s: %(answer)s"), _("Dispute answered")
    ),
    "statement.adjustment": Verb(
        _("%(actor)s added an adjustment of %(amount)s to %(object)s: %(description)s"),
        _("Adjustment added"),
    ),
    "statement.credit": Verb(
        _("%(actor)s added a credit of %(amount)s to %(object)s: %(description)s"),
        _("Credit added"),
    ),
    "bill.import": Verb(
        _(
            "%(actor)s imported %(object)s: the provider charged %(provider)s, the portal's "
            "cost is %(portal)s, %(flagged)s flagged"
        ),
        _("Provider bill imported"),
    ),
    "bill.acknowledge": Verb(
        _("%(actor)s acknowledged the differences of %(object)s: %(note)s"),
        _("Bill differences acknowledged"),
    ),
}

KINDS = {
    "billing.statement": Kind(_("statement"), _statements),
    "billing.statementline": Kind(_("statement line"), _lines),
    "billing.linedispute": Kind(_("dispute"), _disputes),
    "billing.budget": Kind(_("budget"), _budgets),
    "billing.budgetalert": Kind(_("budget alert"), _alerts),
    "billing.gpuhourallocation": Kind(_("GPU-hour allocation"), _allocations),
    "billing.gpuhouralert": Kind(_("GPU-hour alert"), _hour_alerts),
    "billing.costimport": Kind(_("provider bill"), _bills),
}

VALUES = {
    "billing.statement:status": Value(_("Status"), choice(Statement.Status)),
    "monthly_amount": Value(_("Monthly budget"), money),
    "thresholds": Value(_("Thresholds"), _thresholds),
    "cap_policy": Value(_("When the budget is spent"), choice(Budget.CapPolicy)),
    "billing.gpuhourallocation:gpu_model": Value(_("GPU model")),
    "monthly_hours": Value(_("GPU-hours a month"), amount),
    "hard_stop": Value(_("Hard stop")),
    "gpu_hours": Value(_("GPU-hours used"), amount),
    "percent": Value(_("Threshold"), _percent),
    "kind": Value(_("Measured on"), choice(BudgetAlert.Kind)),
    "value": Value(_("Spent"), money),
    "period": Value(_("Month")),
    "total": Value(_("Total"), money),
    "lines": Value(_("Lines")),
    "line": Value(_("Line")),
    "amount": Value(_("Amount"), money),
    "answer": Value(_("Answer")),
    "correction": Value(_("Correction"), money),
    "description": Value(_("Description")),
    "file": Value(_("File")),
    "provider": Value(_("Provider's cost"), money),
    "portal": Value(_("Portal's cost"), money),
    "flagged": Value(_("Flagged")),
    "note": Value(_("Note")),
}
