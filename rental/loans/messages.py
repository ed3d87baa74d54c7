"""What the lease services tell people, in one place (subjects, bodies, links)."""

from datetime import datetime

from django.urls import reverse
from django.utils.translation import gettext as _

from portal.notifications import admins, managers_of, notify
from rental.models import AvailabilityWatch, Pool, QuotaRequest, Reservation


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


def extension_asked(
    lease: Reservation, *, until: datetime, limit_hours: int | None, why: str = ""
) -> None:
    """``why``: the rule that needs the approval, when it is not the auto-approve hours."""
    notify(
        managers_of(lease.project_id),
        subject=_("Extension asked: %(lease)s") % {"lease": lease},
        body=_("Until %(end)s UTC. %(why)s") % {"end": until.strftime("%Y-%m-%d %H:%M"), "why": why}
        if why
        else _("Until %(end)s UTC, beyond the project's auto-approve limit of %(h)s h.")
        % {"end": until.strftime("%Y-%m-%d %H:%M"), "h": limit_hours},
        link=lease.get_absolute_url(),
    )


def extension_decided(lease: Reservation, *, approved: bool, comment: str) -> None:
    subject = _("Extended: %(lease)s") if approved else _("Extension refused: %(lease)s")
    notify(
        [lease.requester],
        subject=subject % {"lease": lease},
        body=comment,
        link=lease.get_absolute_url(),
    )


def _project_link(request: QuotaRequest) -> str:
    return reverse("rental:project", kwargs={"slug": request.project.slug})


def quota_change_asked(request: QuotaRequest, *, by_admin: bool) -> None:
    notify(
        admins() if by_admin else managers_of(request.project_id),
        subject=_("Quota change asked: %(project)s, %(model)s")
        % {"project": request.project, "model": request.gpu_model},
        body=request.reason,
        link=_project_link(request),
    )


def quota_change_decided(request: QuotaRequest, *, approved: bool) -> None:
    verdict = _("approved") if approved else _("rejected")
    notify(
        [request.requested_by],
        subject=_("Quota change %(verdict)s: %(model)s")
        % {"verdict": verdict, "model": request.gpu_model},
        body=request.decision_comment,
        link=_project_link(request),
    )


def pool_degraded(pool: Pool, *, guaranteed: int) -> None:
    if pool.capacity < guaranteed:
        body = _(
            "Capacity %(c)s is below the %(g)s GPUs guaranteed to projects. "
            "Guaranteed leases are still never preempted by other projects."
        ) % {"c": pool.capacity, "g": guaranteed}
    else:
        body = _("An admin marked it degraded: %(reason)s") % {"reason": pool.degraded_reason}
    notify(
        admins(),
        subject=_("Pool degraded: %(pool)s") % {"pool": pool},
        body=body,
        link=reverse("rental:pool", kwargs={"pk": pool.pk}),
    )


def room_appeared(watch: AvailabilityWatch, *, pool: Pool, free: int) -> None:
    notify(
        [watch.user],
        subject=_("%(n)s× %(model)s are free now") % {"n": watch.count, "model": pool},
        body=_("The pool has %(free)s GPUs free; ask before someone else does.") % {"free": free},
    )
