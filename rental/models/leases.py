"""Leases and what runs under them: instances, usage, utilization and SSH keys.

The model ``Reservation`` is a **lease** (the name is kept from the first schema: it is in
the migrations, the admin and the API's enum names). ``is_reservation`` marks a
**booking**: a lease for a window that starts later (R2), ``scheduled`` until its start.
"""

import base64
import binascii
import hashlib
import uuid

from django.conf import settings
from django.core.exceptions import ValidationError
from django.db import models
from django.utils import timezone
from django.utils.translation import gettext_lazy as _

from portal.paths import path_of
from portal.phrases import PhraseField
from rental.models.currency import ONE, RATE_DECIMALS, RATE_DIGITS, billing_currency
from rental.models.packed import PackedReadingsField


class Market(models.TextChoices):
    ON_DEMAND = "on_demand", _("On-demand")
    SPOT = "spot", _("Spot")


class Priority(models.TextChoices):
    PRODUCTION = "production", _("Production")
    EXPERIMENT = "experiment", _("Experiment")
    LEARNING = "learning", _("Learning")


class Tier(models.TextChoices):
    GUARANTEED = "guaranteed", _("Guaranteed")
    BURST = "burst", _("Burst")
    RESERVED = "reserved", _("Reserved")
    SPOT = "spot", _("Spot")


class TerminationReason(models.TextChoices):
    LEASE_END = "lease_end", _("Lease ended")
    USER = "user", _("Ended by user")
    IDLE = "idle", _("Idle")
    PREEMPTED = "preempted", _("Preempted")
    SPOT_INTERRUPTED = "spot_interrupted", _("Spot interruption")
    ORPHAN = "orphan", _("Orphan")
    PROVIDER = "provider", _("Ended by the provider")
    FAILED = "failed", _("Failed")


# Runs the platform ended: billed to the second with no minimum (B1).
PLATFORM_ENDED = frozenset(
    {
        TerminationReason.PREEMPTED,
        TerminationReason.SPOT_INTERRUPTED,
        TerminationReason.PROVIDER,
        TerminationReason.FAILED,
    }
)


class Reservation(models.Model):
    """A lease: n GPUs of one model for a project over [start, end). With
    ``is_reservation`` it is a booking, admitted for that window ahead of time (R2)."""

    class Status(models.TextChoices):
        PENDING_APPROVAL = "pending_approval", _("Waiting for approval")
        SCHEDULED = "scheduled", _("Scheduled")
        QUEUED = "queued", _("Queued")
        PROVISIONING = "provisioning", _("Provisioning")
        ACTIVE = "active", _("Active")
        ENDING = "ending", _("Ending")
        ENDED = "ended", _("Ended")
        REJECTED = "rejected", _("Rejected")
        CANCELLED = "cancelled", _("Cancelled")
        FAILED = "failed", _("Failed")
        PREEMPTED = "preempted", _("Preempted")
        REAPED = "reaped", _("Reaped")
        STOPPED = "stopped", _("Stopped")  # L9: disk kept, GPUs back in the pool

    # Statuses whose GPUs count as running in the pool (Q4).
    HOLDING = (Status.PROVISIONING, Status.ACTIVE, Status.ENDING)
    # Statuses from which nothing more happens.
    FINAL = (
        Status.ENDED,
        Status.REJECTED,
        Status.CANCELLED,
        Status.FAILED,
        Status.PREEMPTED,
        Status.REAPED,
    )

    project = models.ForeignKey(
        "portal.Project",
        on_delete=models.PROTECT,
        related_name="reservations",
        verbose_name=_("project"),
    )
    requester = models.ForeignKey(
        settings.AUTH_USER_MODEL,
        on_delete=models.PROTECT,
        related_name="reservations",
        verbose_name=_("requester"),
    )
    gpu_model = models.ForeignKey(
        "rental.GpuModel",
        on_delete=models.PROTECT,
        related_name="reservations",
        verbose_name=_("GPU model"),
    )
    gpu_count = models.PositiveIntegerField(_("GPUs"))
    offering = models.ForeignKey(
        "rental.Offering",
        on_delete=models.PROTECT,
        null=True,
        blank=True,
        related_name="reservations",
        verbose_name=_("offering"),
    )
    instance_count = models.PositiveIntegerField(_("instances"), default=1)
    market = models.CharField(
        _("market"), max_length=16, choices=Market.choices, default=Market.ON_DEMAND
    )
    priority = models.CharField(
        _("priority"), max_length=16, choices=Priority.choices, default=Priority.EXPERIMENT
    )
    image = models.ForeignKey(
        "rental.Image",
        on_delete=models.PROTECT,
        null=True,
        blank=True,
        related_name="+",
        verbose_name=_("image"),
    )
    purpose = models.CharField(_("purpose"), max_length=300, blank=True)
    start = models.DateTimeField(_("start"))
    end = models.DateTimeField(_("end"))
    tier = models.CharField(_("tier"), max_length=16, choices=Tier.choices, blank=True)
    status = models.CharField(_("status"), max_length=20, choices=Status.choices, db_index=True)
    status_code = models.CharField(_("reason code"), max_length=40, blank=True)
    # Why it is in its status, kept as a phrase (portal.phrases) so that each reader
    # reads it in their language; a row from before that holds its plain text.
    status_message = PhraseField(_("reason"))
    requeue_on_preemption = models.BooleanField(_("re-queue if preempted"), default=False)
    allow_other_instance_types = models.BooleanField(
        _("any instance type with these GPUs"),
        default=True,
        help_text=_(
            "When the chosen type has no capacity, launch another type with the same "
            "GPUs per instance."
        ),
    )
    submitted_at = models.DateTimeField(_("submitted at"), default=timezone.now)
    approved_by = models.ForeignKey(
        settings.AUTH_USER_MODEL,
        on_delete=models.SET_NULL,
        null=True,
        blank=True,
        related_name="+",
        verbose_name=_("approved by"),
    )
    approved_at = models.DateTimeField(_("approved at"), null=True, blank=True)
    decision_comment = models.TextField(_("decision comment"), blank=True)
    ended_at = models.DateTimeField(_("ended at"), null=True, blank=True)
    end_warned_for = models.DateTimeField(
        _("end last warned of"),
        null=True,
        blank=True,
        help_text=_("The end the requester was warned of (L5); an extended lease is warned again."),
    )
    end_reason = models.CharField(
        _("end reason"), max_length=20, choices=TerminationReason.choices, blank=True
    )
    # An extension beyond the auto-approve limits, waiting for a manager.
    extension_until = models.DateTimeField(_("extension asked until"), null=True, blank=True)
    # Booked ahead (R1–R4): admitted by the R2 sweep, held from start − notice (R4).
    is_reservation = models.BooleanField(_("booked ahead"), default=False)
    # Q8: a victim told at T is ended at ``notice_due_at`` = T + notice; the lease that
    # needs its GPUs waits until ``reclaim_due_at``. Due times are rows, not countdowns.
    notice_due_at = models.DateTimeField(_("preempted at"), null=True, blank=True, db_index=True)
    preempted_for = models.ForeignKey(
        "self",
        on_delete=models.SET_NULL,
        null=True,
        blank=True,
        related_name="victims",
        verbose_name=_("preempted for"),
    )
    reclaim_due_at = models.DateTimeField(
        _("starts when reclaimed at"), null=True, blank=True, db_index=True
    )
    requeued_from = models.ForeignKey(
        "self",
        on_delete=models.SET_NULL,
        null=True,
        blank=True,
        related_name="requeued_as",
        verbose_name=_("re-queued from"),
    )
    # The requester's keys installed at launch; none recorded: all of the requester's keys.
    ssh_keys = models.ManyToManyField(
        "rental.SshKey", blank=True, related_name="+", verbose_name=_("SSH keys")
    )
    # A project data volume attached at launch, in its zone (issue 8.9); never deleted here.
    data_volume = models.ForeignKey(
        "rental.DataVolume",
        on_delete=models.SET_NULL,
        null=True,
        blank=True,
        related_name="leases",
        verbose_name=_("data volume"),
    )
    updated_at = models.DateTimeField(_("updated at"), auto_now=True)

    class Meta:
        ordering = ["-submitted_at", "-id"]
        verbose_name = _("lease")
        verbose_name_plural = _("leases")
        indexes = [
            models.Index(fields=["gpu_model", "status"]),
            models.Index(fields=["project", "status"]),
            # The lease lists' order (newest first): a page reads its rows, not the table.
            models.Index(
                models.F("submitted_at").desc(), models.F("id").desc(), name="lease_newest_first"
            ),
            models.Index(
                "project",
                models.F("submitted_at").desc(),
                models.F("id").desc(),
                name="lease_project_newest_first",
            ),
            # A person's leases in a project, newest first: their last request (the
            # request form opens on it).
            models.Index(
                "requester",
                "project",
                models.F("submitted_at").desc(),
                models.F("id").desc(),
                name="lease_requester_newest_first",
            ),
            # A person's leases in progress, newest first (the dashboard's panel): only
            # the live ones are in it. Its statuses are ``selectors.IN_PROGRESS``, which
            # the panel's query names, so that the index serves it.
            models.Index(
                "requester",
                models.F("submitted_at").desc(),
                models.F("id").desc(),
                condition=models.Q(
                    status__in=[
                        "pending_approval",
                        "scheduled",
                        "queued",
                        "provisioning",
                        "active",
                        "ending",
                        "stopped",
                    ]
                ),
                name="lease_requester_in_progress",
            ),
            # The requests waiting for approval, oldest first, and the lists of one status.
            models.Index(fields=["status", "submitted_at", "id"], name="lease_status_oldest_first"),
            # The GPUs running per pool and per project (``selectors.quotas_in_use``: the
            # project page, the request form and its estimate), read from the index alone:
            # only the leases holding GPUs are in it, with their count and tier. Its
            # statuses are ``HOLDING``, which those sums name, so that the index serves them.
            models.Index(
                fields=["gpu_model", "project"],
                include=["gpu_count", "tier"],
                condition=models.Q(status__in=["provisioning", "active", "ending"]),
                name="lease_holding_gpus",
            ),
            # The leases and GPUs each project runs (``selectors.projects_overview``, as
            # ``rental.project_rows`` writes it out for the projects list), read from the
            # index alone, a project's entries at a time.
            models.Index(
                fields=["project"],
                include=["id", "gpu_count"],
                condition=models.Q(status__in=["provisioning", "active", "ending"]),
                name="lease_holding_by_project",
            ),
        ]
        constraints = [
            models.CheckConstraint(
                condition=models.Q(end__gt=models.F("start")), name="lease_ends_after_start"
            ),
            models.CheckConstraint(condition=models.Q(gpu_count__gte=1), name="lease_has_gpus"),
        ]

    def __str__(self) -> str:
        return f"#{self.pk} {self.gpu_count}× {self.gpu_model} for {self.project}"

    def get_absolute_url(self) -> str:
        return path_of("rental:lease", "pk", self.pk)

    @property
    def is_live(self) -> bool:
        return self.status in self.HOLDING

    @property
    def can_end(self) -> bool:
        return self.status in (
            self.Status.PENDING_APPROVAL,
            self.Status.QUEUED,
            self.Status.SCHEDULED,
            self.Status.PROVISIONING,
            self.Status.ACTIVE,
        )


class Instance(models.Model):
    class State(models.TextChoices):
        REQUESTED = "requested", _("Requested")
        LAUNCHING = "launching", _("Launching")
        RUNNING = "running", _("Running")
        STOPPING = "stopping", _("Stopping")
        STOPPED = "stopped", _("Stopped")
        TERMINATED = "terminated", _("Terminated")
        FAILED = "failed", _("Failed")

    class Health(models.TextChoices):
        UNKNOWN = "unknown", _("Unknown")
        HEALTHY = "healthy", _("Healthy")
        UNHEALTHY = "unhealthy", _("Unhealthy")

    LIVE = (State.LAUNCHING, State.RUNNING, State.STOPPING)

    reservation = models.ForeignKey(Reservation, on_delete=models.PROTECT, related_name="instances")
    account = models.ForeignKey(
        "rental.ProviderAccount", on_delete=models.PROTECT, related_name="instances"
    )
    offering = models.ForeignKey(
        "rental.Offering", on_delete=models.PROTECT, related_name="instances"
    )
    region = models.CharField(_("region"), max_length=32)
    zone = models.CharField(_("zone"), max_length=40, blank=True)
    external_id = models.CharField(_("cloud id"), max_length=64, blank=True)
    idempotency_key = models.CharField(
        _("idempotency key"), max_length=64, unique=True, default="", editable=False
    )
    state = models.CharField(
        _("state"), max_length=16, choices=State.choices, default=State.REQUESTED, db_index=True
    )
    market = models.CharField(_("market"), max_length=16, choices=Market.choices)
    gpu_count = models.PositiveSmallIntegerField(_("GPUs"))
    rate_per_hour = models.DecimalField(
        _("rate per instance-hour"), max_digits=12, decimal_places=6
    )
    # The offering's currency and the exchange rate in force at launch (captured with the
    # rate by rental.catalog.exchange): billing converts with these, never today's rate.
    currency = models.CharField(_("currency"), max_length=3, default=billing_currency)
    exchange_rate = models.DecimalField(
        _("exchange rate at launch"),
        max_digits=RATE_DIGITS,
        decimal_places=RATE_DECIMALS,
        default=ONE,
        help_text=_("Units of the currency per unit of the billing currency (1 when the same)."),
    )
    exchange_rate_ref = models.ForeignKey(
        "rental.ExchangeRate",
        on_delete=models.PROTECT,
        null=True,
        blank=True,
        related_name="+",
        db_index=False,
    )
    # When this instance's launch began: the lease's start, or the replacement or resume
    # of its instance. The provisioning timeout (L2) counts from here.
    provisioning_since = models.DateTimeField(_("provisioning since"), null=True, blank=True)
    claimed_at = models.DateTimeField(_("launch claimed at"), null=True, blank=True)
    launch_attempts = models.PositiveSmallIntegerField(_("launch attempts"), default=0)
    last_error = PhraseField(_("last error"))
    next_attempt_at = models.DateTimeField(_("next launch attempt at"), null=True, blank=True)
    missing_since = models.DateTimeField(
        _("missing from the cloud since"),
        null=True,
        blank=True,
        help_text=_("The first sync whose describe did not list it (L3 grace period)."),
    )
    launched_at = models.DateTimeField(_("launched at"), null=True, blank=True)
    running_at = models.DateTimeField(_("running since"), null=True, blank=True)
    terminated_at = models.DateTimeField(_("terminated at"), null=True, blank=True)
    public_address = models.CharField(_("public address"), max_length=64, blank=True)
    private_address = models.CharField(_("private address"), max_length=64, blank=True)
    ssh_user = models.CharField(_("SSH user"), max_length=32, blank=True)
    tags = models.JSONField(_("tags"), default=dict, blank=True)
    health = models.CharField(
        _("health"), max_length=16, choices=Health.choices, default=Health.UNKNOWN
    )
    health_message = PhraseField(_("health detail"))
    termination_reason = models.CharField(
        _("termination reason"), max_length=20, choices=TerminationReason.choices, blank=True
    )
    terminate_failures = models.PositiveSmallIntegerField(_("failed terminations"), default=0)
    # When a termination was last sent or started (or, for a spot instance under notice,
    # the notice's end: not before then); the sweep sends a stale one again (L1, L8).
    terminate_sent_at = models.DateTimeField(_("termination sent at"), null=True, blank=True)
    agent_token_hash = models.CharField(max_length=64, blank=True, editable=False)
    last_heartbeat_at = models.DateTimeField(_("last heartbeat"), null=True, blank=True)
    # What the agent on the instance last said (see rental/agent/heartbeat.py).
    agent_last_sample_at = models.DateTimeField(_("last sample"), null=True, blank=True)
    agent_report = models.JSONField(_("agent report"), default=dict, blank=True)
    idle_reset_at = models.DateTimeField(_("idle count reset at"), null=True, blank=True)
    idle_warned_at = models.DateTimeField(_("idle warning sent at"), null=True, blank=True)
    stopped_at = models.DateTimeField(_("stopped at"), null=True, blank=True)
    # The root disk's size, from the offering at launch: billed as storage while stopped (B8).
    root_disk_gb = models.PositiveIntegerField(_("root disk (GB)"), default=0)

    class Meta:
        ordering = ["id"]
        verbose_name = _("instance")
        verbose_name_plural = _("instances")
        constraints = [
            models.UniqueConstraint(
                fields=["account", "external_id"],
                condition=~models.Q(external_id=""),
                name="one_row_per_cloud_instance",
            ),
            models.CheckConstraint(condition=models.Q(gpu_count__gte=1), name="instance_has_gpus"),
        ]

    def __str__(self) -> str:
        return self.external_id or f"instance #{self.pk} ({self.get_state_display()})"

    def save(self, *args: object, **kwargs: object) -> None:
        if not self.idempotency_key:
            self.idempotency_key = self.new_idempotency_key()
        super().save(*args, **kwargs)

    @staticmethod
    def new_idempotency_key() -> str:
        """Unique per instance, sent to the cloud (L1); set before a bulk insert, which
        does not call ``save``."""
        return f"{settings.PORTAL_INSTALLATION_ID}-{uuid.uuid4().hex}"[:64]


class UsageRecord(models.Model):
    """One continuous billed run: [start, end), end empty while it runs. Billing's truth."""

    instance = models.ForeignKey(Instance, on_delete=models.PROTECT, related_name="usage")
    project = models.ForeignKey("portal.Project", on_delete=models.PROTECT, related_name="usage")
    gpu_model = models.ForeignKey("rental.GpuModel", on_delete=models.PROTECT, related_name="+")
    tier = models.CharField(_("tier"), max_length=16, choices=Tier.choices)
    market = models.CharField(_("market"), max_length=16, choices=Market.choices)
    gpu_count = models.PositiveSmallIntegerField(_("GPUs"))
    start = models.DateTimeField(_("start"), db_index=True)
    end = models.DateTimeField(_("end"), null=True, blank=True, db_index=True)
    rate = models.DecimalField(_("rate per GPU-hour"), max_digits=12, decimal_places=6)
    # Copied from the instance: the rate's currency and the exchange rate captured at launch.
    currency = models.CharField(_("currency"), max_length=3, default=billing_currency)
    exchange_rate = models.DecimalField(
        _("exchange rate at launch"),
        max_digits=RATE_DIGITS,
        decimal_places=RATE_DECIMALS,
        default=ONE,
    )
    exchange_rate_ref = models.ForeignKey(
        "rental.ExchangeRate",
        on_delete=models.PROTECT,
        null=True,
        blank=True,
        related_name="+",
        db_index=False,
    )
    end_reason = models.CharField(
        _("end reason"), max_length=20, choices=TerminationReason.choices, blank=True
    )
    # Set by billing once this closed run's seconds are in its period rollups; a closed
    # run is never changed after that. Open runs are never rolled up.
    rolled_up = models.BooleanField(_("rolled up"), default=False, db_default=False, editable=False)

    class Meta:
        ordering = ["start", "id"]
        verbose_name = _("usage record")
        verbose_name_plural = _("usage records")
        indexes = [
            models.Index(fields=["project", "start"]),
            # What billing reads live beside the rollups: open runs and runs not yet rolled up.
            models.Index(
                fields=["start"], condition=models.Q(rolled_up=False), name="usage_not_rolled_up"
            ),
        ]
        constraints = [
            models.UniqueConstraint(
                fields=["instance"],
                condition=models.Q(end__isnull=True),
                name="one_open_usage_per_instance",
            ),
            models.UniqueConstraint(fields=["instance", "start"], name="one_usage_per_start"),
            models.CheckConstraint(
                condition=models.Q(end__isnull=True) | models.Q(end__gte=models.F("start")),
                name="usage_ends_after_start",
            ),
            models.CheckConstraint(condition=models.Q(gpu_count__gte=1), name="usage_has_gpus"),
            models.CheckConstraint(condition=models.Q(rate__gte=0), name="usage_rate_positive"),
        ]

    def __str__(self) -> str:
        return f"{self.gpu_count}× {self.gpu_model} [{self.start:%Y-%m-%d %H:%M:%S}, {self.end})"

    @property
    def platform_ended(self) -> bool:
        return self.end_reason in PLATFORM_ENDED


class UtilizationSample(models.Model):
    """One heartbeat's per-GPU utilization and memory used, kept raw for the retention
    window (site policy) and rolled up hourly (UtilizationRollup). One row an instance a
    minute, so every byte counts: the key is (instance, at), with no id column and no
    second index, and the readings are packed (rental.models.packed). What only L8's
    health needs (temperature, power, ECC, throttling) stays on the instance's report."""

    pk = models.CompositePrimaryKey("instance", "at")
    instance = models.ForeignKey(
        Instance, on_delete=models.CASCADE, related_name="samples", db_index=False
    )
    at = models.DateTimeField(_("at"))
    gpu_utilization = PackedReadingsField(_("GPU utilization (%)"), scale=100, width=2)
    memory_used_mb = PackedReadingsField(_("memory used (MB)"), scale=1, width=4)
    ssh_sessions = models.PositiveSmallIntegerField(_("SSH sessions"), null=True, blank=True)

    class Meta:
        ordering = ["instance", "at"]
        verbose_name = _("utilization sample")
        verbose_name_plural = _("utilization samples")

    def __str__(self) -> str:
        return f"{self.instance_id} @ {self.at:%H:%M:%S}"


SSH_KEY_TYPES = (
    "ssh-ed25519",
    "ssh-rsa",
    "ecdsa-sha2-nistp256",
    "ecdsa-sha2-nistp384",
    "ecdsa-sha2-nistp521",
    "sk-ssh-ed25519@openssh.com",
)


def validate_public_key(value: str) -> None:
    parts = value.strip().split()
    if len(parts) < 2 or parts[0] not in SSH_KEY_TYPES:
        raise ValidationError(_("Paste an OpenSSH public key, e.g. 'ssh-ed25519 AAAA… you@host'."))
    try:
        blob = base64.b64decode(parts[1], validate=True)
    except (binascii.Error, ValueError):
        raise ValidationError(_("The key's base64 part is not valid.")) from None
    if not blob[4:].startswith(parts[0].encode()):
        raise ValidationError(_("The key's body does not match its type."))


class SshKey(models.Model):
    user = models.ForeignKey(
        settings.AUTH_USER_MODEL, on_delete=models.CASCADE, related_name="ssh_keys"
    )
    name = models.CharField(_("name"), max_length=60)
    public_key = models.TextField(_("public key"), validators=[validate_public_key])
    created_at = models.DateTimeField(_("created at"), default=timezone.now)

    class Meta:
        ordering = ["name"]
        verbose_name = _("SSH key")
        verbose_name_plural = _("SSH keys")
        constraints = [
            models.UniqueConstraint(fields=["user", "name"], name="one_key_name_per_user"),
        ]

    def __str__(self) -> str:
        return f"{self.name} ({self.fingerprint})"

    @property
    def fingerprint(self) -> str:
        try:
            blob = base64.b64decode(self.public_key.split()[1])
        except (IndexError, binascii.Error, ValueError):
            return "?"
        digest = base64.b64encode(hashlib.sha256(blob).digest()).decode().rstrip("=")
        return f"SHA256:{digest}"
