"""Sending what was recorded: one delivery at a time, claimed first so that it is sent at
most once however often its task is delivered; the sweep for deliveries whose task was
lost; and the daily digest.

A delivery is claimed by a conditional update (waiting → sending). A send that fails in a
way that may pass (a timeout, HTTP 5xx or 429) puts it back to waiting for the task's
next try; one that will not pass (HTTP 4xx, an address the service refuses), or the last
try, marks it failed. Every try is recorded with its reason.
"""

import logging
import uuid
from datetime import datetime, timedelta

from django.db import transaction
from django.utils import timezone
from django.utils.translation import gettext_noop

from portal import crypto
from portal.messaging.models import (
    DIGEST,
    TEST_MESSAGE,
    Channel,
    Delivery,
    DeliveryAttempt,
    DigestEntry,
)
from portal.messaging.transports import Outgoing, SendFailed, send
from portal.phrases import Phrase, plural_noop, render

logger = logging.getLogger(__name__)

Status = Delivery.Status

# A lost task's delivery (never claimed) is sent again by the sweep after this long.
LOST_AFTER = timedelta(minutes=2)
# The longest wait between two tries (Celery's retry_backoff_max): under the broker's
# visibility timeout (6 minutes), so Redis never hands a waiting try to a second worker.
RETRY_BACKOFF_MAX = 300
# A worker that died while sending leaves its claim; after this long the delivery is
# marked failed rather than sent again, since it may have gone out (never twice).
STALE_CLAIM = timedelta(minutes=10)


class TryAgain(Exception):
    """The send failed in a way that may pass; the task tries again after a backoff."""


def deliver(delivery_id: int, *, final: bool, now: datetime | None = None) -> str:
    """Send delivery ``delivery_id`` once, unless it was sent, failed or is being sent.
    Returns its status afterwards; raises TryAgain for a failure that may pass, unless
    ``final`` (the last try), when it is marked failed instead."""
    now = now or timezone.now()
    claimed = Delivery.objects.filter(pk=delivery_id, status=Status.PENDING).update(
        status=Status.SENDING, claimed_at=now
    )
    if not claimed:
        return Delivery.objects.filter(pk=delivery_id).values_list("status", flat=True).first()
    delivery = Delivery.objects.select_related("channel__project").get(pk=delivery_id)
    channel = delivery.channel
    message = Outgoing(
        delivery_id=delivery.pk,
        event=delivery.event,
        project=channel.project.slug,
        language=delivery.language,
        subject=delivery.subject,
        text=delivery.text,
        link=delivery.link,
    )
    try:
        send(channel.kind, crypto.decrypt(channel.secrets_encrypted), message)
    except SendFailed as failure:
        retry = failure.retryable and not final
        _finish(delivery, ok=False, error=failure.reason, retry=retry)
        if retry:
            raise TryAgain(failure.reason) from None
        return Status.FAILED
    _finish(delivery, ok=True, error="", retry=False)
    return Status.SENT


def _finish(delivery: Delivery, *, ok: bool, error: str, retry: bool) -> None:
    now = timezone.now()
    with transaction.atomic():
        DeliveryAttempt.objects.create(delivery=delivery, at=now, ok=ok, error=error)
        if ok:
            fields = {"status": Status.SENT, "sent_at": now, "last_error": ""}
        elif retry:
            # Waiting again; the sweep leaves it to the task's own retry until well after.
            backoff = timedelta(seconds=RETRY_BACKOFF_MAX)
            fields = {
                "status": Status.PENDING,
                "last_error": error,
                "next_attempt_at": now + backoff,
            }
        else:
            fields = {"status": Status.FAILED, "last_error": error}
        Delivery.objects.filter(pk=delivery.pk, status=Status.SENDING).update(
            attempts=delivery.attempts + 1, claimed_at=None, **fields
        )
    if not ok:
        logger.warning(
            "Chat delivery %s to channel %s failed (try %s): %s",
            delivery.pk,
            delivery.channel_id,
            delivery.attempts + 1,
            error,
        )


def lost(now: datetime | None = None) -> list[int]:
    """Deliveries whose task seems lost (waiting past their time): theirs is sent again.
    Deliveries a dead worker left claimed are marked failed (they may have gone out)."""
    now = now or timezone.now()
    Delivery.objects.filter(status=Status.SENDING, claimed_at__lt=now - STALE_CLAIM).update(
        status=Status.FAILED,
        claimed_at=None,
        last_error="the worker stopped while sending; not sent again, so never sent twice",
    )
    return list(
        Delivery.objects.filter(
            status=Status.PENDING, next_attempt_at__lt=now - LOST_AFTER
        ).values_list("pk", flat=True)[:500]
    )


DIGEST_SUBJECT = plural_noop(
    "Daily digest: %(n)s message from the GPU portal",
    "Daily digest: %(n)s messages from the GPU portal",
)


@transaction.atomic
def make_digests(now: datetime | None = None) -> list[int]:
    """One digest delivery per channel and language of the entries not yet sent; their
    ids. Entries are taken under a row lock, so two runs never put one in two digests."""
    now = now or timezone.now()
    waiting = list(
        DigestEntry.objects.select_for_update(skip_locked=True)
        .filter(digest__isnull=True, created_at__lte=now)
        .order_by("channel_id", "language", "created_at", "pk")
    )
    groups: dict[tuple[int, str], list[DigestEntry]] = {}
    for entry in waiting:
        groups.setdefault((entry.channel_id, entry.language), []).append(entry)
    made: list[int] = []
    for (channel_id, language), entries in groups.items():
        subject = render(Phrase(DIGEST_SUBJECT, n=len(entries)), language)
        lines = [
            f"• {entry.subject}" + (f"\n  {entry.link}" if entry.link else "") for entry in entries
        ]
        delivery = Delivery.objects.create(
            channel_id=channel_id,
            message_key=uuid.uuid4(),
            language=language,
            event=DIGEST,
            subject=subject[:300],
            text="\n".join(lines),
            created_at=now,
            next_attempt_at=now,
        )
        DigestEntry.objects.filter(pk__in=[entry.pk for entry in entries]).update(digest=delivery)
        made.append(delivery.pk)
    return made


TEST_SUBJECT = gettext_noop("Test message from the GPU portal")
TEST_TEXT = gettext_noop(
    "This channel of %(project)s is set up: messages its members subscribe to arrive here."
)


def test_message(channel: Channel, *, language: str, link: str, now: datetime) -> Delivery:
    """A test message for ``channel`` in ``language``, recorded to be sent."""
    text = render(Phrase(TEST_TEXT, project=channel.project.name), language)
    return Delivery.objects.create(
        channel=channel,
        message_key=uuid.uuid4(),
        language=language,
        event=TEST_MESSAGE,
        subject=render(Phrase(TEST_SUBJECT), language),
        text=f"{text}\n\n{link}",
        link=link,
        created_at=now,
        next_attempt_at=now,
    )
