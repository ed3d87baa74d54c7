"""Changes to chat channels and subscriptions: one function each, atomic, audited."""

from datetime import datetime
from typing import Any

from django.db import transaction
from django.utils import timezone
from django.utils.translation import gettext as _

from portal import audit, crypto
from portal.errors import Conflict, InvalidInput
from portal.messaging import kinds, tasks
from portal.messaging.delivery import test_message
from portal.messaging.models import Channel, Delivery, Subscription
from portal.models import Project
from portal.notifications import Event
from portal.text import plain_text


@transaction.atomic
def add_channel(
    *,
    actor: Any,
    project: Project,
    name: str,
    kind: str,
    address: str,
    secret: str = "",
    now: datetime | None = None,
    source: str = "web",
) -> Channel:
    """A new channel of ``project``; its address and secret are stored encrypted and
    never shown again. The caller has checked that ``actor`` manages the project."""
    now = now or timezone.now()
    name = plain_text(name, field="name", max_length=80, label=_("Name"))
    if not name:
        raise InvalidInput(_("Give the channel a name of 1 to 80 characters."), field="name")
    if kind not in Channel.Kind.values:
        raise InvalidInput(_("Choose a kind of channel."), field="kind")
    checked = kinds.check(kind, address, secret)
    if Channel.objects.filter(project=project, name=name).exists():
        raise Conflict(
            _("This project already has a channel with this name."),
            code="name_taken",
            field="name",
        )
    channel = Channel.objects.create(
        project=project,
        name=name,
        kind=kind,
        secrets_encrypted=crypto.encrypt(checked.secrets),
        hint=checked.hint,
        created_by=actor,
        created_at=now,
    )
    audit.record(
        actor=actor,
        verb="channel.added",
        obj=channel,
        project=project,
        source=source,
        after={"name": name, "kind": kind},
        at=now,
    )
    return channel


@transaction.atomic
def remove_channel(
    *, actor: Any, channel: Channel, now: datetime | None = None, source: str = "web"
) -> None:
    """Remove ``channel`` with its subscriptions and its delivery record."""
    audit.record(
        actor=actor,
        verb="channel.removed",
        obj=channel,
        project=channel.project_id,
        source=source,
        before={"name": channel.name, "kind": channel.kind},
        at=now,
    )
    channel.delete()


@transaction.atomic
def send_test(
    *, actor: Any, channel: Channel, language: str, link: str, now: datetime | None = None
) -> Delivery:
    """Record a test message to ``channel`` in ``language`` and queue it (sent by the
    worker, recorded like any other delivery)."""
    made = test_message(channel, language=language, link=link, now=now or timezone.now())
    transaction.on_commit(lambda: tasks.enqueue([made.pk]), robust=True)
    return made


@transaction.atomic
def set_subscriptions(*, user: Any, channel: Channel, choices: dict[str, str]) -> None:
    """``user``'s mode for each event of ``choices`` on ``channel`` (the others keep
    theirs). The caller has checked that ``user`` is a member of its project."""
    for event, mode in choices.items():
        if event not in Event.values:
            raise InvalidInput(_("Unknown event: %(event)s") % {"event": event}, field="choice")
        if mode not in Subscription.Mode.values:
            raise InvalidInput(_("Choose off, each message or daily digest."), field="choice")
    for event, mode in choices.items():
        Subscription.objects.update_or_create(
            user=user, channel=channel, event=event, defaults={"mode": mode}
        )
