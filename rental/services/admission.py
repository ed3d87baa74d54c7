"""Admission services: submit a lease, preview it, approve or reject it (R1, Q2, Q4).

Each writer validates its input first (no lock), then locks the pool row, reads
the standing with one aggregate query, decides with the pure rules of
``admission_rules.py``, writes, audits and enqueues on commit.
"""

from collections.abc import Callable
from datetime import datetime
from decimal import Decimal, InvalidOperation
from functools import cache

from django.conf import settings
from django.db import transaction
from django.utils import timezone
from django.utils.module_loading import import_string
from django.utils.translation import gettext as _

from portal import access, approvals, audit
from portal.errors import (
    DomainError,
    InvalidInput,
    InvalidTransition,
    NotPermitted,
    QuotaExceeded,
)
from portal.models import Project
from rental import selectors
from rental.models import (
    GpuModel,
    Image,
    Market,
    Offering,
    Pool,
    Priority,
    Quota,
    Reservation,
    Tier,
)
from rental.services import notices, pending_limit, reclaim, reservations
from rental.services.admission_rules import Decision, Standing, decide, needs_approval
from rental.services.placement import apply_decision
from rental.services.pool import lock_pool, read_standing

Status = Reservation.Status


def parse_hours(value: object) -> Decimal:
    try:
        hours = Decimal(str(value))
    except (InvalidOperation, ValueError):
        raise InvalidInput(_("Enter the duration in hours."), field="duration_hours") from None
    if not hours.is_finite() or hours <= 0:
        raise InvalidInput(_("The duration must be more than zero hours."), field="duration_hours")
    if hours > settings.PORTAL_MAX_LEASE_HOURS:
        raise InvalidInput(
            _("A lease may last at most %(max)s hours.") % {"max": settings.PORTAL_MAX_LEASE_HOURS},
            code="over_max_lease",
            field="duration_hours",
        )
    if lease_seconds(hours) < 1:
        # Time has one-second resolution: a shorter lease would end before it starts.
        raise InvalidInput(
            _("A lease lasts at least one second (%(h)s hours is less).") % {"h": hours},
            code="too_short",
            field="duration_hours",
        )
    return hours


def lease_seconds(hours: Decimal) -> int:
    return int(hours * 3600)


def choose_offering(
    *, gpu_model: GpuModel, gpu_count: int, market: str, offering: Offering | None
) -> Offering:
    fitting = selectors.fitting_offerings(gpu_model=gpu_model, gpu_count=gpu_count, market=market)
    if offering is None:
        if not fitting:
            raise InvalidInput(
                _("No offering carries %(n)s× %(model)s on the %(market)s market.")
                % {"n": gpu_count, "model": gpu_model, "market": Market(market).label},
                code="no_offering",
                field="gpu_count",
            )
        return fitting[0]
    if offering not in fitting:
        raise InvalidInput(
            _("%(offering)s cannot carry %(n)s× %(model)s on the %(market)s market.")
            % {
                "offering": offering,
                "n": gpu_count,
                "model": gpu_model,
                "market": Market(market).label,
            },
            field="offering",
        )
    return offering


def validate_request(
    *,
    project: Project,
    gpu_model: GpuModel,
    gpu_count: int,
    offering: Offering | None,
    duration_hours: object,
    priority: str,
    market: str,
    image: Image | None,
) -> tuple[Offering, Image, Decimal]:
    """Check a request's fields (R1); returns the offering, image and hours to use."""
    if priority not in Priority.values:
        raise InvalidInput(_("Choose a priority."), field="priority")
    if market not in Market.values:
        raise InvalidInput(_("Choose on-demand or spot."), field="market")
    if not isinstance(gpu_count, int) or isinstance(gpu_count, bool) or gpu_count < 1:
        raise InvalidInput(_("Ask for at least one GPU."), field="gpu_count")
    hours = parse_hours(duration_hours)
    quota = selectors.quota_for(project, gpu_model)
    ceiling = quota.ceiling if quota else 0
    if ceiling == 0:
        raise InvalidInput(
            _("%(project)s has no quota for %(model)s.") % {"project": project, "model": gpu_model},
            code="no_quota",
            field="gpu_model",
        )
    if gpu_count > ceiling:
        raise InvalidInput(
            _("At most %(ceiling)s GPUs: the project's ceiling for %(model)s.")
            % {"ceiling": ceiling, "model": gpu_model},
            code="over_ceiling",
            field="gpu_count",
            figures={"asked": gpu_count, "ceiling": ceiling},
        )
    chosen = choose_offering(
        gpu_model=gpu_model, gpu_count=gpu_count, market=market, offering=offering
    )
    images = selectors.images_for(project=project, offering=chosen)
    if image is None:
        image = images.first()
        if image is None:
            raise InvalidInput(
                _("No image is available for %(offering)s.") % {"offering": chosen}, field="image"
            )
    elif not images.filter(pk=image.pk).exists():
        raise InvalidInput(
            _("This image cannot be used with %(offering)s.") % {"offering": chosen}, field="image"
        )
    return chosen, image, hours


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
    if quota and needs_approval(
        gpu_count=gpu_count,
        hours=float(hours),
        max_gpus=quota.max_gpus_per_lease,
        max_hours=quota.max_hours_per_lease,
    ):
        return Decision(
            status=Status.PENDING_APPROVAL,
            tier=Tier.BURST,
            code="over_auto_approve",
            message=_("Beyond the project's auto-approve limits; a manager must approve."),
        )
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
        read_standing(pool, project_id, quota, priority=priority),
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
) -> Decision:
    """The request form's preview of ``submit_reservation``: read-only, no locks."""
    pool = Pool.objects.filter(gpu_model=gpu_model).first()
    if pool is None:
        raise InvalidInput(
            _("No pool is configured for this GPU model."), code="no_pool", field="gpu_model"
        )
    return admission(
        pool=pool,
        project=project,
        gpu_count=gpu_count,
        hours=hours,
        priority=priority,
        market=market,
    )


# --- Admission checks (a hook for billing's budget cap, BU3) ---------------------------


@cache
def _load_checks(paths: tuple[str, ...]) -> tuple[Callable[..., object], ...]:
    return tuple(import_string(path) for path in paths)


def admission_checks() -> tuple[Callable[..., object], ...]:
    """The callables named in ``PORTAL_ADMISSION_CHECKS`` (dotted paths)."""
    return _load_checks(tuple(getattr(settings, "PORTAL_ADMISSION_CHECKS", ())))


def run_admission_checks(
    *,
    project: Project,
    gpu_model: GpuModel,
    gpu_count: int,
    tier: str,
    market: str,
    starts_at: datetime,
    ends_at: datetime,
    is_reservation: bool,
    now: datetime,
) -> None:
    """Ask every configured check; the first refusal ``(code, message)`` or
    ``(code, message, figures)`` is raised as a DomainError (409) carrying them. Rental
    never imports billing: the checks are named in settings."""
    for check in admission_checks():
        refusal = check(
            project=project,
            gpu_model=gpu_model,
            gpu_count=gpu_count,
            tier=str(tier),
            market=str(market),
            starts_at=starts_at,
            ends_at=ends_at,
            is_reservation=is_reservation,
            now=now,
        )
        if refusal is not None:
            code, message, *figures = refusal
            raise DomainError(message, code=code, figures=figures[0] if figures else None)


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
    if not access.can_request_for(actor, project):
        raise NotPermitted(
            _("Only members of %(project)s can ask for its GPUs.") % {"project": project}
        )
    pending_limit.check_pending_limit(actor)
    now = now or timezone.now()
    chosen, image, hours = validate_request(
        project=project,
        gpu_model=gpu_model,
        gpu_count=gpu_count,
        offering=offering,
        duration_hours=duration_hours,
        priority=priority,
        market=market,
        image=image,
    )
    quota = selectors.quota_for(project, gpu_model)
    booking = start is not None and start != now
    begins = start if booking else now
    end = reservations.window_end(begins, lease_seconds(hours))
    if booking:
        reservations.validate_window(start=begins, end=end, market=market, now=now)
    pool = lock_pool(gpu_model)
    standing = read_standing(pool, project.pk, quota, priority=priority)
    if booking:
        decision = decide_admission(
            standing, quota, gpu_count=gpu_count, hours=hours, priority=priority, market=market
        )
        if decision.status != Status.PENDING_APPROVAL:
            decision = Decision(status=Status.SCHEDULED, tier=Tier.RESERVED)
    else:
        decision = decide_admission(
            standing, quota, gpu_count=gpu_count, hours=hours, priority=priority, market=market
        )
    run_admission_checks(
        project=project,
        gpu_model=gpu_model,
        gpu_count=gpu_count,
        tier=decision.tier,
        market=market,
        starts_at=begins,
        ends_at=end,
        is_reservation=booking,
        now=now,
    )
    # Written once, with its decision (apply_decision saves it), to keep the lock short.
    reservation = Reservation(
        project=project,
        requester=actor,
        gpu_model=gpu_model,
        gpu_count=gpu_count,
        offering=chosen,
        instance_count=gpu_count // chosen.gpus_per_instance,
        market=market,
        priority=priority,
        image=image,
        purpose=purpose.strip()[:300],
        start=begins,
        end=end,
        submitted_at=now,
        requeue_on_preemption=requeue_on_preemption,
        allow_other_instance_types=allow_other_instance_types,
        is_reservation=booking,
        status=Status.PENDING_APPROVAL,
    )
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
    audit.record(
        actor=actor,
        verb="lease.submitted",
        obj=reservation,
        project=project,
        source=source,
        at=now,
        after={
            "status": reservation.status,
            "tier": reservation.tier,
            "gpus": gpu_count,
            "code": reservation.status_code,
        },
    )
    if reservation.status == Status.PENDING_APPROVAL:
        notices.approval_needed(reservation)
    return reservation


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
    reservation.decision_comment = comment.strip()
    quota = selectors.quota_for(reservation.project_id, reservation.gpu_model_id)
    standing = read_standing(pool, reservation.project_id, quota, priority=reservation.priority)
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
        apply_decision(reservation, decision, now=now)
    if reservation.status == Status.QUEUED:
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
    notices.decided(reservation, approved=True)
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
    if not comment.strip():
        raise InvalidInput(_("Say why the request is rejected."), field="comment")
    reservation = _decidable(actor, reservation)
    reservation.status = Status.REJECTED
    reservation.status_code = "rejected"
    reservation.status_message = comment.strip()[:300]
    reservation.decision_comment = comment.strip()
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
    notices.decided(reservation, approved=False)
    return reservation
