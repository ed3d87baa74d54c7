"""``ChatChannel``: what ``notify()`` hands to the chat channels. Inside the caller's
transaction it writes what must be sent (a ``Delivery`` per channel and language, or a
``DigestEntry`` for those who chose the digest) and, once that commits, queues one task
per delivery. Nothing here waits on the network, and nothing here can make the change
that called it fail: its writes are in a savepoint, and an error is logged, not raised.
"""

import logging
import uuid
from collections.abc import Iterable
from typing import Any

from django.conf import settings
from django.db import transaction

from portal import languages
from portal.messaging import tasks
from portal.messaging.models import Channel, Delivery, DigestEntry, Subscription
from portal.messaging.subscriptions import wanted
from portal.notifications import Batch, Message, written

logger = logging.getLogger(__name__)

Mode = Subscription.Mode


def absolute(link: str) -> str:
    """A portal path as an address anyone can open (PORTAL_BASE_URL)."""
    if link.startswith("/"):
        return f"{settings.PORTAL_BASE_URL.rstrip('/')}{link}"
    return link


class ChatChannel:
    """The projects' chat channels, for messages that name their event and project."""

    def send(self, batch: Batch) -> None:
        about = [(users, m) for users, m in batch if m.event and m.project is not None]
        if not about:
            return
        try:
            with transaction.atomic():
                made = record(about)
        except Exception:  # chat must never undo or fail the change that told people
            logger.exception("Chat messages could not be recorded; the change goes on")
            return
        if made:
            transaction.on_commit(lambda: tasks.enqueue(made), robust=True)


def record(batch: Iterable[tuple[Iterable[Any], Message]]) -> list[int]:
    """Write the deliveries and digest entries ``batch`` asks for; their delivery ids."""
    batch = list(batch)
    with_channels = set(
        Channel.objects.filter(project_id__in={m.project for _u, m in batch}).values_list(
            "project_id", flat=True
        )
    )
    deliveries: list[Delivery] = []
    entries: list[DigestEntry] = []
    for users, message in batch:
        if message.project not in with_channels:
            continue
        targets = wanted(project_id=message.project, event=message.event, users=users)
        if not targets:
            continue
        spoken = languages.preferred({user.pk: user for _c, user, _m in targets}.values())
        key = uuid.uuid4()
        instant: dict[tuple[int, str], Channel] = {}
        digest: dict[tuple[int, str], Channel] = {}
        for channel, user, mode in targets:
            chosen = instant if mode == Mode.INSTANT else digest
            chosen[channel.pk, spoken[user.pk]] = channel
        link = absolute(message.link)
        for (_pk, language), channel in sorted(instant.items()):
            subject, text = written(message, language)
            deliveries.append(
                Delivery(
                    channel=channel,
                    message_key=key,
                    language=language,
                    event=message.event,
                    subject=subject,
                    text=text,
                    link=link[:500],
                )
            )
        for (_pk, language), channel in sorted(digest.items()):
            subject, _text = written(message, language)
            entries.append(
                DigestEntry(
                    channel=channel,
                    message_key=key,
                    language=language,
                    event=message.event,
                    subject=subject,
                    link=link[:500],
                )
            )
    Delivery.objects.bulk_create(deliveries, batch_size=500)
    DigestEntry.objects.bulk_create(entries, batch_size=500)
    return [delivery.pk for delivery in deliveries]
