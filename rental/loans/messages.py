"""What the lease services tell people, in one place (subjects, bodies, links).

Subjects and bodies are phrases (``portal.phrases``): kept as they are, and said in the
language of whoever reads them.
"""

from datetime import datetime

from django.urls import reverse
from django.utils.translation import gettext_noop

from portal.notifications import Event, admins, managers_of, notify
from portal.phrases import Phrase, Text
from rental.models import AvailabilityWatch, Instance, Pool, QuotaRequest, Reservation, Tier

# A tier as a word in a sentence ("needs 2 GPUs in tier burst").
TIER_WORDS = {
    Tier.GUARANTEED: gettext_noop("guaranteed"),
    Tier.BURST: gettext_noop("burst"),
    Tier.RESERVED: gettext_noop("reserved"),
    Tier.SPOT: gettext_noop("spot"),
}


def lease_name(lease: Reservation) -> Phrase:
    """How a message names a lease: "#12 2× A100 80GB for Vision"."""
    return Phrase(
        gettext_noop("#%(id)s %(n)s× %(model)s for %(project)s"),
        id=lease.pk,
        n=lease.gpu_count,
        model=lease.gpu_model.name,
        project=lease.project.name,
    )


def instance_name(instance: Instance) -> Text:
    """How a message names an instance: its cloud id, or its number before it has one."""
    if instance.external_id:
        return instance.external_id
    return Phrase(gettext_noop("instance #%(id)s"), id=instance.pk)


def tier_word(tier: str) -> Text:
    """A tier as a word in a sentence; an unknown one as its code."""
    word = TIER_WORDS.get(tier)
    return Phrase(word) if word else tier


def approval_needed(lease: Reservation) -> None:
    notify(
        managers_of(lease.project_id),
        subject=Phrase(gettext_noop("Approval needed: %(lease)s"), lease=lease_name(lease)),
        body=lease.status_message,
        link=lease.get_absolute_url(),
        event=Event.APPROVAL_NEEDED,
        project=lease.project_id,
    )


def decided(lease: Reservation, *, approved: bool) -> None:
    subject = (
        gettext_noop("Approved: %(lease)s") if approved else gettext_noop("Rejected: %(lease)s")
    )
    notify(
        [lease.requester],
        subject=Phrase(subject, lease=lease_name(lease)),
        body=lease.decision_comment,
        link=lease.get_absolute_url(),
        event=Event.REQUEST_DECIDED,
        project=lease.project_id,
    )


def starting(lease: Reservation) -> None:
    notify(
        [lease.requester],
        subject=Phrase(gettext_noop("Starting: %(lease)s"), lease=lease_name(lease)),
        link=lease.get_absolute_url(),
        # A booking whose time came; a queued lease's start is told when it is ready.
        event=Event.BOOKING_STARTING if lease.is_reservation else "",
        project=lease.project_id,
    )


def preempted(victim: Reservation, *, needed_by: Reservation, due: datetime) -> None:
    """Q8: the victim is told at T with the reason and the lease that needs its GPUs."""
    notify(
        [victim.requester],
        subject=Phrase(
            gettext_noop("Preempted at %(due)s UTC: %(lease)s"), lease=lease_name(victim), due=due
        ),
        body=victim.status_message,
        link=victim.get_absolute_url(),
        event=Event.PREEMPTED,
        project=victim.project_id,
    )


def requeued(lease: Reservation) -> None:
    notify(
        [lease.requester],
        subject=Phrase(gettext_noop("Queued again: %(lease)s"), lease=lease_name(lease)),
        body=Phrase(
            gettext_noop(
                "Your preempted lease waits in the queue with its original submission time."
            )
        ),
        link=lease.get_absolute_url(),
    )


def promoted(lease: Reservation) -> None:
    notify(
        [lease.requester],
        subject=Phrase(gettext_noop("Now guaranteed: %(lease)s"), lease=lease_name(lease)),
        body=Phrase(
            gettext_noop(
                "The project's guarantee has room again; this lease can no longer be reclaimed."
            )
        ),
        link=lease.get_absolute_url(),
    )


def extension_asked(
    lease: Reservation, *, until: datetime, limit_hours: int | None, why: Text = ""
) -> None:
    """``why``: the rule that needs the approval, when it is not the auto-approve hours."""
    notify(
        managers_of(lease.project_id),
        subject=Phrase(gettext_noop("Extension asked: %(lease)s"), lease=lease_name(lease)),
        body=Phrase(gettext_noop("Until %(end)s UTC. %(why)s"), end=until, why=why)
        if why
        else Phrase(
            gettext_noop("Until %(end)s UTC, beyond the project's auto-approve limit of %(h)s h."),
            end=until,
            h=limit_hours if limit_hours is not None else "—",
        ),
        link=lease.get_absolute_url(),
        event=Event.APPROVAL_NEEDED,
        project=lease.project_id,
    )


def extension_decided(lease: Reservation, *, approved: bool, comment: str) -> None:
    subject = (
        gettext_noop("Extended: %(lease)s")
        if approved
        else gettext_noop("Extension refused: %(lease)s")
    )
    notify(
        [lease.requester],
        subject=Phrase(subject, lease=lease_name(lease)),
        body=comment,
        link=lease.get_absolute_url(),
        event=Event.REQUEST_DECIDED,
        project=lease.project_id,
    )


def _project_link(request: QuotaRequest) -> str:
    return reverse("rental:project", kwargs={"slug": request.project.slug})


def quota_change_asked(request: QuotaRequest, *, by_admin: bool) -> None:
    notify(
        admins() if by_admin else managers_of(request.project_id),
        subject=Phrase(
            gettext_noop("Quota change asked: %(project)s, %(model)s"),
            project=request.project.name,
            model=request.gpu_model.name,
        ),
        body=request.reason,
        link=_project_link(request),
        event=Event.APPROVAL_NEEDED,
        project=request.project_id,
    )


def quota_change_decided(request: QuotaRequest, *, approved: bool) -> None:
    subject = (
        gettext_noop("Quota change approved: %(model)s")
        if approved
        else gettext_noop("Quota change rejected: %(model)s")
    )
    notify(
        [request.requested_by],
        subject=Phrase(subject, model=request.gpu_model.name),
        body=request.decision_comment,
        link=_project_link(request),
        event=Event.REQUEST_DECIDED,
        project=request.project_id,
    )


def pool_degraded(pool: Pool, *, guaranteed: int, hosts_down: list[str] | None = None) -> None:
    if hosts_down:
        body = Phrase(
            gettext_noop("Own GPU servers not answering: %(hosts)s"), hosts=", ".join(hosts_down)
        )
    elif pool.capacity < guaranteed:
        body = Phrase(
            gettext_noop(
                "Capacity %(c)s is below the %(g)s GPUs guaranteed to projects. "
                "Guaranteed leases are still never preempted by other projects."
            ),
            c=pool.capacity,
            g=guaranteed,
        )
    else:
        body = Phrase(
            gettext_noop("An admin marked it degraded: %(reason)s"), reason=pool.degraded_reason
        )
    notify(
        admins(),
        subject=Phrase(gettext_noop("Pool degraded: %(model)s"), model=pool.gpu_model.name),
        body=body,
        link=reverse("rental:pool", kwargs={"pk": pool.pk}),
    )


def room_appeared(watch: AvailabilityWatch, *, pool: Pool, free: int) -> None:
    notify(
        [watch.user],
        subject=Phrase(
            gettext_noop("%(n)s× %(model)s are free now"), n=watch.count, model=pool.gpu_model.name
        ),
        body=Phrase(
            gettext_noop("The pool has %(free)s GPUs free; ask before someone else does."),
            free=free,
        ),
    )
