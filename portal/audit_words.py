"""How the portal's own audit events read (``portal.audit_log``): projects, members,
API tokens, service tokens and login locks."""

from collections.abc import Mapping

from django.urls import reverse
from django.utils.translation import gettext_lazy as _
from django.utils.translation import ngettext_lazy

from portal.audit_log import Kind, Named, Value, Verb, choice, counted, numeric_ids
from portal.models import ApiToken, LoginLock, Membership, Project, ServiceToken


def _projects(ids: list[str]) -> Mapping[str, Named]:
    return {
        str(project.pk): Named(project.name, reverse("rental:project", args=[project.slug]))
        for project in Project.objects.filter(pk__in=numeric_ids(ids))
    }


def _memberships(ids: list[str]) -> Mapping[str, Named]:
    found = Membership.objects.filter(pk__in=numeric_ids(ids)).select_related("user", "project")
    return {
        str(m.pk): Named(
            _("%(user)s in %(project)s")
            % {"user": m.user.get_username(), "project": m.project.name},
            reverse("rental:project", args=[m.project.slug]),
        )
        for m in found
    }


def _tokens(ids: list[str]) -> Mapping[str, Named]:
    return {
        str(token.pk): Named(_("“%(name)s”") % {"name": token.name})
        for token in ApiToken.objects.filter(pk__in=numeric_ids(ids))
    }


def _service_tokens(ids: list[str]) -> Mapping[str, Named]:
    found = ServiceToken.objects.filter(pk__in=numeric_ids(ids)).select_related("project")
    return {
        str(token.pk): Named(
            _("“%(name)s” of %(project)s") % {"name": token.name, "project": token.project.name},
            reverse("service_tokens", args=[token.project.slug]),
        )
        for token in found
    }


def _login_locks(ids: list[str]) -> Mapping[str, Named]:
    return {
        str(lock.pk): Named(
            _("“%(name)s”") % {"name": lock.username},
            reverse("admin:portal_loginlock_change", args=[lock.pk]),
        )
        for lock in LoginLock.objects.filter(pk__in=numeric_ids(ids))
    }


VERBS = {
    "project.created": Verb(_("%(actor)s created the project %(object)s"), _("Project created")),
    "project.renamed": Verb(
        _("%(actor)s renamed the project %(was_name)s to %(object)s"), _("Project renamed")
    ),
    "membership.set": Verb(
        _("%(actor)s made %(user)s %(role)s of %(in_project)s"), _("Member added or changed")
    ),
    "membership.removed": Verb(
        _("%(actor)s removed %(was_user)s from %(in_project)s"), _("Member removed")
    ),
    "token.created": Verb(_("%(actor)s created the API token %(object)s"), _("API token created")),
    "token.revoked": Verb(_("%(actor)s revoked the API token %(object)s"), _("API token revoked")),
    "service_token.created": Verb(
        _("%(actor)s created the service token %(object)s with the scopes %(scopes)s"),
        _("Service token created"),
    ),
    "service_token.revoked": Verb(
        _("%(actor)s revoked the service token %(object)s"), _("Service token revoked")
    ),
    "login_lock.locked": Verb(
        _("%(actor)s locked the login of %(object)s after %(failures)s"), _("Login locked")
    ),
    "login_lock.lifted": Verb(
        _("%(actor)s lifted the login lock on %(object)s"), _("Login lock lifted")
    ),
}

KINDS = {
    "portal.project": Kind(_("project"), _projects),
    "portal.membership": Kind(_("membership"), _memberships),
    "portal.apitoken": Kind(_("API token"), _tokens),
    "portal.servicetoken": Kind(_("service token"), _service_tokens),
    "portal.loginlock": Kind(_("login lock"), _login_locks),
}

VALUES = {
    "name": Value(_("Name")),
    "slug": Value(_("Short name")),
    "cost_center": Value(_("Cost center")),
    "user": Value(_("Person")),
    "role": Value(_("Role"), choice(Membership.Role)),
    "expires_at": Value(_("Expires")),
    "scopes": Value(_("Scopes")),  # their codes, as the API names them: read, leases
    "username": Value(_("Username")),
    "failures": Value(
        _("Failed logins"),
        counted(ngettext_lazy("%(n)s failed login", "%(n)s failed logins", "n")),
    ),
    "until": Value(_("Locked until")),
}
