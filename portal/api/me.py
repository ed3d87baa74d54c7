"""``GET /api/v1/me``: who the caller is and what they belong to."""

from drf_spectacular.utils import extend_schema
from rest_framework import serializers
from rest_framework.decorators import api_view
from rest_framework.request import Request
from rest_framework.response import Response

from portal import access
from portal.models import Project


class MembershipSerializer(serializers.Serializer):
    slug = serializers.SlugField()
    name = serializers.CharField()
    role = serializers.CharField()


class MeSerializer(serializers.Serializer):
    id = serializers.IntegerField()
    username = serializers.CharField()
    email = serializers.CharField(
        help_text="Their e-mail address; empty when there is none (a service token's)."
    )
    full_name = serializers.CharField()
    is_admin = serializers.BooleanField()
    is_finance = serializers.BooleanField()
    projects = MembershipSerializer(many=True)


@extend_schema(responses=MeSerializer, operation_id="me_retrieve", tags=["me"])
@api_view(["GET"])
def me(request: Request) -> Response:
    user = request.user
    roles = access.roles(user)
    projects = Project.objects.filter(pk__in=list(roles)).only("slug", "name")
    data = {
        "id": user.pk,
        "username": user.get_username(),
        "email": user.email,
        "full_name": user.get_full_name(),
        "is_admin": access.is_admin(user),
        "is_finance": access.is_finance(user),
        "projects": [{"slug": p.slug, "name": p.name, "role": roles[p.pk]} for p in projects],
    }
    return Response(MeSerializer(data).data)
