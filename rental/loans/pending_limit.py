"""How many requests one person may have waiting (pending approval or queued) at once.

Each waiting request notifies the project's managers; without a limit a script (or a fuzz
pass) could file hundreds. ``PORTAL_MAX_PENDING_PER_USER`` (site policy, 10 by default)."""

from django.conf import settings
from django.utils.translation import gettext as _

from portal.errors import QuotaExceeded
from rental.models import Reservation

WAITING = (Reservation.Status.PENDING_APPROVAL, Reservation.Status.QUEUED)


def waiting_count(actor) -> int:
    return Reservation.objects.filter(requester=actor, status__in=WAITING).count()


def check_pending_limit(actor, *, waiting: int | None = None) -> None:
    """Refuse a new request while ``actor`` already has the limit's number waiting
    (``waiting``: that number, when the caller has read it already)."""
    limit = settings.PORTAL_MAX_PENDING_PER_USER
    if waiting is None:
        waiting = waiting_count(actor)
    if waiting >= limit:
        raise QuotaExceeded(
            _(
                "You already have %(n)s requests waiting for approval or capacity, the most "
                "one person may have (%(limit)s). Cancel one or wait until one starts."
            )
            % {"n": waiting, "limit": limit},
            code="too_many_pending",
            figures={"pending": waiting, "limit": limit},
        )
