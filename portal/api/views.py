"""What every API view shares: list filters and ordering, and small helpers for the
actions (``POST …/{id}/approve``) that call one service and answer the fresh object.

Views parse input, ask ``portal.access``, call one service or selector and render; the
rules stay in the services.
"""

from typing import Any

from rest_framework import filters, serializers, viewsets
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
        serializer.is_valid(raise_exception=True)
        return serializer.validated_data

    def answer(self, instance: Any, *, status: int = 200) -> Response:
        return Response(self.get_serializer(instance).data, status=status)


class EmptySerializer(serializers.Serializer):
    """For actions that take no body."""
