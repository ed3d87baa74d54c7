"""What the lease services tell people, in one place (subjects, bodies, links)."""

from datetime import datetime

from django.utils.translation import gettext as _

from portal.notifications import managers_of, notify
from rental.models import Reservation


def approval_needed(lease: Reservation) -> None:
    notify(
        managers_of(lease.project_id),
        subject=_("Approval needed: %(lease)s") % {"lease": lease},
        body=lease.status_message,
        link=lease.get_absolute_url(),
    )


def decided(lease: Reservation, *, approved: bool) -> None:
    subject = _("Approved: %(lease)s") if approved else _("Rejected: %(lease)s")
    notify(
        [lease.requester],
        subject=subject % {"lease": lease},
        body=lease.decision_comment,
        link=lease.get_absolute_url(),
    )


def starting(lease: Reservation) -> None:
    notify(
        [lease.requester],
        subject=_("Starting: %(lease)s") % {"lease": lease},
        link=lease.get_absolute_url(),
    )


def preempted(victim: Reservation, *, needed_by: Reservation, due: datetime) -> None:
    """Q8: the victim is told at T with the reason and the lease that needs its GPUs."""
    notify(
        [victim.requester],
        subject=_("Preempted at %(due)s UTC: %(lease)s")
        % {"lease": victim, "due": due.strftime("%Y-%m-%d %H:%M:%S")},
        body=victim.status_message,
        link=victim.get_absolute_url(),
    )


def requeued(lease: Reservation) -> None:
    notify(
        [lease.requester],
        subject=_("Queued again: %(lease)s") % {"lease": lease},
        body=_("Your preempted lease waits in the queue with its original submission time."),
        link=lease.get_absolute_url(),
    )


def promoted(lease: Reservation) -> None:
    notify(
        [lease.requester],
        subject=_("Now guaranteed: %(lease)s") % {"lease": lease},
        body=_("The project's guarantee has room again; this lease can no longer be reclaimed."),
        link=lease.get_absolute_url(),
    )
