"""Telling people things: the one call every part of the portal uses, ``notify``.

Each message goes through the site's channels (PORTAL_NOTIFICATION_CHANNELS): a
notification in the portal, the same by mail, and the project's chat channels
(``portal.messaging``, for a message that names its ``event`` and ``project``). Mail is
sent after the surrounding transaction commits, so a rolled-back change never tells
anyone anything.

A message's subject and body are ``portal.phrases`` texts: the portal keeps them as they
are and says them in the reader's language when the notification is shown; a mail is
written in each recipient's language (``portal.languages``). ``notify_many`` sends many
messages with one insert and one batch of mail (a month's statements closing).
"""

from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from typing import Any, Protocol

from django.conf import settings
from django.contrib.auth import get_user_model
from django.core.mail import send_mass_mail
from django.db import models, transaction
from django.utils.translation import gettext_lazy as _

from portal import languages
from portal.models import Membership, Notification, Project
from portal.phrases import Text, bounded, render


class Event(models.TextChoices):
    """What a message is about, for people's subscriptions to chat channels
    (``portal.messaging``). The values are stable: receivers of the signed webhook and
    stored subscriptions name them."""

    APPROVAL_NEEDED = "approval.needed", _("Approval needed")
    REQUEST_DECIDED = "request.decided", _("Request decided")
    LEASE_STARTED = "lease.started", _("Lease started (with its SSH command)")
    LEASE_ENDING = "lease.ending", _("Lease ending soon")
    IDLE_WARNING = "lease.idle", _("Idle warning")
    PREEMPTED = "lease.preempted", _("Preempted or reclaimed")
    BOOKING_STARTING = "booking.starting", _("Booking starting")
    BUDGET_THRESHOLD = "budget.threshold", _("Budget threshold passed")
    STATEMENT_READY = "statement.ready", _("Statement ready")


@dataclass(frozen=True)
class Message:
    subject: Text
    body: Text = ""
    link: str = ""
    # What it is about and in which project: a message with both also goes to the
    # project's chat channels its recipients subscribe to for that event.
    event: str = ""
    project: int | None = None


# Who is told what: the recipients (users) and the message.
Batch = Sequence[tuple[Sequence[Any], Message]]


class Channel(Protocol):
    def send(self, batch: Batch) -> None:
        """Deliver each message to its recipients; never raises for one failure."""
        ...


class PortalChannel:
    """The notification list in the portal (written in the caller's transaction), kept as
    phrases and said in the reader's language when shown."""

    def send(self, batch: Batch) -> None:
        Notification.objects.bulk_create(
            (
                Notification(
                    user=user,
                    subject=bounded(message.subject, Notification.SUBJECT_LENGTH),
                    body=message.body,
                    link=message.link,
                )
                for recipients, message in batch
                for user in recipients
            ),
            batch_size=500,
        )


class EmailChannel:
    """One mail per message and language to the recipients with an address, in their
    language, once the transaction commits. The link is made absolute with
    PORTAL_BASE_URL."""

    def send(self, batch: Batch) -> None:
        everyone = {user.pk: user for recipients, _message in batch for user in recipients}
        spoken = languages.preferred(everyone.values())
        mails: list[tuple[str, str, str, list[str]]] = []
        for recipients, message in batch:
            by_language: dict[str, set[str]] = {}
            for user in recipients:
                if user.email:
                    by_language.setdefault(spoken[user.pk], set()).add(user.email)
            for language, addresses in sorted(by_language.items()):
                subject, text = written(message, language)
                mails.append((subject, text, settings.DEFAULT_FROM_EMAIL, sorted(addresses)))
        if mails:
            transaction.on_commit(lambda: send_mass_mail(mails, fail_silently=True))


def written(message: Message, language: str) -> tuple[str, str]:
    """A mail's subject and text in ``language``."""
    link = message.link
    if link.startswith("/"):
        link = f"{settings.PORTAL_BASE_URL.rstrip('/')}{link}"
    # A mail subject is one line.
    subject = " ".join(render(message.subject, language).split())
    text = f"{render(message.body, language)}\n\n{link}".strip()
    return subject[: Notification.SUBJECT_LENGTH], text


CHANNELS: dict[str, type] = {"portal": PortalChannel, "email": EmailChannel}


def notify(
    users: Iterable[Any],
    *,
    subject: Text,
    body: Text = "",
    link: str = "",
    event: str = "",
    project: Project | int | None = None,
) -> None:
    """Tell ``users`` (None entries are skipped) through every configured channel.
    ``subject`` and ``body`` are phrases (``portal.phrases``) or a person's own words;
    ``event`` (an ``Event``) and ``project`` let it reach the project's chat channels."""
    project_id = project.pk if isinstance(project, Project) else project
    message = Message(subject=subject, body=body, link=link, event=event, project=project_id)
    notify_many([(users, message)])


def notify_many(batch: Iterable[tuple[Iterable[Any], Message]]) -> None:
    """``notify`` for many messages at once: one insert, one batch of mail."""
    kept = [
        (recipients, message)
        for users, message in batch
        if (recipients := [user for user in users if user is not None])
    ]
    if not kept:
        return
    for name in settings.PORTAL_NOTIFICATION_CHANNELS:
        CHANNELS[name]().send(kept)


def managers_of(project: Project | int) -> list:
    project_id = project if isinstance(project, int) else project.pk
    return list(
        get_user_model().objects.filter(
            memberships__project_id=project_id,
            memberships__role=Membership.Role.MANAGER,
            is_active=True,
        )
    )


def admins() -> list:
    return list(get_user_model().objects.filter(is_staff=True, is_active=True))
