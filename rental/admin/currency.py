"""Admin for exchange rates: recorded through ``services.exchange.add_exchange_rate``
(validated, audited) and never edited afterwards (a correction is a new, later rate), so
what a launch captured keeps its provenance."""

from typing import Any

from django.contrib import admin
from django.core.exceptions import ValidationError
from django.http import HttpRequest

from portal.admin import PortalAdmin
from portal.errors import DomainError
from rental.catalog import exchange
from rental.models import ExchangeRate


@admin.register(ExchangeRate)
class ExchangeRateAdmin(PortalAdmin):
    list_display = [
        "currency",
        "billing_currency",
        "units_per_billing_unit",
        "valid_from",
        "source",
        "created_by",
    ]
    list_filter = ["currency"]
    fields = ["currency", "units_per_billing_unit", "valid_from", "source"]
    ordering = ["currency", "-valid_from"]

    def get_readonly_fields(self, request: HttpRequest, obj: Any = None) -> list[str]:
        if obj is not None:
            return [*self.fields, "billing_currency", "created_at", "created_by"]
        return []

    def get_form(self, request: HttpRequest, obj: Any = None, **kwargs: Any) -> Any:
        form = super().get_form(request, obj, **kwargs)
        if obj is None:
            original_clean = form.clean

            def clean(form_self: Any) -> dict:
                data = original_clean(form_self)
                try:
                    exchange.check_new_rate(
                        currency=data.get("currency", ""),
                        units_per_billing_unit=data.get("units_per_billing_unit"),
                        valid_from=data.get("valid_from"),
                        source=data.get("source", ""),
                    )
                except DomainError as invalid:
                    raise ValidationError({invalid.field or None: invalid.message}) from None
                return data

            form.clean = clean
        return form

    def save_model(self, request: HttpRequest, obj: Any, form: Any, change: bool) -> None:
        if change:
            return  # read-only once recorded
        created = exchange.add_exchange_rate(
            actor=request.user,
            currency=form.cleaned_data["currency"],
            units_per_billing_unit=form.cleaned_data["units_per_billing_unit"],
            valid_from=form.cleaned_data["valid_from"],
            source=form.cleaned_data["source"],
            audit_source="admin",
        )
        obj.pk = created.pk

    def has_delete_permission(self, request: HttpRequest, obj: Any = None) -> bool:
        return False
