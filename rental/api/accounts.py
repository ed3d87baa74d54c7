"""``/api/v1/provider-accounts``: the cloud accounts the portal rents from (admins only;
everyone else gets 404, as for the admin's pages).

Credentials are write-only: accepted in a create or change, stored encrypted
(``accounts.save_account`` → ``set_credentials``), and never answered: an answer says
only whether they are set. A change of credentials or of how the cloud is reached is
validated with the provider once saved, as on the admin's page; ``validate`` checks the
stored credentials again.
"""

import re
from typing import Any

from django.core.validators import RegexValidator
from django.db.models import QuerySet
from django.utils.translation import gettext_lazy as _
from drf_spectacular.utils import extend_schema, extend_schema_field, extend_schema_view
from rest_framework import mixins, serializers
from rest_framework.decorators import action
from rest_framework.request import Request
from rest_framework.response import Response
from rest_framework.routers import BaseRouter

from portal import access
from portal.api.filters import PortalFilterSet
from portal.api.views import PortalViewSet
from portal.errors import Conflict
from rental.catalog import accounts
from rental.models import ProviderAccount
from rental.providers.registry import DRIVER_CHOICES

CREDENTIAL_FIELDS = ("access_key_id", "secret_access_key", "session_token")
# A region's name, in any case (stored lowered); the schema gives the same pattern.
REGION_NAME = r"^[A-Za-z0-9]+(?:-[A-Za-z0-9]+)*$"
# An endpoint an SDK can reach: http(s), a host name or IPv4 address (labels of 1 to 63
# letters, digits and inner hyphens), a port up to 65535, a path (RFC 3986); or
# empty, for the provider's own. The schema gives this pattern, so it is the whole check.
_LABEL = r"[A-Za-z0-9](?:[A-Za-z0-9-]{0,61}[A-Za-z0-9])?"
_PORT = r"(?:[0-9]{1,4}|[1-5][0-9]{4}|6[0-4][0-9]{3}|65[0-4][0-9]{2}|655[0-2][0-9]|6553[0-5])"
_PATH = r"(?:[A-Za-z0-9._~!$&'()*+,;=:@/-]|%[0-9A-Fa-f]{2})*"  # RFC 3986's path characters
ENDPOINT_URL = rf"^(?:https?://{_LABEL}(?:\.{_LABEL})*(?::{_PORT})?(?:/{_PATH})?)?$"


@extend_schema_field({"type": "string", "pattern": ENDPOINT_URL, "maxLength": 200})
class EndpointUrlField(serializers.RegexField):
    def __init__(self, **kwargs: Any) -> None:
        super().__init__(
            ENDPOINT_URL,
            error_messages={"invalid": _("Give an http:// or https:// address, or nothing.")},
            **kwargs,
        )


OPTIONS_HELP = (
    "The driver's options, a JSON object; not secrets. alibaba: security_group_id "
    '(required, "sg-…") and vswitch_ids (zone → "vsw-…"); other drivers take none. '
    "A bad option is refused with its path as the field, e.g. options.security_group_id."
)


@extend_schema_field({"type": "object", "additionalProperties": True})
class OptionsField(serializers.JSONField):
    """A driver's options; checked against the driver's declaration by the service."""


class ProviderAccountSerializer(serializers.ModelSerializer):
    # Plain text in answers: an admin's form may have stored any address Django takes.
    endpoint_url = serializers.CharField(
        read_only=True, help_text="Any EC2-compatible endpoint; empty: the provider's own."
    )
    credentials_set = serializers.BooleanField(
        source="has_credentials", read_only=True, help_text="Credentials are write-only"
    )
    options = OptionsField(read_only=True, help_text=OPTIONS_HELP)

    class Meta:
        model = ProviderAccount
        fields = [
            "id",
            "name",
            "driver",
            "regions",
            "endpoint_url",
            "is_active",
            "options",
            "credentials_set",
            "status",
            "status_message",
            "checked_at",
            "synced_at",
            "sync_error",
            "sync_failed_at",
        ]
        read_only_fields = fields


def _write_only(max_length: int, help_text: str) -> serializers.CharField:
    return serializers.CharField(
        write_only=True,
        required=False,
        allow_blank=True,
        max_length=max_length,
        trim_whitespace=True,
        style={"input_type": "password"},
        help_text=help_text,
    )


@extend_schema_field({"type": "string", "pattern": REGION_NAME, "maxLength": 32})
class RegionField(serializers.CharField):
    """A region name (``REGION_NAME``), in lower case as the admin's form stores it."""

    def to_internal_value(self, data: Any) -> str:
        return super().to_internal_value(data).lower()


def _regions(**kwargs: Any) -> serializers.ListField:
    check = RegexValidator(
        re.compile(REGION_NAME), _("Not a region name. Use names like us-east-1.")
    )
    return serializers.ListField(
        child=RegionField(max_length=32, validators=[check]), min_length=1, max_length=50, **kwargs
    )


class ProviderAccountWriteSerializer(serializers.Serializer):
    """A change names only the fields it changes; a create needs name, driver, regions."""

    name = serializers.CharField(max_length=80, required=False)
    driver = serializers.ChoiceField(choices=DRIVER_CHOICES, required=False)
    regions = _regions(required=False)
    endpoint_url = EndpointUrlField(max_length=200, allow_blank=True, required=False)
    is_active = serializers.BooleanField(required=False)
    options = OptionsField(required=False, help_text=OPTIONS_HELP)
    access_key_id = _write_only(128, "Write-only.")
    secret_access_key = _write_only(256, "Write-only. Required with a new access key ID.")
    session_token = _write_only(4096, "Optional, for temporary credentials. Write-only.")

    def validate_regions(self, value: list[str]) -> list[str]:
        return list(dict.fromkeys(value))  # in order, without repeats

    def validate(self, data: dict[str, Any]) -> dict[str, Any]:
        key, secret = data.get("access_key_id", ""), data.get("secret_access_key", "")
        if (key or secret or data.get("session_token")) and not (key and secret):
            # A rule over two fields, which the schema does not say: 409.
            raise Conflict(
                _("Send the access key ID and its secret together."),
                code="credentials_incomplete",
                field="secret_access_key" if key else "access_key_id",
            )
        return data


class ProviderAccountCreateSerializer(ProviderAccountWriteSerializer):
    """A new account: its name, driver and regions are required."""

    name = serializers.CharField(max_length=80)
    driver = serializers.ChoiceField(choices=DRIVER_CHOICES)
    regions = _regions()


class ProviderAccountFilter(PortalFilterSet):
    class Meta:
        model = ProviderAccount
        fields = ["driver", "status", "is_active"]


def _split(data: dict[str, Any]) -> tuple[dict[str, Any], dict[str, str] | None]:
    """The account's fields, and the new credentials (None: keep the stored ones)."""
    changes = {k: v for k, v in data.items() if k not in CREDENTIAL_FIELDS}
    if not data.get("access_key_id"):
        return changes, None
    return changes, {name: data.get(name, "") for name in CREDENTIAL_FIELDS}


@extend_schema_view(
    list=extend_schema(summary="Provider accounts (admins)", tags=["provider-accounts"]),
    retrieve=extend_schema(summary="A provider account (admins)", tags=["provider-accounts"]),
)
class ProviderAccountViewSet(mixins.ListModelMixin, mixins.RetrieveModelMixin, PortalViewSet):
    serializer_class = ProviderAccountSerializer
    filterset_class = ProviderAccountFilter
    ordering_fields = ["name", "status", "checked_at"]
    ordering = ["name"]
    http_method_names = ["get", "post", "patch", "head", "options"]

    def initial(self, request: Request, *args: Any, **kwargs: Any) -> None:
        super().initial(request, *args, **kwargs)
        access.require_admin(request.user)

    def get_queryset(self) -> QuerySet[ProviderAccount]:
        return ProviderAccount.objects.all()

    @extend_schema(
        summary="Add a provider account; credentials are stored encrypted, never shown",
        tags=["provider-accounts"],
        request=ProviderAccountCreateSerializer,
        responses={201: ProviderAccountSerializer},
    )
    def create(self, request: Request) -> Response:
        changes, credentials = _split(self.validated(ProviderAccountCreateSerializer, request))
        account = accounts.save_account(
            actor=request.user, changes=changes, credentials=credentials, source="api"
        )
        return self.answer(account, status=201)

    @extend_schema(
        summary="Change a provider account; send credentials only to replace them",
        tags=["provider-accounts"],
        request=ProviderAccountWriteSerializer,
        responses=ProviderAccountSerializer,
    )
    def partial_update(self, request: Request, pk: str | None = None) -> Response:
        account = self.get_object()
        changes, credentials = _split(self.validated(ProviderAccountWriteSerializer, request))
        account = accounts.save_account(
            actor=request.user,
            account=account,
            changes=changes,
            credentials=credentials,
            source="api",
        )
        return self.answer(account)

    @extend_schema(
        summary="Check the stored credentials with the provider",
        tags=["provider-accounts"],
        request=None,
        responses=ProviderAccountSerializer,
    )
    @action(detail=True, methods=["post"])
    def validate(self, request: Request, pk: str | None = None) -> Response:
        account = accounts.validate_account(
            actor=request.user, account=self.get_object(), source="api"
        )
        return self.answer(account)


def register(router: BaseRouter) -> None:
    router.register("provider-accounts", ProviderAccountViewSet, basename="provider-account")


urlpatterns: list = []
