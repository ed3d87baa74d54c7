"""The forms of the reconciliation pages: importing a bill, acknowledging its differences,
correcting one."""

from typing import Any

from django import forms
from django.utils.translation import gettext_lazy as _

from billing.periods import parse_period
from billing.reconcile_models import CostImport
from portal.text import PlainTextForm
from rental.models import ProviderAccount


class ImportForm(PlainTextForm):
    period = forms.CharField(
        label=_("Month"), max_length=7, help_text=_("The bill's month, as YYYY-MM.")
    )
    account = forms.ModelChoiceField(
        label=_("Provider account"),
        queryset=ProviderAccount.objects.none(),
        required=False,
        empty_label=_("Another provider (matched by resource id and tags only)"),
    )
    format = forms.ChoiceField(label=_("Format"), choices=CostImport.Format.choices)
    file = forms.FileField(
        label=_("File"),
        help_text=_("CSV (or gzipped CSV) or Parquet, as the provider delivers it."),
    )

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self.fields["account"].queryset = ProviderAccount.objects.order_by("name")  # type: ignore[attr-defined]

    def clean_period(self) -> Any:
        try:
            month = parse_period(self.cleaned_data["period"])
        except ValueError as invalid:
            raise forms.ValidationError(str(invalid)) from None
        if month is None:
            raise forms.ValidationError(_("Give the bill's month as YYYY-MM."))
        return month


class AcknowledgeForm(PlainTextForm):
    note = forms.CharField(
        label=_("What was found"),
        widget=forms.Textarea(attrs={"rows": 3}),
        help_text=_("What explains the differences, and what is done about them."),
    )


class CorrectionForm(PlainTextForm):
    amount = forms.CharField(
        label=_("Amount"),
        max_length=20,
        help_text=_("Charged to the project (negative: given back), in the open month."),
    )
    description = forms.CharField(label=_("Description"), max_length=300, required=False)
