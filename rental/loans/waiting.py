"""Why a waiting lease waits: its place in its pool's queue and, in words, what would let
it start. The lease page and the API both read it here."""

from dataclasses import dataclass

from django.utils.translation import gettext as _

from rental.loans.admission_checks import is_held
from rental.loans.queue import CEILING_BOOKED, queue_positions
from rental.models import Reservation

Status = Reservation.Status


@dataclass(frozen=True)
class Wait:
    position: int | None = None  # 1-based place in the queue, only while queued
    queued: int = 0  # how many leases wait in that queue
    hint: str = ""


def lease_wait(lease: Reservation) -> Wait:
    """The queue place (one read of the pool's queue, only for a queued lease) and hint."""
    position, queued = None, 0
    if lease.status == Status.QUEUED:
        positions = queue_positions(lease.gpu_model_id)
        position, queued = positions.get(lease.pk), len(positions)
    return Wait(position=position, queued=queued, hint=wait_hint(lease))


def wait_hint(lease: Reservation) -> str:
    """What would let a waiting lease start, in words (no reason codes on pages)."""
    if lease.status == Status.QUEUED and lease.reclaim_due_at:
        return _("It starts at %(at)s UTC, when the leases it preempted have ended.") % {
            "at": lease.reclaim_due_at.strftime("%Y-%m-%d %H:%M:%S")
        }
    if lease.status == Status.QUEUED and is_held(lease.status_code):
        return _(
            "It keeps its place in the queue and starts by itself once the reason above no "
            "longer holds (for a budget: a new month, or a higher budget) and %(n)s GPUs "
            "are free."
        ) % {"n": lease.gpu_count}
    if lease.status == Status.QUEUED and lease.status_code == CEILING_BOOKED:
        return _(
            "It keeps its place in the queue and starts by itself once it fits under the "
            "project's ceiling beside its bookings (when one of its leases ends or a booking "
            "is over) and %(n)s GPUs are free."
        ) % {"n": lease.gpu_count}
    if lease.status == Status.QUEUED:
        return _(
            "It starts by itself as soon as %(n)s GPUs of the pool are free: when a lease "
            "ends or is preempted, or when the pool's capacity is raised."
        ) % {"n": lease.gpu_count}
    if lease.status == Status.PENDING_APPROVAL:
        return _("A manager of %(project)s must approve it.") % {"project": lease.project.name}
    # A booking (scheduled) needs no hint: its reason already says when it starts.
    return ""
