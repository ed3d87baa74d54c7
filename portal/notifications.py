"""Telling people things: the one call every part of the portal uses, ``notify``.

Each message goes through the site's channels (PORTAL_NOTIFICATION_CHANNELS): a
notification in the portal and the same by mail today; webhook channels (chat, paging)
are added later as more ``Channel`` classes behind the same call. Mail is sent after the
surrounding transaction commits, so a rolled-back change never tells anyone anything.
"""

from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from typing import Protocol

from django.conf import settings
from django.contrib.auth import get_user_model
from django.core.mail import send_mail
from django.db import transaction

from portal.models import Membership, Notification, Project


@dataclass(frozen=True)
class Message:
    subject: str
    body: str = ""
    link: str = ""


class Channel(Protocol):
    def send(self, recipients: Sequence, message: Message) -> None:
        """Deliver ``message`` to ``recipients`` (users); never raises for one failure."""
        ...


class PortalChannel:
    """The notification list in the portal (written in the caller's transaction)."""

    def send(self, recipients: Sequence, message: Message) -> None:
        Notification.objects.bulk_create(
            Notification(
                user=user, subject=message.subject[:200], body=message.body, link=message.link
            )
            for user in recipients
        )


class EmailChannel:
    """One mail to every recipient with an address, once the transaction commits. The
    link is made absolute with PORTAL_BASE_URL."""

    def send(self, recipients: Sequence, message: Message) -> None:
        addresses = sorted({user.email for user in recipients if user.email})
        if not addresses:
            return
        link = message.link
        if link.startswith("/"):
            link = f"{settings.PORTAL_BASE_URL.rstrip('/')}{link}"
        text = f"{message.body}\n\n{link}".strip()
        transaction.on_commit(
            lambda: send_mail(
                message.subject,
                text,
                settings.DEFAULT_FROM_EMAIL,
                addresses,
                fail_silently=True,
            )
        )


CHANNELS: dict[str, type] = {"portal": PortalChannel, "email": EmailChannel}


def notify(users: Iterable, *, subject: str, body: str = "", link: str = "") -> None:
    """Tell ``users`` (None entries are skipped) through every configured channel."""
    recipients = [user for user in users if user is not None]
    if not recipients:
        return
    message = Message(subject=subject, body=body, link=link)
    for name in settings.PORTAL_NOTIFICATION_CHANNELS:
        CHANNELS[name]().send(recipients, message)


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
