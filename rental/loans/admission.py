"""Admission services: submit a lease, preview it, approve or reject it (R1, Q2, Q4).

Each writer validates its input first (no lock), then locks the pool row, reads
the standing with one aggregate query, decides with the pure rules of
``admission_rules.py``, writes, audits and enqueues on commit.
"""

from datetime import datetime
from decimal import Decimal

from django.db import transaction
from django.utils import timezone
from django.utils.translation import gettext as _
from django.utils.translation import gettext_noop

from portal import access, approvals, audit
from portal.errors import (
    InvalidInput,
    InvalidTransition,
    NotPermitted,
    QuotaExceeded,
)
from portal.models import Project
from portal.phrases import Phrase
from portal.text import COMMENT_LENGTH, plain_text
from rental import jobs, selectors
from rental.loans import ceiling, messages, pending_limit, reclaim, reservations
from rental.loans.admission_checks import (
    Asked,
    first_refusal,
    hold,
    is_held,
    possible_tiers,
    raise_refusal,
    refusals_by_tier,
)
from rental.loans.admission_rules import Decision, Standing, decide, needs_approval
from rental.loans.placement import (
    DECISION_FIELDS,
    apply_decision,
    new_instances,
    set_decision,
)
from rental.loans.request_reads import read_for_request
from rental.loans.standing import lock_and_read, lock_pool, read_standing
from rental.loans.validation import lease_seconds, validated
from rental.models import (
    GpuModel,
    Image,
    Instance,
    Offering,
    Pool,
    Quota,
    Reservation,
    Tier,
)

Status = Reservation.Status
PURPOSE_LENGTH = Reservation._meta.get_field("purpose").max_length


def over_limits(quota: Quota | None, *, gpu_count: int, hours: Decimal) -> bool:
    return bool(
        quota
        and needs_approval(
            gpu_count=gpu_count,
            hours=float(hours),
            max_gpus=quota.max_gpus_per_lease,
            max_hours=quota.max_hours_per_lease,
        )
    )


def auto_approve_exceeded() -> Decision:
    """Beyond the quota's auto-approve limits a manager decides, whatever the standing."""
    return Decision(
        status=Status.PENDING_APPROVAL,
        tier=Tier.BURST,
        code="over_auto_approve",
        message=Phrase(
            gettext_noop("Beyond the project's auto-approve limits; a manager must approve.")
        ),
    )


def decide_admission(
    standing: Standing,
    quota: Quota | None,
    *,
    gpu_count: int,
    hours: Decimal,
    priority: str,
    market: str,
) -> Decision:
    """What happens to a valid request: the auto-approve limits, then Q2 and Q4. Pure."""
    if over_limits(quota, gpu_count=gpu_count, hours=hours):
        return auto_approve_exceeded()
    return decide(standing, gpu_count=gpu_count, priority=priority, market=market)


def admission(
    *,
    pool: Pool,
    project: Project | int,
    gpu_count: int,
    hours: Decimal,
    priority: str,
    market: str,
) -> Decision:
    """Read the standing and decide. Writers lock ``pool`` first; a preview passes it
    unlocked and may race."""
    project_id = project if isinstance(project, int) else project.pk
    quota = selectors.quota_for(project_id, pool.gpu_model_id)
    return decide_admission(
        read_standing(pool, project_id, priority=priority),
        quota,
        gpu_count=gpu_count,
        hours=hours,
        priority=priority,
        market=market,
    )


def preview_admission(
    *,
    project: Project,
    gpu_model: GpuModel,
    gpu_count: int,
    hours: Decimal,
    priority: str,
    market: str,
    start: datetime | None = None,
    now: datetime | None = None,
    pool: Pool | None = None,
    quota: Quota | None = None,
) -> Decision:
    """The request form's preview of ``submit_reservation``: read-only, no locks. A
    booking (``start`` ahead) is judged as one is: by the auto-approve limits and L over
    its window (R2 is ``reservations.preview_booking``). ``pool`` and ``quota``: the
    model's pool and the project's quota for it, when the caller has read them."""
    if pool is None:
        pool = Pool.objects.filter(gpu_model=gpu_model).first()
    if pool is None:
        raise InvalidInput(
            _("No pool is configured for this GPU model."), code="no_pool", field="gpu_model"
        )
    now = now or timezone.now()
    booking = start is not None and start > now
    begins = start if booking else now
    end = reservations.window_end(begins, lease_seconds(hours))
    return decide_request(
        pool,
        read_standing(
            pool, project.pk, priority=priority, window=bookings_window(booking, begins, end)
        ),
        quota if quota is not None else selectors.quota_for(project, gpu_model),
        project_id=project.pk,
        gpu_count=gpu_count,
        hours=hours,
        priority=priority,
        market=market,
        start=begins,
        end=end,
        booking=booking,
    )


def bookings_window(booking: bool, begins: datetime, end: datetime):
    """Where the standing counts the project's bookings for a lease asked for now: its
    window, up to a notice past it (it may take GPUs back and start late); none for a
    booking, which R2 checks over its own window."""
    return None if booking else (begins, ceiling.queued_window(end))


def decide_request(
    pool: Pool,
    standing: Standing,
    quota: Quota | None,
    *,
    project_id: int,
    gpu_count: int,
    hours: Decimal,
    priority: str,
    market: str,
    start: datetime,
    end: datetime,
    booking: bool,
) -> Decision:
    """What happens to a valid request, given its pool's standing. A booking: the
    auto-approve limits, then L over its window (R2 is checked when it is written); a
    lease now: the auto-approve limits, Q2 and Q4, then beside its project's bookings
    (R2, L over time), which are read only when some overlap its window."""
    if booking:
        if over_limits(quota, gpu_count=gpu_count, hours=hours):
            return auto_approve_exceeded()
        return ceiling.booking_decision(
            pool,
            project_id=project_id,
            ceiling=standing.ceiling,
            gpus=gpu_count,
            start=start,
            end=end,
        )
    decision = decide_admission(
        standing, quota, gpu_count=gpu_count, hours=hours, priority=priority, market=market
    )
    booked = standing.booked_in_window > 0
    decision = reservations.keep_bookings(
        pool,
        decision,
        standing,
        project_id=project_id,
        gpus=gpu_count,
        priority=priority,
        market=market,
        start=start,
        end=end,
        booked=booked,
    )
    return ceiling.keep_ceiling(
        pool,
        decision,
        project_id=project_id,
        ceiling=standing.ceiling,
        gpus=gpu_count,
        market=market,
        start=start,
        end=end,
        booked=booked,
    )


# --- Transitions -----------------------------------------------------------------------


@transaction.atomic
def submit_reservation(
    *,
    actor,
    project: Project,
    gpu_model: GpuModel,
    gpu_count: int,
    duration_hours: object,
    priority: str,
    market: str,
    offering: Offering | None = None,
    image: Image | None = None,
    purpose: str = "",
    requeue_on_preemption: bool = False,
    allow_other_instance_types: bool = True,
    start: datetime | None = None,
    now: datetime | None = None,
    source: str = "web",
) -> Reservation:
    """Ask for GPUs now, or from ``start`` on (a booking: R1, R2, then ``scheduled``).

    Now: The lease is admitted (Q2, Q4), takes capacity back (Q6, Q7),
    is queued, sent for approval or refused.

    Refusals raise InvalidInput (a field breaks R1), QuotaExceeded (Q2) or a DomainError
    from an admission check, and write nothing.
    """
    purpose = plain_text(purpose, field="purpose", max_length=PURPOSE_LENGTH, label=_("Purpose"))
    if not access.can_request_for(actor, project):
        raise NotPermitted(
            _("Only members of %(project)s can ask for its GPUs.") % {"project": project}
        )
    reads = read_for_request(actor=actor, project=project, gpu_model=gpu_model)
    pending_limit.check_pending_limit(actor, waiting=reads.waiting)
    now = now or timezone.now()
    # Everything that does not depend on the pool's standing happens before the lock:
    # R1, the offering and image, the auto-approve limits and the admission checks.
    valid = validated(
        project=project,
        gpu_model=gpu_model,
        gpu_count=gpu_count,
        offering=offering,
        duration_hours=duration_hours,
        priority=priority,
        market=market,
        image=image,
        reads=reads,
    )
    booking = start is not None and start != now
    begins = start if booking else now
    end = reservations.window_end(begins, lease_seconds(valid.hours))
    if booking:
        reservations.validate_window(start=begins, end=end, market=market, now=now)
    limited = over_limits(valid.quota, gpu_count=gpu_count, hours=valid.hours)
    asked = Asked(
        project=project,
        gpu_model=gpu_model,
        gpu_count=gpu_count,
        market=market,
        starts_at=begins,
        ends_at=end,
        is_reservation=booking,
        now=now,
    )
    refusals = refusals_by_tier(
        asked, possible_tiers(market=market, booking=booking, over_limits=limited)
    )
    reservation = Reservation(
        project=project,
        requester=actor,
        gpu_model=gpu_model,
        gpu_count=gpu_count,
        offering=valid.offering,
        instance_count=gpu_count // valid.offering.gpus_per_instance,
        market=market,
        priority=priority,
        image=valid.image,
        purpose=purpose,
        start=begins,
        end=end,
        submitted_at=now,
        requeue_on_preemption=requeue_on_preemption,
        allow_other_instance_types=allow_other_instance_types,
        is_reservation=booking,
        status=Status.PENDING_APPROVAL,
    )
    # Written first, decided under the lock: the lease (waiting for approval, a status no
    # standing counts) and, when it may run now, its instances are inserted before the
    # pool lock. Nobody else sees them before the commit, and a refusal rolls them back.
    reservation.save(force_insert=True)
    may_run_now = not booking and not limited
    instances = Instance.objects.bulk_create(new_instances(reservation)) if may_run_now else []
    pool, standing = lock_and_read(
        gpu_model, project.pk, priority=priority, window=bookings_window(booking, begins, end)
    )
    decision = decide_request(
        pool,
        standing,
        valid.quota,
        project_id=project.pk,
        gpu_count=gpu_count,
        hours=valid.hours,
        priority=priority,
        market=market,
        start=begins,
        end=end,
        booking=booking,
    )
    if decision.tier in refusals:
        raise_refusal(refusals[decision.tier])
    else:  # not foreseen before the lock: ask now
        raise_refusal(first_refusal(asked, decision.tier))
    if decision.status == Status.PROVISIONING and instances:
        # The common case: one UPDATE with the decision, the audit row, the commit.
        set_decision(reservation, decision, now=now)
        Reservation.objects.filter(pk=reservation.pk).update(
            **{field: getattr(reservation, field) for field in DECISION_FIELDS}
        )
        audit.record(**submitted_event(actor, reservation, source, now))
        jobs.provision_on_commit(instance.pk for instance in instances)
        return reservation
    if instances:  # it does not start now: the instances written for it go
        Instance.objects.filter(reservation=reservation).delete()
    if decision.status == Status.SCHEDULED:
        reservations.schedule(pool=pool, reservation=reservation, now=now)
    else:
        apply_decision(reservation, decision, now=now)
    if (
        reservation.status == Status.QUEUED
        and not reclaim.reclaim_for(pool=pool, lease=reservation, standing=standing, now=now)
        and decision.code == "needs_own_reclaim"
    ):
        raise QuotaExceeded(
            _(
                "Production leases run only within the project's guarantee, and its own leases "
                "cannot give %(n)s GPUs back."
            )
            % {"n": gpu_count},
            code="production_over_guarantee",
            field="priority",
            figures={
                "asked": gpu_count,
                "guaranteed": standing.guaranteed,
                "guaranteed_free": standing.guaranteed_eligible_for,
                "own_displaceable": standing.displaceable,
            },
        )
    audit.record(**submitted_event(actor, reservation, source, now))
    if reservation.status == Status.PENDING_APPROVAL:
        messages.approval_needed(reservation)
    return reservation


def submitted_event(actor, reservation: Reservation, source: str, now: datetime) -> dict:
    return {
        "actor": actor,
        "verb": "lease.submitted",
        "obj": reservation,
        "project": reservation.project_id,
        "source": source,
        "at": now,
        "after": {
            "status": reservation.status,
            "tier": reservation.tier,
            "gpus": reservation.gpu_count,
            "code": reservation.status_code,
        },
    }


def _decidable(actor, reservation: Reservation) -> Reservation:
    if not access.can_manage(actor, reservation.project):
        raise NotPermitted(
            _("Only a manager of %(project)s decides its requests.")
            % {"project": reservation.project}
        )
    locked = Reservation.objects.select_for_update().get(pk=reservation.pk)
    if locked.status != Status.PENDING_APPROVAL:
        raise InvalidTransition(
            _("This request is %(status)s; only a waiting request can be decided.")
            % {"status": locked.get_status_display().lower()}
        )
    return locked


@transaction.atomic
def approve_reservation(
    *,
    actor,
    reservation: Reservation,
    comment: str = "",
    now: datetime | None = None,
    source: str = "web",
) -> Reservation:
    """A manager lets a request beyond the ceiling or limits run; it is then admitted (Q4)."""
    now = now or timezone.now()
    pool = lock_pool(reservation.gpu_model_id)
    reservation = _decidable(actor, reservation)
    self_approved = approvals.self_approval(
        actor, requester_id=reservation.requester_id, project=reservation.project_id
    )
    reservation.approved_by = actor
    reservation.approved_at = now
    reservation.decision_comment = plain_text(
        comment, field="comment", max_length=COMMENT_LENGTH, label=_("Comment")
    )
    standing = read_standing(pool, reservation.project_id, priority=reservation.priority)
    if reservation.is_reservation and reservation.start > now:
        reservations.schedule(pool=pool, reservation=reservation, now=now)
    else:
        if reservation.is_reservation:
            reservations.validate_window(
                start=reservation.start, end=reservation.end, market=reservation.market, now=now
            )
        decision = decide(
            standing,
            gpu_count=reservation.gpu_count,
            priority=reservation.priority,
            market=reservation.market,
            approved=True,
        )
        decision = reservations.keep_bookings(
            pool,
            decision,
            standing,
            project_id=reservation.project_id,
            gpus=reservation.gpu_count,
            priority=reservation.priority,
            market=reservation.market,
            start=now,
            end=now + (reservation.end - reservation.start),
            approved=True,
        )
        apply_decision(reservation, hold(reservation, decision, now=now) or decision, now=now)
    if reservation.status == Status.QUEUED and not is_held(reservation.status_code):
        reclaim.reclaim_for(pool=pool, lease=reservation, standing=standing, now=now)
    audit.record(
        actor=actor,
        verb="lease.approved",
        obj=reservation,
        project=reservation.project_id,
        source=source,
        at=now,
        after={
            "status": reservation.status,
            "tier": reservation.tier,
            "comment": reservation.decision_comment,
            **({"self_approved": True} if self_approved else {}),
        },
    )
    messages.decided(reservation, approved=True)
    return reservation


@transaction.atomic
def reject_reservation(
    *,
    actor,
    reservation: Reservation,
    comment: str,
    now: datetime | None = None,
    source: str = "web",
) -> Reservation:
    now = now or timezone.now()
    comment = plain_text(comment, field="comment", max_length=COMMENT_LENGTH, label=_("Comment"))
    if not comment:
        raise InvalidInput(_("Say why the request is rejected."), field="comment")
    reservation = _decidable(actor, reservation)
    reservation.status = Status.REJECTED
    reservation.status_code = "rejected"
    reservation.status_message = comment[:300]
    reservation.decision_comment = comment
    reservation.ended_at = now
    reservation.save()
    audit.record(
        actor=actor,
        verb="lease.rejected",
        obj=reservation,
        project=reservation.project_id,
        source=source,
        at=now,
        after={"comment": reservation.decision_comment},
    )
    messages.decided(reservation, approved=False)
    return reservation
