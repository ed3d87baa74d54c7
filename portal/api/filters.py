"""Query-string filters every list can use, strict enough that no value reaches the
database that it would refuse: ids are whole numbers from 1, flags are true or false, and
times are read as ISO 8601 and turned to UTC (PostgreSQL refuses offsets beyond ±15:59
that Python accepts, and an offset near year 1 overflows), so a bad value is a 400.

An id names a row by its number, and the schema says what the filter takes (an integer
from 1): a foreign key (``?gpu_model=3``) is filtered by its id, and an id that names no
row matches nothing, as a filter on any other column does; it is not a 400 that a
client could not foresee from the schema. Every FilterSet of the API is a
``PortalFilterSet``, and ``FilterBackend`` makes the ones a view declares by
``filterset_fields`` so too."""

from collections.abc import Iterable
from datetime import UTC, datetime
from typing import Any

from django import forms
from django.core.exceptions import ValidationError
from django.db import models
from django.http import QueryDict
from django.utils.translation import gettext_lazy as _
from django_filters import fields as filter_fields
from django_filters import rest_framework as filters
from drf_spectacular.utils import extend_schema_field
from rest_framework.exceptions import ValidationError as DRFValidationError

BIGGEST_ID = 2**63 - 1  # the largest a 64-bit id column holds


@extend_schema_field({"type": "integer", "minimum": 1})
class IntegerFilter(filters.NumberFilter):
    """An id: a whole number from 1 (one that names no row, a huge one too, matches
    nothing)."""

    field_class = forms.IntegerField

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        kwargs.setdefault("min_value", 1)
        super().__init__(*args, **kwargs)

    def filter(self, qs: models.QuerySet, value: Any) -> models.QuerySet:
        # No row has an id past a 64-bit column's largest, and SQLite (the demo) refuses
        # such a number outright (OverflowError) where PostgreSQL compares it.
        if value is not None and value > BIGGEST_ID:
            return qs.none()
        return super().filter(qs, value)


class FlagField(forms.Field):
    """true / false (also 1 / 0, any case); absent or empty is no filter, anything else
    (``null``, ``yes``) a 400 rather than silently no filter."""

    widget = forms.TextInput
    VALUES = {"true": True, "1": True, "false": False, "0": False}

    def to_python(self, value: Any) -> bool | None:
        if value in (None, ""):
            return None
        if isinstance(value, bool):
            return value
        try:
            return self.VALUES[str(value).lower()]
        except KeyError:
            raise ValidationError(_("Must be true or false."), code="invalid") from None


class FlagFilter(filters.BooleanFilter):
    """true / false (also 1 / 0)."""

    field_class = FlagField

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        kwargs.setdefault("widget", forms.TextInput)
        super().__init__(*args, **kwargs)


class UtcDateTimeField(filter_fields.IsoDateTimeField):
    def to_python(self, value: Any) -> datetime | None:
        parsed = super().to_python(value)
        if parsed is None:
            return None
        try:
            return parsed.astimezone(UTC)
        except OverflowError:
            raise ValidationError(self.error_messages["invalid"], code="invalid") from None


class UtcDateTimeRangeField(filter_fields.IsoDateTimeRangeField):
    def __init__(self, *args: Any, **kwargs: Any) -> None:
        # RangeField's own __init__ with our fields (the parent's would make its own).
        filter_fields.RangeField.__init__(
            self, (UtcDateTimeField(), UtcDateTimeField()), *args, **kwargs
        )


class DateTimeFilter(filters.IsoDateTimeFilter):
    field_class = UtcDateTimeField


class DateTimeFromToRangeFilter(filters.IsoDateTimeFromToRangeFilter):
    """``<name>_after`` (>=) and ``<name>_before`` (<=)."""

    field_class = UtcDateTimeRangeField


class PortalFilterSet(filters.FilterSet):
    """The API's FilterSet: DRF's, with every foreign key filtered by its id and every
    flag read strictly (``FlagFilter``)."""

    FILTER_DEFAULTS = {
        **filters.FilterSet.FILTER_DEFAULTS,
        models.ForeignKey: {"filter_class": IntegerFilter},
        models.OneToOneField: {"filter_class": IntegerFilter},
        models.BooleanField: {"filter_class": FlagFilter},
    }


class FilterBackend(filters.DjangoFilterBackend):
    """django-filter's backend, making a view's ``filterset_fields`` a PortalFilterSet.

    A filter given with no value (``?start_before=``) is a 400 naming it: django-filter
    would quietly not filter, where the schema says what the value must be (a time, an
    id, a text of at least one character)."""

    filterset_base = PortalFilterSet

    def get_filterset(self, request, queryset, view):
        filterset = super().get_filterset(request, queryset, view)
        if filterset is not None:
            refuse_empty(request.query_params, query_names(filterset))
        return filterset


def refuse_empty(query: QueryDict, names: Iterable[str]) -> None:
    """A 400 naming each of ``names`` that the query string gives with no value: DRF and
    django-filter read an empty value as no value, where the schema refuses it."""
    empty = [name for name in names if name in query and not query[name]]
    if empty:
        message = _("Give a value, or leave the parameter out.")
        raise DRFValidationError({name: [message] for name in empty})


def query_names(filterset: filters.FilterSet) -> list[str]:
    """The query parameters a filterset reads: a range filter's two (``start_after``,
    ``start_before``), every other filter's own name."""
    names = []
    for name, field in filterset.form.fields.items():
        widget = field.widget
        if getattr(widget, "suffixes", None):
            names.extend(widget.suffixed(name, suffix) for suffix in widget.suffixes)
        else:
            names.append(name)
    return names
