"""Extending a running or scheduled lease (point 5): the added window is admitted by the
same rules as a request — the maximum lease length, the auto-approve limits, R2 for a
booking — and goes to the project's manager when it needs approval."""

from datetime import datetime, timedelta

from django.conf import settings
from django.db import transaction
from django.utils import timezone
from django.utils.translation import gettext as _

from portal import access, approvals, audit
from portal.errors import Conflict, InvalidTransition, NotPermitted
from portal.text import COMMENT_LENGTH, plain_text
from rental import selectors
from rental.loans import messages
from rental.loans.ceiling import ceiling_conflict, over_ceiling_figures, over_ceiling_message
from rental.loans.extension_rules import judge_extension
from rental.loans.reservations import booked_between, check_beside_bookings, check_window
from rental.loans.standing import lock_pool
from rental.loans.validation import lease_seconds, parse_hours
from rental.models import Market, Pool, Reservation, Tier

Status = Reservation.Status
EXTENDABLE = (Status.SCHEDULED, Status.PROVISIONING, Status.ACTIVE)


@transaction.atomic
def extend_reservation(
    *,
    actor,
    reservation: Reservation,
    hours: object,
    now: datetime | None = None,
    source: str = "web",
) -> Reservation:
    """Extend by ``hours``. Within the limits the end moves at once; beyond the auto-approve
    hours the lease keeps running to its old end until a manager approves the new one."""
    if not access.can_act_on_lease(actor, reservation):
        raise NotPermitted(
            _(
                "Only the engineer who asked for this lease or a manager of the project "
                "can extend it."
            )
        )
    now = now or timezone.now()
    added = parse_hours(hours, field="hours")
    pool = lock_pool(reservation.gpu_model_id)
    lease = Reservation.objects.select_for_update().get(pk=reservation.pk)
    if lease.status not in EXTENDABLE or lease.notice_due_at is not None:
        raise InvalidTransition(
            _("Only a running or scheduled lease that is not being preempted can be extended."),
            code="not_extendable",
        )
    new_end = lease.end + timedelta(seconds=lease_seconds(added))
    quota = selectors.quota_for(lease.project_id, lease.gpu_model_id)
    verdict = judge_extension(
        length_hours=(lease.end - lease.start).total_seconds() / 3600,
        added_hours=float(added),
        max_lease_hours=settings.PORTAL_MAX_LEASE_HOURS,
        max_auto_hours=quota.max_hours_per_lease if quota else None,
    )
    if verdict.outcome == "too_long":
        raise Conflict(
            _("A lease may last at most %(max)s hours; this would make it %(total).1f.")
            % {"max": settings.PORTAL_MAX_LEASE_HOURS, "total": verdict.total_hours},
            code="over_max_lease",
            field="hours",
        )
    check_added_window(pool, lease, new_end)
    over = None
    if lease.approved_at is None and lease.market != Market.SPOT:
        over = ceiling_conflict(
            pool,
            project_id=lease.project_id,
            ceiling=quota.ceiling if quota else 0,
            gpus=lease.gpu_count,
            start=lease.end,
            end=new_end,
            exclude=lease.pk,
        )
    before = lease.end
    if verdict.outcome == "approval" or over is not None:
        lease.extension_until = new_end
        lease.save(update_fields=["extension_until", "updated_at"])
        messages.extension_asked(
            lease,
            until=new_end,
            limit_hours=quota.max_hours_per_lease if quota else None,
            why="" if over is None or verdict.outcome == "approval" else over_ceiling_message(over),
        )
    else:
        lease.end = new_end
        lease.extension_until = None
        lease.save(update_fields=["end", "extension_until", "updated_at"])
    audit.record(
        actor=actor,
        verb="lease.extension_asked" if lease.extension_until else "lease.extended",
        obj=lease,
        project=lease.project_id,
        source=source,
        at=now,
        before={"end": before.isoformat()},
        after={
            "end": new_end.isoformat(),
            "needs_approval": verdict.outcome == "approval" or over is not None,
            **({"over_ceiling": over_ceiling_figures(over)} if over is not None else {}),
        },
    )
    return lease


@transaction.atomic
def decide_extension(
    *,
    actor,
    reservation: Reservation,
    approve: bool,
    comment: str = "",
    now: datetime | None = None,
    source: str = "web",
) -> Reservation:
    if not access.can_manage(actor, reservation.project_id):
        raise NotPermitted(_("Only a manager of the project decides its extensions."))
    comment = plain_text(comment, field="comment", max_length=COMMENT_LENGTH, label=_("Comment"))
    now = now or timezone.now()
    pool = lock_pool(reservation.gpu_model_id)
    lease = Reservation.objects.select_for_update().get(pk=reservation.pk)
    if lease.extension_until is None or lease.status not in EXTENDABLE:
        raise InvalidTransition(_("No extension of this lease is waiting."))
    wanted = lease.extension_until
    self_approved = approve and approvals.self_approval(
        actor, requester_id=lease.requester_id, project=lease.project_id
    )
    if approve:
        check_added_window(pool, lease, wanted)
    before = lease.end
    if approve:
        lease.end = wanted
    lease.extension_until = None
    lease.save(update_fields=["end", "extension_until", "updated_at"])
    audit.record(
        actor=actor,
        verb="lease.extension_approved" if approve else "lease.extension_rejected",
        obj=lease,
        project=lease.project_id,
        source=source,
        at=now,
        before={"end": before.isoformat()},
        after={
            "end": lease.end.isoformat(),
            "comment": comment,
            **({"self_approved": True} if self_approved else {}),
        },
    )
    messages.extension_decided(lease, approved=approve, comment=comment)
    return lease


def check_added_window(pool: Pool, lease: Reservation, new_end: datetime) -> None:
    """R2 over the added window: a booking is checked without its own old window; a lease
    running in a tier nobody may take back must leave its project's bookings their room
    after its old end."""
    if lease.is_reservation:
        check_window(
            pool,
            project_id=lease.project_id,
            gpus=lease.gpu_count,
            start=lease.start,
            end=new_end,
            exclude=lease.pk,
            field="hours",
        )
    elif lease.tier in (Tier.GUARANTEED, Tier.RESERVED) and booked_between(
        lease.project_id, lease.gpu_model_id, lease.end, new_end
    ):
        check_beside_bookings(
            pool,
            project_id=lease.project_id,
            gpus=lease.gpu_count,
            start=lease.end,
            end=new_end,
            field="hours",
        )
