"""What people were told, as they read it: notifications are kept as phrases
(portal.phrases) and said in the reader's language, so tests read them the same way."""

from dataclasses import dataclass

from portal.models import Notification
from portal.phrases import render


@dataclass(frozen=True)
class Told:
    user_id: int
    subject: str
    body: str
    link: str


def told(user=None, *, starts: str = "", has: str = "", language: str = "en") -> list[Told]:
    """The notifications of ``user`` (everyone's when None), newest first, said in
    ``language``, whose subject starts with ``starts`` and contains ``has``."""
    rows = Notification.objects.all() if user is None else Notification.objects.filter(user=user)
    said = [
        Told(row.user_id, render(row.subject, language), render(row.body, language), row.link)
        for row in rows
    ]
    return [t for t in said if t.subject.startswith(starts) and has in t.subject]
