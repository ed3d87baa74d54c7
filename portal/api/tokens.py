"""``/api/v1/tokens``: the caller's own personal tokens (portal/tokens.py).

The raw token is in the answer to its creation and nowhere else. So that a script can
make its first token with curl, ``POST /api/v1/tokens`` (and only it) also accepts HTTP
Basic credentials, counted by the login page's throttle (portal/login_throttle.py): a
try the throttle refuses (a pair made to wait, a stopped address, a locked account) is a
429 with ``Retry-After``, whatever the password.
"""

import base64
import binascii
from typing import Any

from django.db.models import QuerySet
from drf_spectacular.extensions import OpenApiAuthenticationExtension
from drf_spectacular.utils import extend_schema, extend_schema_view
from rest_framework import authentication, exceptions, mixins, serializers
from rest_framework.decorators import action
from rest_framework.request import Request
from rest_framework.response import Response

from portal import login_throttle, tokens
from portal.api.filters import FlagFilter, PortalFilterSet
from portal.api.views import EmptySerializer, PortalViewSet
from portal.models import ApiToken


class ThrottledBasicAuthentication(authentication.BasicAuthentication):
    """Username and password, refused with 429 while the login throttle refuses the try
    (a wrong password counts as a failed login there; a right one clears its pair)."""

    www_authenticate_realm = "api"

    def authenticate(self, request: Request) -> Any:
        header = authentication.get_authorization_header(request).split()
        if header and header[0].lower() == b"basic" and len(header) == 2:
            username = _basic_username(header[1])
            refusal = login_throttle.check(request._request, username)
            if refusal is not None:
                throttled = exceptions.Throttled(detail=refusal.message)
                # Set after: given to the constructor, DRF would add its own English
                # "Expected available in …" to our sentence, which says it already.
                throttled.wait = refusal.retry_after
                raise throttled
        return super().authenticate(request)

    def authenticate_credentials(self, userid: str, password: str, request: Any = None) -> Any:
        # Django's authenticate() with the plain request: the throttle's backend and its
        # failure counter read the address from it.
        plain = request._request if request is not None else None
        user, auth = super().authenticate_credentials(userid, password, plain)
        login_throttle.forget_pair(plain, userid)
        return user, auth


def _basic_username(encoded: bytes) -> str:
    try:
        decoded = base64.b64decode(encoded, validate=True).decode("utf-8")
    except (binascii.Error, UnicodeDecodeError):
        return ""
    return decoded.partition(":")[0]


class BasicScheme(OpenApiAuthenticationExtension):
    target_class = "portal.api.tokens.ThrottledBasicAuthentication"
    name = "passwordForFirstToken"

    def get_security_definition(self, auto_schema: Any) -> dict[str, str]:
        return {
            "type": "http",
            "scheme": "basic",
            "description": "Username and password, on POST /api/v1/tokens only, counted by "
            "the login throttle.",
        }


class TokenSerializer(serializers.ModelSerializer):
    revoked = serializers.SerializerMethodField()

    class Meta:
        model = ApiToken
        fields = [
            "id",
            "name",
            "prefix",
            "created_at",
            "expires_at",
            "last_used_at",
            "revoked_at",
            "revoked",
        ]

    def get_revoked(self, token: ApiToken) -> bool:
        return token.revoked_at is not None


class TokenCreateSerializer(serializers.Serializer):
    name = serializers.CharField(max_length=80)
    expires_at = serializers.DateTimeField(help_text="When it stops working (at most a year).")


class NewTokenSerializer(TokenSerializer):
    token = serializers.CharField(help_text="The token itself. Shown here once, never again.")

    class Meta(TokenSerializer.Meta):
        fields = [*TokenSerializer.Meta.fields, "token"]


class TokenFilter(PortalFilterSet):
    revoked = FlagFilter(field_name="revoked_at", lookup_expr="isnull", exclude=True)

    class Meta:
        model = ApiToken
        fields = ["name"]


@extend_schema_view(
    list=extend_schema(summary="Your personal tokens (never the tokens themselves)."),
    retrieve=extend_schema(summary="One of your tokens."),
    create=extend_schema(
        summary="Make a token; the answer holds it once.",
        request=TokenCreateSerializer,
        responses={201: NewTokenSerializer},
    ),
    revoke=extend_schema(
        summary="Revoke a token: it stops working at once.", request=EmptySerializer
    ),
)
class TokenViewSet(mixins.ListModelMixin, mixins.RetrieveModelMixin, PortalViewSet):
    serializer_class = TokenSerializer
    filterset_class = TokenFilter
    ordering = ["-created_at", "-id"]
    ordering_fields = ["created_at", "expires_at", "last_used_at", "name"]

    def initialize_request(self, request: Any, *args: Any, **kwargs: Any) -> Request:
        request = super().initialize_request(request, *args, **kwargs)
        if self.action == "create":
            request.authenticators = (*request.authenticators, ThrottledBasicAuthentication())
        return request

    def get_authenticators(self) -> list[Any]:
        authenticators = super().get_authenticators()
        if getattr(self, "swagger_fake_view", False) and self.action == "create":
            authenticators.append(ThrottledBasicAuthentication())
        return authenticators

    def get_queryset(self) -> QuerySet[ApiToken]:
        if getattr(self, "swagger_fake_view", False):
            return ApiToken.objects.none()
        return ApiToken.objects.filter(user=self.request.user)

    def create(self, request: Request) -> Response:
        data = self.validated(TokenCreateSerializer, request)
        row, raw = tokens.create_token(
            actor=request.user, name=data["name"], expires_at=data["expires_at"], source="api"
        )
        row.token = raw  # type: ignore[attr-defined]  # for this one answer only
        return Response(
            NewTokenSerializer(row).data, status=201, headers={"Cache-Control": "no-store"}
        )

    @action(detail=True, methods=["post"])
    def revoke(self, request: Request, pk: Any = None) -> Response:
        token = self.get_object()
        return self.answer(tokens.revoke_token(actor=request.user, token=token, source="api"))


def register(router: Any) -> None:
    router.register("tokens", TokenViewSet, basename="token")


urlpatterns: list[Any] = []
