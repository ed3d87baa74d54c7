"""Telling people things: a notification in the portal, and the same by mail.

Mail is sent after the surrounding transaction commits, so a rolled-back
change never tells anyone anything.
"""

from collections.abc import Iterable

from django.conf import settings
from django.contrib.auth import get_user_model
from django.core.mail import send_mail
from django.db import transaction

from portal.models import Membership, Notification, Project


def notify(users: Iterable, *, subject: str, body: str = "", link: str = "") -> None:
    recipients = [user for user in users if user is not None]
    Notification.objects.bulk_create(
        Notification(user=user, subject=subject[:200], body=body, link=link) for user in recipients
    )
    addresses = sorted({user.email for user in recipients if user.email})
    if addresses:
        transaction.on_commit(
            lambda: send_mail(
                subject,
                f"{body}\n\n{link}".strip(),
                settings.DEFAULT_FROM_EMAIL,
                addresses,
                fail_silently=True,
            )
        )


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
