"""How single sign-on's audit events read (``portal.audit_log``): group roles, and the
admin or finance rights a login gave or took back. Memberships a login changes are the
portal's own ``membership.set`` / ``membership.removed``, with the groups that caused
them."""

from collections.abc import Mapping

from django.contrib.auth import get_user_model
from django.urls import reverse
from django.utils.translation import gettext_lazy as _

from portal.audit_log import Kind, Named, Value, Verb, choice, numeric_ids
from portal.sso.models import GroupRole, IdentityProvider


def _group_roles(ids: list[str]) -> Mapping[str, Named]:
    return {
        str(row.pk): Named(_("“%(name)s”") % {"name": row.group})
        for row in GroupRole.objects.filter(pk__in=numeric_ids(ids))
    }


def _users(ids: list[str]) -> Mapping[str, Named]:
    return {
        str(user.pk): Named(user.get_username(), reverse("admin:auth_user_change", args=[user.pk]))
        for user in get_user_model().objects.filter(pk__in=numeric_ids(ids))
    }


def _providers(ids: list[str]) -> Mapping[str, Named]:
    return {
        str(row.pk): Named(row.name, reverse("admin:sso_identityprovider_change", args=[row.pk]))
        for row in IdentityProvider.objects.filter(pk__in=numeric_ids(ids))
    }


VERBS = {
    "group_role.added": Verb(
        _("%(actor)s let the group %(group)s give the role %(role)s"), _("Group role added")
    ),
    "group_role.removed": Verb(
        _("%(actor)s stopped the group %(was_group)s giving the role %(was_role)s"),
        _("Group role removed"),
    ),
    "user.admin_granted": Verb(
        _("%(actor)s made %(object)s an admin, as their groups %(groups)s say"),
        _("Admin given by groups"),
    ),
    "user.admin_revoked": Verb(
        _("%(actor)s took admin rights from %(object)s: their groups no longer give them"),
        _("Admin taken back by groups"),
    ),
    "user.finance_granted": Verb(
        _("%(actor)s gave %(object)s finance rights, as their groups %(groups)s say"),
        _("Finance given by groups"),
    ),
    "user.finance_revoked": Verb(
        _("%(actor)s took finance rights from %(object)s: their groups no longer give them"),
        _("Finance taken back by groups"),
    ),
    "identity_provider.saved": Verb(
        _("%(actor)s set up the identity provider %(object)s"), _("Identity provider saved")
    ),
}

KINDS = {
    "sso.grouprole": Kind(_("group role"), _group_roles),
    "auth.user": Kind(_("person"), _users),
    "sso.identityprovider": Kind(_("identity provider"), _providers),
}

VALUES = {
    "group": Value(_("Group")),
    "groups": Value(_("Groups")),
    "sso.grouprole:role": Value(_("Role"), choice(GroupRole.Role)),
    "issuer": Value(_("Issuer")),
    "client_id": Value(_("Client ID")),
    "client_secret": Value(_("Client secret")),
}
