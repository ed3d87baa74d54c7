"""The money side's forms on the pages: a project's budget and GPU-hour allocations, a
dispute of a statement line and an admin's answer. They carry what was typed to the
services, which check it and name the field a refusal is about; the forms draw it again
with that error beside its input."""

from typing import Any

from django import forms
from django.utils.datastructures import MultiValueDict
from django.utils.translation import gettext_lazy as _

from billing.models import Budget
from billing.thresholds import readable_thresholds
from portal.text import COMMENT_LENGTH, PlainTextForm


class TextInputs(forms.Widget):
    """Several text inputs of one name, one value each (the budget's thresholds); the
    template draws them."""

    def value_from_datadict(self, data: Any, files: Any, name: str) -> list[str]:
        if isinstance(data, MultiValueDict):
            return data.getlist(name)
        value = data.get(name)
        return [] if value is None else value if isinstance(value, list) else [value]

    def value_omitted_from_data(self, data: Any, files: Any, name: str) -> bool:
        return False


class TextListField(forms.Field):
    widget = TextInputs

    def to_python(self, value: Any) -> list[str]:
        return [str(item).strip() for item in value or []]


class BudgetForm(PlainTextForm):
    """A project's monthly budget, its thresholds ("80:actual" each) and what happens at
    100 % (``billing.budgets.set_budget`` checks them)."""

    monthly_amount = forms.CharField(
        label=_("Monthly amount"),
        required=False,
        widget=forms.TextInput(attrs={"inputmode": "decimal"}),
    )
    thresholds = TextListField(label=_("Thresholds"), required=False)
    cap_policy = forms.ChoiceField(
        label=_("At 100 %"),
        choices=Budget.CapPolicy.choices,
        required=False,
        error_messages={"invalid_choice": _("Choose a cap policy.")},
    )

    def __init__(self, *args: Any, budget: Budget | None = None, **kwargs: Any) -> None:
        kwargs.setdefault("auto_id", "budget-%s")
        if budget is not None:
            kwargs.setdefault(
                "initial",
                {
                    "monthly_amount": budget.monthly_amount,
                    # What reads as thresholds (the page says what it left out).
                    "thresholds": [
                        f"{t['percent']}:{t['kind']}"
                        for t in readable_thresholds(budget.thresholds)[0]
                    ],
                    "cap_policy": budget.cap_policy,
                },
            )
        super().__init__(*args, **kwargs)

    def threshold_list(self) -> list[dict[str, str]]:
        """The thresholds typed, as the service takes them ("80" alone is "80:actual")."""
        return threshold_items(self.cleaned_data["thresholds"])


def threshold_items(typed: list[str]) -> list[dict[str, str]]:
    """Thresholds as typed ("80:actual" each; "80" alone is "80:actual"), as the services
    take them."""
    found = []
    for item in typed:
        percent, _sep, kind = item.partition(":")
        if percent.strip():
            found.append({"percent": percent.strip(), "kind": kind.strip() or "actual"})
    return found


class AllocationForm(PlainTextForm):
    """A project's GPU-hours a month of one GPU model, its thresholds ("80:actual" each)
    and its hard stop (``billing.allocations.set_allocation`` checks them)."""

    gpu_model = forms.ChoiceField(
        label=_("GPU model"),
        required=False,
        error_messages={"invalid_choice": _("Choose a GPU model.")},
    )
    monthly_hours = forms.CharField(
        label=_("GPU-hours a month"),
        required=False,
        widget=forms.TextInput(attrs={"inputmode": "decimal", "size": "10"}),
    )
    thresholds = TextListField(label=_("Thresholds"), required=False)
    hard_stop = forms.BooleanField(
        label=_("Hard stop: refuse new burst and spot leases of this model once used up"),
        required=False,
    )

    def __init__(self, *args: Any, gpu_models: list[tuple[int, str]], **kwargs: Any) -> None:
        kwargs.setdefault("auto_id", "allocation-%s")
        super().__init__(*args, **kwargs)
        self.fields["gpu_model"].choices = [("", "—"), *gpu_models]

    def threshold_list(self) -> list[dict[str, str]]:
        return threshold_items(self.cleaned_data["thresholds"])


class DisputeForm(PlainTextForm):
    """A manager says what is wrong with a line of a closed statement."""

    comment = forms.CharField(
        label=_("Comment"),
        required=False,
        widget=forms.TextInput(
            attrs={
                "placeholder": _("What is wrong with it?"),
                "size": "50",
                "maxlength": str(COMMENT_LENGTH),
            }
        ),
    )


class AnswerForm(PlainTextForm):
    """An admin answers a dispute, with a correction in the open month or without."""

    answer = forms.CharField(
        label=_("Answer"),
        required=False,
        widget=forms.TextInput(
            attrs={"placeholder": _("Answer"), "maxlength": str(COMMENT_LENGTH)}
        ),
    )
    kind = forms.ChoiceField(
        label=_("Correction"),
        required=False,
        choices=[
            ("", _("No correction")),
            ("credit", _("Credit")),
            ("adjustment", _("Adjustment")),
        ],
        error_messages={"invalid_choice": _("A correction is an adjustment or a credit.")},
    )
    amount = forms.CharField(
        label=_("Amount"),
        required=False,
        widget=forms.TextInput(attrs={"inputmode": "decimal", "placeholder": "0.00", "size": "8"}),
    )
