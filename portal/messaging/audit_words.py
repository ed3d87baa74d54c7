"""How the chat channels' audit events read (``portal.audit_log``)."""

from collections.abc import Mapping

from django.urls import reverse
from django.utils.translation import gettext_lazy as _

from portal.audit_log import Kind, Named, Value, Verb, choice, numeric_ids
from portal.messaging.models import Channel


def _channels(ids: list[str]) -> Mapping[str, Named]:
    return {
        str(channel.pk): Named(
            _("“%(name)s”") % {"name": channel.name},
            reverse("messaging:channels", args=[channel.project.slug]),
        )
        for channel in Channel.objects.filter(pk__in=numeric_ids(ids)).select_related("project")
    }


VERBS = {
    "channel.added": Verb(
        _("%(actor)s added the chat channel %(object)s to %(in_project)s"),
        _("Chat channel added"),
    ),
    "channel.removed": Verb(
        _("%(actor)s removed the chat channel %(was_name)s from %(in_project)s"),
        _("Chat channel removed"),
    ),
}

KINDS = {"messaging.channel": Kind(_("chat channel"), _channels)}

VALUES = {"messaging.channel:kind": Value(_("Kind"), choice(Channel.Kind))}
