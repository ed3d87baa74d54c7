"""The identity provider, which of its groups give which role, and what they gave.

Memberships and admin or finance rights given by a group are marked by a row here
(``GrantedMembership``, ``GrantedRole``); everything without such a row was given by
hand and is never touched by a login.
"""

from django.conf import settings
from django.core.exceptions import ValidationError
from django.db import models
from django.utils import timezone
from django.utils.translation import gettext_lazy as _

from portal import crypto
from portal.models import Membership, Project


class IdentityProvider(models.Model):
    """The one OpenID Connect provider people sign in with, when the settings name none
    (``PORTAL_OIDC_ISSUER``). One row at most; its client secret is stored encrypted and
    never shown again."""

    ONLY = 1

    id = models.PositiveSmallIntegerField(primary_key=True, default=ONLY, editable=False)
    enabled = models.BooleanField(_("enabled"), default=True)
    name = models.CharField(
        _("name on the login page"),
        max_length=60,
        help_text=_("The login page says “Sign in with” this name."),
    )
    issuer = models.URLField(
        _("issuer URL"),
        max_length=300,
        help_text=_("Its endpoints and keys are read from /.well-known/openid-configuration."),
    )
    client_id = models.CharField(_("client ID"), max_length=200)
    client_secret_encrypted = models.TextField(blank=True, editable=False)
    scopes = models.CharField(_("scopes"), max_length=200, default="openid email profile")
    groups_claim = models.CharField(
        _("groups claim"),
        max_length=100,
        default="groups",
        help_text=_("The claim of the ID token or user info that lists the person's groups."),
    )
    updated_at = models.DateTimeField(_("updated at"), auto_now=True)

    class Meta:
        verbose_name = _("identity provider")
        verbose_name_plural = _("identity provider")
        constraints = [
            models.CheckConstraint(condition=models.Q(id=1), name="one_identity_provider"),
        ]

    def __str__(self) -> str:
        return self.name

    @property
    def has_client_secret(self) -> bool:
        return bool(self.client_secret_encrypted)

    def set_client_secret(self, secret: str) -> None:
        self.client_secret_encrypted = crypto.encrypt({"client_secret": secret}) if secret else ""

    def client_secret(self) -> str:
        if not self.client_secret_encrypted:
            return ""
        return crypto.decrypt(self.client_secret_encrypted)["client_secret"]


class GroupRole(models.Model):
    """People in ``group`` (at the identity provider) get ``role``: engineer or manager
    of ``project``, or admin, or finance (no project)."""

    class Role(models.TextChoices):
        ENGINEER = "engineer", _("Engineer of a project")
        MANAGER = "manager", _("Manager of a project")
        ADMIN = "admin", _("Admin")
        FINANCE = "finance", _("Finance")

    PROJECT_ROLES = (Role.ENGINEER, Role.MANAGER)

    group = models.CharField(_("group"), max_length=200)
    role = models.CharField(_("role"), max_length=16, choices=Role.choices)
    project = models.ForeignKey(
        Project,
        on_delete=models.CASCADE,
        null=True,
        blank=True,
        related_name="group_roles",
        verbose_name=_("project"),
    )
    created_at = models.DateTimeField(_("created at"), default=timezone.now)

    class Meta:
        ordering = ["group", "role", "project__slug"]
        verbose_name = _("group role")
        verbose_name_plural = _("group roles")
        constraints = [
            models.CheckConstraint(
                condition=(
                    models.Q(role__in=["engineer", "manager"], project__isnull=False)
                    | models.Q(role__in=["admin", "finance"], project__isnull=True)
                ),
                name="group_role_project_iff_project_role",
            ),
            models.UniqueConstraint(
                fields=["group", "project"],
                condition=models.Q(project__isnull=False),
                name="one_role_per_group_and_project",
            ),
            models.UniqueConstraint(
                fields=["group", "role"],
                condition=models.Q(project__isnull=True),
                name="one_global_role_per_group",
            ),
        ]

    def __str__(self) -> str:
        if self.project_id:
            return f"{self.group} → {self.get_role_display()}: {self.project}"
        return f"{self.group} → {self.get_role_display()}"

    def clean(self) -> None:
        if self.role in self.PROJECT_ROLES and self.project_id is None:
            raise ValidationError({"project": _("An engineer or manager role needs a project.")})
        if self.role and self.role not in self.PROJECT_ROLES and self.project_id is not None:
            raise ValidationError({"project": _("Admin and finance are not roles in a project.")})


class Identity(models.Model):
    """Who a person is at the identity provider (``issuer`` and ``subject``, the ``sub``
    claim), and the groups it said at their last login."""

    user = models.OneToOneField(
        settings.AUTH_USER_MODEL, on_delete=models.CASCADE, related_name="sso_identity"
    )
    issuer = models.CharField(_("issuer"), max_length=300)
    subject = models.CharField(_("subject"), max_length=255)
    groups = models.JSONField(_("groups at the last login"), default=list, blank=True)
    created_at = models.DateTimeField(_("created at"), default=timezone.now)
    last_login_at = models.DateTimeField(_("last signed in"), default=timezone.now)

    class Meta:
        verbose_name = _("single sign-on identity")
        verbose_name_plural = _("single sign-on identities")
        constraints = [
            models.UniqueConstraint(fields=["issuer", "subject"], name="one_user_per_identity"),
        ]

    def __str__(self) -> str:
        return f"{self.user} ({self.subject})"


class GrantedMembership(models.Model):
    """A membership given by the person's groups (and so changed at every login); a
    membership without one was given by hand."""

    membership = models.OneToOneField(
        Membership, on_delete=models.CASCADE, primary_key=True, related_name="sso_grant"
    )
    groups = models.JSONField(_("groups"), default=list)
    granted_at = models.DateTimeField(_("granted at"), default=timezone.now)

    class Meta:
        verbose_name = _("membership from groups")
        verbose_name_plural = _("memberships from groups")

    def __str__(self) -> str:
        return str(self.membership)


class GrantedRole(models.Model):
    """Admin or finance rights given by the person's groups; the same rights without a
    row here were given by hand."""

    class Role(models.TextChoices):
        ADMIN = "admin", _("Admin")
        FINANCE = "finance", _("Finance")

    user = models.ForeignKey(
        settings.AUTH_USER_MODEL, on_delete=models.CASCADE, related_name="sso_roles"
    )
    role = models.CharField(_("role"), max_length=16, choices=Role.choices)
    groups = models.JSONField(_("groups"), default=list)
    granted_at = models.DateTimeField(_("granted at"), default=timezone.now)

    class Meta:
        verbose_name = _("role from groups")
        verbose_name_plural = _("roles from groups")
        constraints = [
            models.UniqueConstraint(fields=["user", "role"], name="one_granted_role_per_user"),
        ]

    def __str__(self) -> str:
        return f"{self.user} · {self.get_role_display()}"
