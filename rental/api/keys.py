"""``/api/v1/ssh-keys``: the caller's own SSH public keys, as on the keys page.

A key is checked when added (an OpenSSH public key of a known type, RSA of at least 2048
bits; ``keys.add_ssh_key``) and answered with its type, size and SHA256 fingerprint.
Nobody sees or deletes another person's keys: they are 404.
"""

from django.db.models import QuerySet
from drf_spectacular.utils import extend_schema, extend_schema_field, extend_schema_view
from rest_framework import mixins, serializers
from rest_framework.request import Request
from rest_framework.response import Response
from rest_framework.routers import BaseRouter

from portal.api.views import PortalViewSet
from portal.errors import DomainError
from rental.catalog import keys
from rental.models import SshKey


class SshKeySerializer(serializers.ModelSerializer):
    type = serializers.SerializerMethodField(help_text="ssh-ed25519, ssh-rsa, …")
    bits = serializers.SerializerMethodField(help_text="The RSA key's size; null for others")

    class Meta:
        model = SshKey
        fields = ["id", "name", "type", "bits", "fingerprint", "public_key", "created_at"]
        read_only_fields = fields

    def _checked(self, key: SshKey) -> tuple[str, int | None]:
        try:
            return keys.check_public_key(key.public_key)
        except DomainError:  # stored before a stricter check: shown, not re-judged here
            return key.public_key.split(" ", 1)[0], None

    @extend_schema_field(serializers.CharField())
    def get_type(self, key: SshKey) -> str:
        return self._checked(key)[0]

    @extend_schema_field(serializers.IntegerField(allow_null=True))
    def get_bits(self, key: SshKey) -> int | None:
        return self._checked(key)[1]


@extend_schema_field(
    {"type": "string", "pattern": keys.KEY_PATTERN, "maxLength": keys.MAX_KEY_LENGTH}
)
class PublicKeyField(serializers.CharField):
    """An OpenSSH public key's text; its shape is in the schema, its body is checked by
    ``keys.check_public_key`` (a body that is not a key: 409 malformed_key)."""


class SshKeyCreateSerializer(serializers.Serializer):
    name = serializers.CharField(max_length=60)
    public_key = PublicKeyField(max_length=keys.MAX_KEY_LENGTH)


@extend_schema_view(
    list=extend_schema(summary="Your SSH keys", tags=["ssh-keys"]),
    retrieve=extend_schema(summary="One of your SSH keys", tags=["ssh-keys"]),
    destroy=extend_schema(summary="Remove one of your SSH keys", tags=["ssh-keys"]),
)
class SshKeyViewSet(
    mixins.ListModelMixin,
    mixins.RetrieveModelMixin,
    mixins.DestroyModelMixin,
    PortalViewSet,
):
    serializer_class = SshKeySerializer
    ordering_fields = ["name", "created_at"]
    ordering = ["name", "pk"]
    filterset_fields = ["name"]

    def get_queryset(self) -> QuerySet[SshKey]:
        if getattr(self, "swagger_fake_view", False):
            return SshKey.objects.none()
        return SshKey.objects.filter(user=self.request.user)

    @extend_schema(
        summary="Add an SSH public key (checked: type, length; fingerprinted)",
        tags=["ssh-keys"],
        request=SshKeyCreateSerializer,
        responses={201: SshKeySerializer},
    )
    def create(self, request: Request) -> Response:
        data = self.validated(SshKeyCreateSerializer, request)
        key = keys.add_ssh_key(
            actor=request.user, name=data["name"], public_key=data["public_key"], source="api"
        )
        return self.answer(key, status=201)

    def perform_destroy(self, instance: SshKey) -> None:
        keys.delete_ssh_key(actor=self.request.user, key=instance, source="api")


def register(router: BaseRouter) -> None:
    router.register("ssh-keys", SshKeyViewSet, basename="ssh-key")


urlpatterns: list = []
