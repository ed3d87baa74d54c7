"""L5: warn before a lease ends, and end it at its exact second.

The lease check runs every PORTAL_LEASE_CHECK_INTERVAL seconds; a lease ending before the
next check gets a task at its end second, so its instances are terminated then (its
usage closes at the end second whatever the delay: end_expired_leases)."""

import math
from datetime import datetime, timedelta

from django.conf import settings
from django.db import transaction
from django.db.models import F, Q
from django.utils import timezone
from django.utils.translation import gettext_noop

from portal import audit
from portal.errors import InvalidTransition
from portal.notifications import Event, notify
from portal.phrases import Phrase, plural_noop
from rental.loans.ending import end_reservation
from rental.loans.messages import lease_name
from rental.models import Reservation, TerminationReason

Status = Reservation.Status
LIVE = (Status.PROVISIONING, Status.ACTIVE)


def warn_ending_leases(*, now: datetime | None = None) -> int:
    """Tell each requester once per end (an extended lease is told again) that the lease
    ends within PORTAL_END_WARNING_MINUTES, with a link to extend it. Returns how many."""
    now = now or timezone.now()
    window = timedelta(minutes=settings.PORTAL_END_WARNING_MINUTES)
    due = (
        Reservation.objects.filter(status__in=LIVE, end__gt=now, end__lte=now + window)
        .filter(Q(end_warned_for__isnull=True) | ~Q(end_warned_for=F("end")))
        .select_related("requester", "gpu_model", "project")
    )
    warned = 0
    for lease in due:
        with transaction.atomic():
            claimed = (
                Reservation.objects.filter(pk=lease.pk, end=lease.end)
                .filter(Q(end_warned_for__isnull=True) | ~Q(end_warned_for=F("end")))
                .update(end_warned_for=F("end"))
            )
            if not claimed:
                continue  # warned by another worker, or extended meanwhile
            minutes = max(1, math.ceil((lease.end - now).total_seconds() / 60))
            notify(
                [lease.requester],
                subject=Phrase(
                    gettext_noop("Ends in %(time)s: %(lease)s"),
                    time=Phrase(plural_noop("%(n)s minute", "%(n)s minutes"), n=minutes),
                    lease=lease_name(lease),
                ),
                body=Phrase(
                    gettext_noop(
                        "Lease #%(id)s ends at %(end)s UTC. Its instances are terminated then "
                        "and billing stops; save your work, or extend the lease."
                    ),
                    id=lease.pk,
                    end=lease.end,
                ),
                link=f"{lease.get_absolute_url()}#extend-form",
                event=Event.LEASE_ENDING,
                project=lease.project_id,
            )
            audit.record(
                actor=None,
                verb="lease.end_warned",
                obj=lease,
                project=lease.project_id,
                source="worker",
                at=now,
                after={"end": lease.end.isoformat()},
            )
        warned += 1
    return warned


def leases_ending_before(*, until: datetime, now: datetime) -> list[tuple[int, datetime]]:
    """Live leases whose end falls in (now, until]: those a check at ``until`` would end
    late, as (id, end)."""
    return list(
        Reservation.objects.filter(status__in=LIVE, end__gt=now, end__lte=until).values_list(
            "pk", "end"
        )
    )


def end_lease_at_its_end(*, reservation_id: int, now: datetime | None = None) -> bool:
    """End one lease whose end has come (a task scheduled at its end second). Does
    nothing before its end, or when it was ended or extended meanwhile."""
    now = now or timezone.now()
    lease = Reservation.objects.filter(pk=reservation_id, status__in=LIVE).first()
    if lease is None or lease.end > now:
        return False
    try:
        end_reservation(
            actor=None,
            reservation=lease,
            reason=TerminationReason.LEASE_END,
            now=min(lease.end, now),
            source="worker",
        )
    except InvalidTransition:
        return False
    return True
