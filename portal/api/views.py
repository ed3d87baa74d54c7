"""What every API view shares: list filters and ordering, and small helpers for the
actions (``POST …/{id}/approve``) that call one service and answer the fresh object.

Views parse input, ask ``portal.access``, call one service or selector and render; the
rules stay in the services.
"""

from collections.abc import Mapping
from typing import Any

from django.utils.translation import gettext as _
from rest_framework import filters, serializers, viewsets
from rest_framework.exceptions import ValidationError
from rest_framework.request import Request
from rest_framework.response import Response

from portal.api.filters import FilterBackend


class PortalViewSet(viewsets.GenericViewSet):
    """Base for every resource: filterable (django-filter), ordered, paginated."""

    filter_backends = [FilterBackend, filters.OrderingFilter]
    ordering = ["-pk"]

    def validated(self, serializer_class: type[serializers.Serializer], request: Request) -> Any:
        """The validated data of the request body, or a 400 naming the fields."""
        serializer = serializer_class(data=request.data, context=self.get_serializer_context())
        valid = serializer.is_valid()
        errors = {**({} if valid else serializer.errors), **_not_text(serializer, request.data)}
        if errors:
            raise ValidationError(errors)
        return serializer.validated_data

    def answer(self, instance: Any, *, status: int = 200) -> Response:
        return Response(self.get_serializer(instance).data, status=status)


def _not_text(serializer: serializers.Serializer, data: Any) -> dict[str, list[str]]:
    """The body's text fields that hold something else (a number, true, a list): DRF's
    text field would take ``5`` as ``"5"``, where the schema says a string."""
    if not isinstance(data, Mapping):
        return {}
    wrong: dict[str, list[str]] = {}
    for name, field in serializer.fields.items():
        value = data.get(name)
        if field.read_only or value is None:
            continue
        texts = isinstance(field, serializers.CharField) and not isinstance(value, str)
        items = isinstance(field, serializers.ListField) and isinstance(
            field.child, serializers.CharField
        )
        if texts or (
            items and isinstance(value, list) and not all(isinstance(v, str) for v in value)
        ):
            wrong[name] = [_("Give this as text (a JSON string).")]
    return wrong


class EmptySerializer(serializers.Serializer):
    """For actions that take no body."""
