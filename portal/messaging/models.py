"""A project's chat channels, who wants which events on them, and what was sent."""

from django.conf import settings
from django.db import models
from django.utils import timezone
from django.utils.translation import gettext_lazy as _

from portal.models import Project
from portal.notifications import Event

# What a delivery is when it is not one event's message.
TEST_MESSAGE = "channel.test"
DIGEST = "digest"
DELIVERY_KINDS = [
    *Event.choices,
    (TEST_MESSAGE, _("Test message")),
    (DIGEST, _("Daily digest")),
]


class Channel(models.Model):
    """Where a project's messages go. Its address and secret are kept encrypted
    (``portal.crypto``) and never shown again; ``hint`` is what a page may show."""

    class Kind(models.TextChoices):
        SLACK = "slack", "Slack"
        FEISHU = "feishu", _("Feishu")
        DINGTALK = "dingtalk", _("DingTalk")
        WECOM = "wecom", _("WeCom")
        EMAIL = "email", _("E-mail")
        WEBHOOK = "webhook", _("Signed JSON webhook")

    project = models.ForeignKey(Project, on_delete=models.CASCADE, related_name="chat_channels")
    name = models.CharField(_("name"), max_length=80)
    kind = models.CharField(_("kind"), max_length=16, choices=Kind.choices)
    secrets_encrypted = models.TextField(_("address and secret (encrypted)"))
    hint = models.CharField(_("where"), max_length=120, blank=True)
    created_by = models.ForeignKey(
        settings.AUTH_USER_MODEL, on_delete=models.SET_NULL, null=True, blank=True, related_name="+"
    )
    created_at = models.DateTimeField(_("created at"), default=timezone.now)

    class Meta:
        ordering = ["project", "name"]
        verbose_name = _("chat channel")
        verbose_name_plural = _("chat channels")
        constraints = [
            models.UniqueConstraint(fields=["project", "name"], name="channel_name_per_project"),
            models.CheckConstraint(
                condition=models.Q(
                    kind__in=["slack", "feishu", "dingtalk", "wecom", "email", "webhook"]
                ),
                name="channel_kind_valid",
            ),
        ]

    def __str__(self) -> str:
        return f"{self.name} ({self.get_kind_display()})"


class Subscription(models.Model):
    """One person's choice for one event on one channel. Without a row, the default of
    their role in the channel's project applies (``portal.messaging.subscriptions``)."""

    class Mode(models.TextChoices):
        OFF = "off", _("Off")
        INSTANT = "instant", _("Each message")
        DIGEST = "digest", _("Daily digest")

    user = models.ForeignKey(
        settings.AUTH_USER_MODEL, on_delete=models.CASCADE, related_name="chat_subscriptions"
    )
    channel = models.ForeignKey(Channel, on_delete=models.CASCADE, related_name="subscriptions")
    event = models.CharField(_("event"), max_length=32, choices=Event.choices)
    mode = models.CharField(_("how"), max_length=8, choices=Mode.choices)

    class Meta:
        verbose_name = _("subscription")
        verbose_name_plural = _("subscriptions")
        constraints = [
            models.UniqueConstraint(
                fields=["user", "channel", "event"], name="one_subscription_per_event"
            ),
            models.CheckConstraint(
                condition=models.Q(mode__in=["off", "instant", "digest"]),
                name="subscription_mode_valid",
            ),
        ]

    def __str__(self) -> str:
        return f"{self.user} · {self.channel} · {self.event}: {self.mode}"


class Delivery(models.Model):
    """One message to one channel in one language, written in the transaction of the
    change that caused it and sent by a task after it commits. ``message_key`` and
    ``language`` make it once per channel: a task delivered twice finds it claimed or
    sent."""

    class Status(models.TextChoices):
        PENDING = "pending", _("waiting")
        SENDING = "sending", _("sending")
        SENT = "sent", _("sent")
        FAILED = "failed", _("failed")

    channel = models.ForeignKey(Channel, on_delete=models.CASCADE, related_name="deliveries")
    message_key = models.UUIDField()
    language = models.CharField(max_length=16)
    event = models.CharField(_("event"), max_length=32, choices=DELIVERY_KINDS)
    subject = models.CharField(_("subject"), max_length=300)
    text = models.TextField(_("text"), blank=True)
    link = models.CharField(_("link"), max_length=500, blank=True)
    status = models.CharField(
        _("status"), max_length=8, choices=Status.choices, default=Status.PENDING
    )
    attempts = models.PositiveIntegerField(_("attempts"), default=0)
    last_error = models.CharField(_("why it failed"), max_length=300, blank=True)
    created_at = models.DateTimeField(_("created at"), default=timezone.now)
    next_attempt_at = models.DateTimeField(default=timezone.now)
    claimed_at = models.DateTimeField(null=True, blank=True)
    sent_at = models.DateTimeField(_("sent at"), null=True, blank=True)

    class Meta:
        ordering = ["-created_at", "-id"]
        verbose_name = _("delivery")
        verbose_name_plural = _("deliveries")
        constraints = [
            models.UniqueConstraint(
                fields=["channel", "message_key", "language"], name="one_delivery_per_channel"
            ),
            models.CheckConstraint(
                condition=models.Q(status__in=["pending", "sending", "sent", "failed"]),
                name="delivery_status_valid",
            ),
        ]
        indexes = [models.Index(fields=["status", "next_attempt_at"], name="delivery_due")]

    def __str__(self) -> str:
        return f"{self.channel}: {self.subject} ({self.status})"


class DeliveryAttempt(models.Model):
    """One try at sending a delivery: whether it went, and why not (never an address or
    a secret)."""

    delivery = models.ForeignKey(Delivery, on_delete=models.CASCADE, related_name="tries")
    at = models.DateTimeField(default=timezone.now)
    ok = models.BooleanField()
    error = models.CharField(max_length=300, blank=True)

    class Meta:
        ordering = ["at", "id"]

    def __str__(self) -> str:
        return f"{self.delivery_id} at {self.at}: {'ok' if self.ok else self.error}"


class DigestEntry(models.Model):
    """A message kept for a channel's daily digest (someone chose the digest for its
    event); ``digest`` is the delivery that carried it, once sent."""

    channel = models.ForeignKey(Channel, on_delete=models.CASCADE, related_name="digest_entries")
    message_key = models.UUIDField()
    language = models.CharField(max_length=16)
    event = models.CharField(max_length=32, choices=Event.choices)
    subject = models.CharField(max_length=300)
    link = models.CharField(max_length=500, blank=True)
    created_at = models.DateTimeField(default=timezone.now)
    digest = models.ForeignKey(
        Delivery, on_delete=models.SET_NULL, null=True, blank=True, related_name="entries"
    )

    class Meta:
        ordering = ["created_at", "id"]
        constraints = [
            models.UniqueConstraint(
                fields=["channel", "message_key", "language"], name="one_digest_entry_per_channel"
            )
        ]

    def __str__(self) -> str:
        return f"{self.channel}: {self.subject}"
