"""What the lease and instance endpoints read and answer: shapes and bounds only (types,
lengths, choices, objects the caller may name). The rules are the services'."""

from datetime import datetime
from decimal import Decimal
from typing import Any

from drf_spectacular.utils import extend_schema_field
from rest_framework import serializers

from portal import access
from portal.models import Project
from rental import selectors
from rental.loans.expected_start import ExpectedStarts, expected_text
from rental.loans.expected_start_rules import Expected
from rental.loans.waiting import lease_wait
from rental.models import (
    DataVolume,
    GpuModel,
    Image,
    Instance,
    Market,
    Offering,
    Priority,
    Reservation,
    SshKey,
    TerminationReason,
    Tier,
)
from rental.views import agent as agent_views

# The request form's bounds (rental/forms.py): the services check the rest.
MAX_GPUS = 1024
MAX_COMMENT = 2000
COMMANDS = ("ssh", "jupyter_tunnel", "jupyter_url", "tensorboard_tunnel", "tensorboard_url")


def _user(serializer: serializers.Field) -> Any:
    return serializer.context["request"].user


def blank_or(choices: Any) -> serializers.ChoiceField:
    """A read-only choice that may also be "" (not decided yet, or not ended)."""
    return serializers.ChoiceField(choices=choices, allow_blank=True, read_only=True)


# --- References to other objects -------------------------------------------------------


class UserRefSerializer(serializers.Serializer):
    id = serializers.IntegerField()
    username = serializers.CharField()


class GpuModelRefSerializer(serializers.Serializer):
    id = serializers.IntegerField()
    name = serializers.CharField()


class OfferingRefSerializer(serializers.Serializer):
    id = serializers.IntegerField()
    instance_type = serializers.CharField()
    region = serializers.CharField()
    gpus_per_instance = serializers.IntegerField()


class ImageRefSerializer(serializers.Serializer):
    id = serializers.IntegerField()
    name = serializers.CharField()


# --- Instances ---------------------------------------------------------------------------


class ConnectionSerializer(serializers.Serializer):
    """Where the instance is and how to reach it: members of the project and admins only.
    The commands are empty until the instance runs with a public address."""

    public_address = serializers.CharField()
    private_address = serializers.CharField()
    ssh_user = serializers.CharField()
    ssh = serializers.CharField()
    jupyter_tunnel = serializers.CharField()
    jupyter_url = serializers.CharField()
    tensorboard_tunnel = serializers.CharField()
    tensorboard_url = serializers.CharField()


class InstanceSerializer(serializers.ModelSerializer):
    lease = serializers.IntegerField(source="reservation_id", read_only=True)
    project = serializers.CharField(source="reservation.project.slug", read_only=True)
    instance_type = serializers.CharField(source="offering.instance_type", read_only=True)
    cloud_id = serializers.CharField(source="external_id", read_only=True)
    termination_reason = blank_or(TerminationReason.choices)
    idle_warning = serializers.SerializerMethodField()
    connection = serializers.SerializerMethodField()

    class Meta:
        model = Instance
        fields = [
            "id",
            "lease",
            "project",
            "state",
            "health",
            "health_message",
            "market",
            "gpu_count",
            "instance_type",
            "region",
            "zone",
            "cloud_id",
            "rate_per_hour",
            "currency",
            "launched_at",
            "running_at",
            "stopped_at",
            "terminated_at",
            "termination_reason",
            "last_error",
            "last_heartbeat_at",
            "agent_last_sample_at",
            "idle_warned_at",
            "idle_warning",
            "connection",
        ]
        read_only_fields = fields

    def get_idle_warning(self, instance: Instance) -> bool:
        return agent_views.idle_warning(instance.reservation, instance)

    @extend_schema_field(ConnectionSerializer(allow_null=True))
    def get_connection(self, instance: Instance) -> dict[str, str] | None:
        lease = instance.reservation
        if not access.can_see_connection(_user(self), lease):
            return None
        commands = agent_views.connection_commands(lease, instance)
        return {
            "public_address": instance.public_address,
            "private_address": instance.private_address,
            "ssh_user": instance.ssh_user,
            **{name: commands.get(name, "") for name in COMMANDS},
        }


# --- Leases ------------------------------------------------------------------------------


class LeaseSerializer(serializers.ModelSerializer):
    """A lease as lists show it."""

    project = serializers.CharField(source="project.slug", read_only=True)
    requester = UserRefSerializer(read_only=True)
    gpu_model = GpuModelRefSerializer(read_only=True)
    offering = OfferingRefSerializer(read_only=True, allow_null=True)
    image = ImageRefSerializer(read_only=True, allow_null=True)
    reason_code = serializers.CharField(source="status_code", read_only=True)
    reason = serializers.CharField(source="status_message", read_only=True)
    is_booking = serializers.BooleanField(source="is_reservation", read_only=True)
    approved_by = UserRefSerializer(read_only=True, allow_null=True)
    tier = blank_or(Tier.choices)
    end_reason = blank_or(TerminationReason.choices)
    expected_start = serializers.SerializerMethodField()
    expected_start_reason = serializers.SerializerMethodField(
        help_text="The expected start, or why none is in sight, in words (the lease page's "
        'sentence); "" for a lease that does not wait.'
    )

    class Meta:
        model = Reservation
        fields = [
            "id",
            "project",
            "requester",
            "gpu_model",
            "gpu_count",
            "instance_count",
            "offering",
            "market",
            "priority",
            "image",
            "purpose",
            "start",
            "end",
            "tier",
            "status",
            "reason_code",
            "reason",
            "is_booking",
            "requeue_on_preemption",
            "allow_other_instance_types",
            "submitted_at",
            "approved_by",
            "approved_at",
            "decision_comment",
            "ended_at",
            "end_reason",
            "extension_until",
            "notice_due_at",
            "preempted_for",
            "reclaim_due_at",
            "requeued_from",
            "expected_start",
            "expected_start_reason",
        ]
        read_only_fields = fields

    def _expected(self, lease: Reservation) -> Expected | None:
        # One per request: a list reads and plays each pool of its waiting leases once.
        starts = self.context.setdefault("expected_starts", ExpectedStarts())
        return starts.of(lease)

    @extend_schema_field(
        serializers.DateTimeField(
            allow_null=True,
            help_text="A queued lease: when it would most likely start if nothing else "
            "changes (the pool played forward by the loan rules); null when no start is in "
            "sight within the horizon, for a lease waiting for a manager, and for any other "
            "lease.",
        )
    )
    def get_expected_start(self, lease: Reservation) -> datetime | None:
        expected = self._expected(lease)
        return expected.start if expected is not None else None

    def get_expected_start_reason(self, lease: Reservation) -> str:
        return expected_text(self._expected(lease))


class WaitSerializer(serializers.Serializer):
    """Why a lease waits: its place in the pool's queue (while queued) and what would
    let it start."""

    position = serializers.IntegerField(allow_null=True)
    queued = serializers.IntegerField()
    hint = serializers.CharField()


class LeaseDetailSerializer(LeaseSerializer):
    """A lease as its page shows it: with its wait, its instances and its SSH keys."""

    waiting = serializers.SerializerMethodField()
    instances = InstanceSerializer(many=True, read_only=True)
    ssh_keys = serializers.SlugRelatedField(slug_field="name", many=True, read_only=True)

    class Meta(LeaseSerializer.Meta):
        fields = [*LeaseSerializer.Meta.fields, "waiting", "instances", "ssh_keys"]
        read_only_fields = fields

    @extend_schema_field(WaitSerializer)
    def get_waiting(self, lease: Reservation) -> dict[str, Any]:
        wait = lease_wait(lease)
        return {"position": wait.position, "queued": wait.queued, "hint": wait.hint}


# --- Input -------------------------------------------------------------------------------


class VisibleProjectField(serializers.SlugRelatedField):
    """A project by slug, among those the caller can see (another is 'does not exist')."""

    def get_queryset(self) -> Any:
        return access.visible_projects(_user(self))

    def to_internal_value(self, data: Any) -> Any:
        if isinstance(data, str) and "\x00" in data:
            self.fail("invalid")  # PostgreSQL text cannot hold NUL: never looked up
        return super().to_internal_value(data)


class OwnKeyField(serializers.PrimaryKeyRelatedField):
    def get_queryset(self) -> Any:
        return SshKey.objects.filter(user=_user(self))


class VisibleImageField(serializers.PrimaryKeyRelatedField):
    def get_queryset(self) -> Any:
        return selectors.image_catalog(_user(self))


class VisibleVolumeField(serializers.PrimaryKeyRelatedField):
    """A data volume of a project the caller can see (another is 'does not exist'); the
    service decides whether it may be attached (its project, state and zone)."""

    def get_queryset(self) -> Any:
        return access.scope(DataVolume.objects.all(), _user(self))


class NewLeaseSerializer(serializers.Serializer):
    """The request form's fields (rental/forms.py LeaseRequestForm)."""

    project = VisibleProjectField(slug_field="slug", queryset=Project.objects.all())
    gpu_model = serializers.PrimaryKeyRelatedField(queryset=GpuModel.objects.all())
    gpu_count = serializers.IntegerField(min_value=1, max_value=MAX_GPUS)
    duration_hours = serializers.DecimalField(
        max_digits=8, decimal_places=2, min_value=Decimal("0.01")
    )
    start = serializers.DateTimeField(
        required=False,
        allow_null=True,
        default=None,
        help_text="Book ahead from this time (UTC); absent or null: start now.",
    )
    priority = serializers.ChoiceField(choices=Priority.choices, default=Priority.EXPERIMENT)
    market = serializers.ChoiceField(choices=Market.choices, default=Market.ON_DEMAND)
    offering = serializers.PrimaryKeyRelatedField(
        queryset=Offering.objects.all(),
        required=False,
        allow_null=True,
        default=None,
        help_text="An instance type that carries the GPUs; absent: the cheapest that fits.",
    )
    image = VisibleImageField(
        queryset=Image.objects.all(),
        required=False,
        allow_null=True,
        default=None,
        help_text="Absent: the first image available for the instance type.",
    )
    purpose = serializers.CharField(max_length=300, required=False, allow_blank=True, default="")
    requeue_on_preemption = serializers.BooleanField(default=False)
    allow_other_instance_types = serializers.BooleanField(default=True)
    ssh_keys = OwnKeyField(
        queryset=SshKey.objects.all(),
        many=True,
        required=False,
        allow_empty=False,
        help_text="Ids of your own SSH keys to install; absent: all of your keys.",
    )
    data_volume = VisibleVolumeField(
        queryset=DataVolume.objects.all(),
        required=False,
        allow_null=True,
        default=None,
        help_text="Id of an available data volume of the project to attach; the launch is "
        "placed in its zone.",
    )


class CommentSerializer(serializers.Serializer):
    comment = serializers.CharField(
        max_length=MAX_COMMENT, required=False, allow_blank=True, default=""
    )


class RejectSerializer(serializers.Serializer):
    comment = serializers.CharField(max_length=MAX_COMMENT, help_text="Why it is rejected.")


class ExtendSerializer(serializers.Serializer):
    hours = serializers.DecimalField(
        max_digits=8,
        decimal_places=2,
        min_value=Decimal("0.01"),
        help_text="Hours added to the lease's end.",
    )


class RescheduleSerializer(serializers.Serializer):
    start = serializers.DateTimeField(
        required=False, help_text="The new start (UTC); absent: the booking's start."
    )
    duration_hours = serializers.DecimalField(
        max_digits=8,
        decimal_places=2,
        min_value=Decimal("0.01"),
        required=False,
        help_text="The new length; absent: the booking's length.",
    )
    gpu_count = serializers.IntegerField(
        min_value=1, max_value=MAX_GPUS, required=False, help_text="Absent: the same GPUs."
    )


class ExtensionDecisionSerializer(serializers.Serializer):
    decision = serializers.ChoiceField(choices=[("approve", "approve"), ("reject", "reject")])
    comment = serializers.CharField(
        max_length=MAX_COMMENT, required=False, allow_blank=True, default=""
    )
