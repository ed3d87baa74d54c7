"""The people side: projects, who belongs to them, and the audit log."""

from django.conf import settings
from django.db import models
from django.utils import timezone
from django.utils.translation import gettext_lazy as _

from portal.paths import path_of
from portal.phrases import PhraseField, render

FINANCE_GROUP = "finance"


class Project(models.Model):
    slug = models.SlugField(_("slug"), max_length=50, unique=True)
    name = models.CharField(_("name"), max_length=120)
    cost_center = models.CharField(_("cost center"), max_length=60, blank=True)
    is_active = models.BooleanField(_("active"), default=True)
    created_at = models.DateTimeField(_("created at"), default=timezone.now)
    members = models.ManyToManyField(
        settings.AUTH_USER_MODEL, through="Membership", related_name="projects"
    )

    class Meta:
        ordering = ["slug"]
        verbose_name = _("project")
        verbose_name_plural = _("projects")

    def __str__(self) -> str:
        return self.name

    def get_absolute_url(self) -> str:
        return path_of("rental:project", "slug", self.slug)


class Membership(models.Model):
    class Role(models.TextChoices):
        MANAGER = "manager", _("Manager")
        ENGINEER = "engineer", _("Engineer")

    user = models.ForeignKey(
        settings.AUTH_USER_MODEL, on_delete=models.CASCADE, related_name="memberships"
    )
    project = models.ForeignKey(Project, on_delete=models.CASCADE, related_name="memberships")
    role = models.CharField(_("role"), max_length=16, choices=Role.choices, default=Role.ENGINEER)
    created_at = models.DateTimeField(_("created at"), default=timezone.now)

    class Meta:
        verbose_name = _("membership")
        verbose_name_plural = _("memberships")
        constraints = [
            models.UniqueConstraint(fields=["user", "project"], name="one_membership_per_project"),
            models.CheckConstraint(
                condition=models.Q(role__in=["manager", "engineer"]), name="membership_role_valid"
            ),
        ]

    def __str__(self) -> str:
        return f"{self.user} · {self.project} ({self.get_role_display()})"


class AuditEvent(models.Model):
    class Source(models.TextChoices):
        WEB = "web", _("Web")
        API = "api", _("API")
        WORKER = "worker", _("Worker")
        ADMIN = "admin", _("Admin")
        COMMAND = "command", _("Command")

    at = models.DateTimeField(_("at"), default=timezone.now, db_index=True)
    actor = models.ForeignKey(
        settings.AUTH_USER_MODEL,
        on_delete=models.SET_NULL,
        null=True,
        blank=True,
        related_name="+",
    )
    verb = models.CharField(_("verb"), max_length=60, db_index=True)
    object_type = models.CharField(_("object type"), max_length=60)
    object_id = models.CharField(_("object id"), max_length=64)
    project = models.ForeignKey(
        Project, on_delete=models.SET_NULL, null=True, blank=True, related_name="+"
    )
    before = models.JSONField(_("before"), default=dict, blank=True)
    after = models.JSONField(_("after"), default=dict, blank=True)
    source = models.CharField(_("source"), max_length=16, choices=Source.choices)

    class Meta:
        ordering = ["-at", "-id"]
        verbose_name = _("audit event")
        verbose_name_plural = _("audit events")
        indexes = [
            models.Index(fields=["object_type", "object_id"]),
            # The log's order (newest first): a page reads its rows, whichever page.
            models.Index(models.F("at").desc(), models.F("id").desc(), name="audit_newest_first"),
        ]

    def __str__(self) -> str:
        return f"{self.at:%Y-%m-%d %H:%M:%S} {self.verb} {self.object_type}#{self.object_id}"


class Notification(models.Model):
    """A message for one person, shown in the portal and mailed. Its subject and body are
    kept as what is needed to say them (``portal.phrases``), so each reads in the language
    of whoever reads it; a row from before that is its plain text."""

    # The most a subject says, in any language.
    SUBJECT_LENGTH = 200

    user = models.ForeignKey(
        settings.AUTH_USER_MODEL, on_delete=models.CASCADE, related_name="notifications"
    )
    subject = PhraseField(_("subject"))
    body = PhraseField(_("body"))
    link = models.CharField(_("link"), max_length=300, blank=True)
    created_at = models.DateTimeField(_("created at"), default=timezone.now, db_index=True)
    read_at = models.DateTimeField(_("read at"), null=True, blank=True)

    class Meta:
        ordering = ["-created_at", "-id"]
        verbose_name = _("notification")
        verbose_name_plural = _("notifications")

    def __str__(self) -> str:
        return self.title

    @property
    def title(self) -> str:
        """The subject in the active language, at most ``SUBJECT_LENGTH`` characters."""
        return render(self.subject)[: self.SUBJECT_LENGTH]


class LanguagePreference(models.Model):
    """The language a person reads the portal in, and mail to them is written in: the one
    they picked in the user menu (``chosen``), else their browser's at their last login."""

    user = models.OneToOneField(
        settings.AUTH_USER_MODEL,
        on_delete=models.CASCADE,
        primary_key=True,
        related_name="language_preference",
    )
    language = models.CharField(_("language"), max_length=16, choices=settings.LANGUAGES)
    chosen = models.BooleanField(
        _("picked by the person"),
        default=False,
        help_text=_("Picked in the user menu, rather than taken from their browser."),
    )
    updated_at = models.DateTimeField(_("updated at"), auto_now=True)

    class Meta:
        verbose_name = _("language preference")
        verbose_name_plural = _("language preferences")

    def __str__(self) -> str:
        return f"{self.user_id}: {self.language}"


class ApiToken(models.Model):
    """A personal API token. Only its SHA-256 is stored; the token is shown once."""

    user = models.ForeignKey(
        settings.AUTH_USER_MODEL, on_delete=models.CASCADE, related_name="api_tokens"
    )
    name = models.CharField(_("name"), max_length=80)
    digest = models.CharField(max_length=64, unique=True)
    prefix = models.CharField(_("starts with"), max_length=12)
    created_at = models.DateTimeField(_("created at"), default=timezone.now)
    expires_at = models.DateTimeField(_("expires at"))
    last_used_at = models.DateTimeField(_("last used"), null=True, blank=True)
    revoked_at = models.DateTimeField(_("revoked at"), null=True, blank=True)

    class Meta:
        ordering = ["-created_at"]
        verbose_name = _("API token")
        verbose_name_plural = _("API tokens")
        constraints = [
            models.UniqueConstraint(fields=["user", "name"], name="one_token_name_per_user"),
        ]

    def __str__(self) -> str:
        return f"{self.name} ({self.prefix}…)"

    def is_usable(self, now=None) -> bool:
        now = now or timezone.now()
        return self.revoked_at is None and self.expires_at > now


class ServiceToken(models.Model):
    """A project's API token for a pipeline, not tied to a person (portal/service_tokens.py).

    It acts through its own ``account``: a user that cannot log in (no password, refused
    by the login backend), belongs to no project and is no person in any list; while the
    token is usable, ``portal.access`` gives that account the engineer's reach in
    ``project`` and nowhere else, and its ``scopes`` say which calls it may make. Only its
    SHA-256 is stored; the token is shown once."""

    class Scope(models.TextChoices):
        READ = "read", _("Read")
        LEASES = "leases", _("Leases")

    project = models.ForeignKey(Project, on_delete=models.CASCADE, related_name="service_tokens")
    account = models.OneToOneField(
        settings.AUTH_USER_MODEL, on_delete=models.PROTECT, related_name="service_token"
    )
    name = models.CharField(_("name"), max_length=80)
    scopes = models.JSONField(_("scopes"), default=list)
    digest = models.CharField(max_length=64, unique=True)
    prefix = models.CharField(_("starts with"), max_length=12)
    created_by = models.ForeignKey(
        settings.AUTH_USER_MODEL,
        on_delete=models.SET_NULL,
        null=True,
        blank=True,
        related_name="+",
        verbose_name=_("created by"),
    )
    created_at = models.DateTimeField(_("created at"), default=timezone.now)
    expires_at = models.DateTimeField(_("expires at"))
    last_used_at = models.DateTimeField(_("last used"), null=True, blank=True)
    revoked_at = models.DateTimeField(_("revoked at"), null=True, blank=True)

    class Meta:
        ordering = ["-created_at", "-id"]
        verbose_name = _("service token")
        verbose_name_plural = _("service tokens")
        constraints = [
            models.UniqueConstraint(
                fields=["project", "name"],
                condition=models.Q(revoked_at__isnull=True),
                name="one_live_service_token_name_per_project",
            ),
        ]

    def __str__(self) -> str:
        return f"{self.name} ({self.prefix}…)"

    def is_usable(self, now=None) -> bool:
        now = now or timezone.now()
        return self.revoked_at is None and self.expires_at > now


class Heartbeat(models.Model):
    """When a periodic process last showed that it runs, by name. Beat's heartbeat task
    writes ``beat`` on a worker, so a fresh row says beat schedules and a worker takes
    its tasks; ``/readyz`` compares its age with the task's period."""

    BEAT = "beat"

    name = models.CharField(_("name"), max_length=40, unique=True)
    at = models.DateTimeField(_("at"))

    class Meta:
        verbose_name = _("heartbeat")
        verbose_name_plural = _("heartbeats")

    def __str__(self) -> str:
        return f"{self.name} at {self.at:%Y-%m-%d %H:%M:%S}"


class LoginLock(models.Model):
    """An account locked after ``LOGIN_THROTTLE_ACCOUNT_ATTEMPTS`` failed logins from any
    addresses in one window (``portal.login_throttle``): every password is refused until
    ``until``, or until an admin lifts it. Kept for the name as typed (case and width
    folded), whether or not an account has it, so a lock says nothing about who exists."""

    username = models.CharField(_("username"), max_length=150, db_index=True)
    failures = models.PositiveIntegerField(_("failed logins"))
    locked_at = models.DateTimeField(_("locked at"), default=timezone.now)
    until = models.DateTimeField(_("locked until"))
    lifted_at = models.DateTimeField(_("lifted at"), null=True, blank=True)
    lifted_by = models.ForeignKey(
        settings.AUTH_USER_MODEL,
        on_delete=models.SET_NULL,
        null=True,
        blank=True,
        related_name="+",
        verbose_name=_("lifted by"),
    )

    class Meta:
        ordering = ["-locked_at", "-id"]
        verbose_name = _("login lock")
        verbose_name_plural = _("login locks")

    def __str__(self) -> str:
        return f"{self.username} ({self.locked_at:%Y-%m-%d %H:%M})"

    def in_force(self, now=None) -> bool:
        now = now or timezone.now()
        return self.lifted_at is None and self.until > now
