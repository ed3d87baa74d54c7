"""What every API view shares: list filters and ordering, and small helpers for the
actions (``POST …/{id}/approve``) that call one service and answer the fresh object.

Views parse input, ask ``portal.access``, call one service or selector and render; the
rules stay in the services.
"""

from collections.abc import Mapping
from typing import Any

from django.utils.translation import gettext as _
from rest_framework import filters, serializers, viewsets
from rest_framework.exceptions import MethodNotAllowed, ValidationError
from rest_framework.request import Request
from rest_framework.response import Response

from portal.api.filters import FilterBackend
from portal.text import text_problem


class PortalViewSet(viewsets.GenericViewSet):
    """Base for every resource: filterable (django-filter), ordered, paginated."""

    filter_backends = [FilterBackend, filters.OrderingFilter]
    ordering = ["-pk"]

    def initial(self, request: Request, *args: Any, **kwargs: Any) -> None:
        super().initial(request, *args, **kwargs)
        # A method the resource does not have is a 405 before anything asks who may see
        # it (a view that hides itself from non-admins with a 404 does so after this).
        method = request.method.lower()
        if method not in self.http_method_names or not hasattr(self, method):
            raise MethodNotAllowed(request.method)

    def validated(self, serializer_class: type[serializers.Serializer], request: Request) -> Any:
        """The validated data of the request body, or a 400 naming the fields."""
        serializer = serializer_class(data=request.data, context=self.get_serializer_context())
        valid = serializer.is_valid()
        errors = {**({} if valid else serializer.errors), **_wrong_types(serializer, request.data)}
        if errors:
            raise ValidationError(errors)
        return serializer.validated_data

    def answer(self, instance: Any, *, status: int = 200) -> Response:
        return Response(self.get_serializer(instance).data, status=status)


def _json_type(field: serializers.Field) -> tuple[tuple[type, ...], str] | None:
    """The JSON types the schema gives ``field`` (Python's, as json reads them) and how to
    say it; None where the schema names no one type."""
    if isinstance(field, serializers.BooleanField):
        return (bool,), _("Give this as true or false.")
    if isinstance(field, serializers.IntegerField | serializers.PrimaryKeyRelatedField):
        return (int,), _("Give this as a whole number.")
    if isinstance(field, serializers.FloatField):
        return (int, float), _("Give this as a number.")
    if isinstance(field, serializers.DecimalField):
        return (str,), _('Give this as a decimal number in a JSON string, e.g. "12.50".')
    if isinstance(
        field,
        serializers.CharField
        | serializers.ChoiceField
        | serializers.DateTimeField
        | serializers.DateField
        | serializers.SlugRelatedField,
    ):
        return (str,), _("Give this as text (a JSON string).")
    return None


def _wrong_types(serializer: serializers.Serializer, data: Any) -> dict[str, Any]:
    """The body's fields that hold another JSON type than the schema says, or a text that
    breaks the text rule (``portal.text``: no control or bidirectional character, in any
    text, a name, a key or a secret too; the schema's patterns say so). DRF would take
    ``5`` for a text, ``"5"`` or ``5.0`` for a whole number, ``0`` for false and ``12.5``
    for a decimal string, where the schema refuses each. Nested serializers and lists
    are checked item by item; a property the operation does not read is not looked at."""
    if not isinstance(data, Mapping):
        return {}
    wrong: dict[str, Any] = {}
    for name, field in serializer.fields.items():
        value = data.get(name)
        if field.read_only or value is None:
            continue
        problem = _wrong_type(field, value)
        if problem:
            wrong[name] = problem
    return wrong


def _wrong_type(field: serializers.Field, value: Any) -> Any:
    if isinstance(field, serializers.ListSerializer | serializers.ListField):
        child = field.child
    elif isinstance(field, serializers.ManyRelatedField):
        child = field.child_relation
    else:
        child = None
    if child is not None:
        if not isinstance(value, list):
            return None  # the field's own check says so
        for item in value:
            problem = _wrong_type(child, item) if item is not None else None
            if problem:
                return problem
        return None
    if isinstance(field, serializers.Serializer):
        nested = _wrong_types(field, value)
        return nested or None
    expected = _json_type(field)
    if expected is None:
        return None
    types, message = expected
    if not isinstance(value, types) or (isinstance(value, bool) and bool not in types):
        return [message]
    if isinstance(field, serializers.DecimalField) and not value.strip():
        return [message]  # DRF would take "" for null where the field may be null
    problem = text_problem(value) if isinstance(value, str) else ""
    return [problem] if problem else None


class EmptySerializer(serializers.Serializer):
    """For actions that take no body."""
