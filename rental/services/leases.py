"""Lease transitions: submit, approve, reject, end, and admitting the queue.

Each function is one transaction that locks the pool row before it reads
usage, writes an audit event, and enqueues cloud work on commit.
"""

from datetime import datetime, timedelta
from decimal import Decimal, InvalidOperation

from django.conf import settings
from django.db import transaction
from django.utils import timezone
from django.utils.translation import gettext as _

from portal import access, audit
from portal.errors import InvalidInput, InvalidTransition, NotPermitted, QuotaExceeded
from portal.models import Project
from portal.notifications import managers_of, notify
from rental import selectors
from rental.models import (
    GpuModel,
    Image,
    Instance,
    Market,
    Offering,
    Pool,
    Priority,
    Quota,
    Reservation,
    TerminationReason,
    Tier,
)
from rental.services.admission import Decision, Standing, decide, needs_approval

Status = Reservation.Status


def _lock_pool(gpu_model: GpuModel | int) -> Pool:
    """Serialize admissions per GPU model: every admission locks its pool first."""
    try:
        return Pool.objects.select_for_update().get(gpu_model=gpu_model)
    except Pool.DoesNotExist:
        raise InvalidInput(
            _("No pool is configured for this GPU model."), code="no_pool", field="gpu_model"
        ) from None


def _standing(pool: Pool, project: Project | int) -> Standing:
    quota = selectors.quota_for(project, pool.gpu_model_id)
    used_guaranteed, used = selectors.project_running_gpus(project, pool.gpu_model_id)
    return Standing(
        guaranteed=quota.guaranteed if quota else 0,
        ceiling=quota.ceiling if quota else 0,
        used_guaranteed=used_guaranteed,
        used=used,
        capacity=pool.capacity,
        running=selectors.pool_running_gpus(pool.gpu_model_id),
    )


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
    return hours


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
    if not isinstance(gpu_count, int) or gpu_count < 1:
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


def admission(
    *,
    pool: Pool,
    project: Project | int,
    gpu_count: int,
    hours: Decimal,
    priority: str,
    market: str,
) -> Decision:
    """What happens to a valid request: the auto-approve limits, then Q2 and Q4.

    Writers lock ``pool`` first; a preview passes it unlocked and may race."""
    quota = selectors.quota_for(project, pool.gpu_model_id)
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
    return decide(_standing(pool, project), gpu_count=gpu_count, priority=priority, market=market)


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
    now: datetime | None = None,
    source: str = "web",
) -> Reservation:
    """Ask for GPUs now. The lease is admitted (Q2, Q4), queued, sent for approval or refused.

    Refusals raise InvalidInput (a field breaks R1) or QuotaExceeded (Q2) and write nothing.
    """
    if not access.can_request_for(actor, project):
        raise NotPermitted(
            _("Only members of %(project)s can ask for its GPUs.") % {"project": project}
        )
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
    decision = admission(
        pool=_lock_pool(gpu_model),
        project=project,
        gpu_count=gpu_count,
        hours=hours,
        priority=priority,
        market=market,
    )
    reservation = Reservation.objects.create(
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
        start=now,
        end=now + timedelta(seconds=int(hours * 3600)),
        submitted_at=now,
        requeue_on_preemption=requeue_on_preemption,
        allow_other_instance_types=allow_other_instance_types,
        status=Status.PENDING_APPROVAL,
    )
    _apply(reservation, decision, now=now)
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
        notify(
            managers_of(project),
            subject=_("Approval needed: %(lease)s") % {"lease": reservation},
            body=reservation.status_message,
            link=reservation.get_absolute_url(),
        )
    return reservation


def _apply(reservation: Reservation, decision: Decision, *, now: datetime) -> None:
    """Write an admission decision; an admitted lease gets its instances and launches."""
    reservation.status = decision.status
    reservation.tier = decision.tier
    reservation.status_code = decision.code
    reservation.status_message = decision.message
    if decision.status == Status.PROVISIONING:
        # The lease's clock starts when it is admitted, not when it was asked for.
        length = reservation.end - reservation.start
        reservation.start, reservation.end = now, now + length
        reservation.save()
        _create_instances(reservation)
    else:
        reservation.save()


def _create_instances(reservation: Reservation) -> None:
    from rental import tasks

    offering = reservation.offering
    rate = selectors.rate_for(offering, reservation.market)
    instances = [
        Instance.objects.create(
            reservation=reservation,
            account=offering.account,
            offering=offering,
            region=offering.region,
            market=reservation.market,
            gpu_count=offering.gpus_per_instance,
            rate_per_hour=rate * offering.gpus_per_instance,
            ssh_user=reservation.image.ssh_user if reservation.image else "",
        )
        for _index in range(reservation.instance_count)
    ]
    ids = [instance.pk for instance in instances]
    transaction.on_commit(lambda: [tasks.provision_instance_task.delay(pk) for pk in ids])


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
    pool = _lock_pool(reservation.gpu_model_id)
    reservation = _decidable(actor, reservation)
    decision = decide(
        _standing(pool, reservation.project_id),
        gpu_count=reservation.gpu_count,
        priority=reservation.priority,
        market=reservation.market,
        approved=True,
    )
    reservation.approved_by = actor
    reservation.approved_at = now
    reservation.decision_comment = comment.strip()
    _apply(reservation, decision, now=now)
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
        },
    )
    notify(
        [reservation.requester],
        subject=_("Approved: %(lease)s") % {"lease": reservation},
        body=reservation.decision_comment,
        link=reservation.get_absolute_url(),
    )
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
    notify(
        [reservation.requester],
        subject=_("Rejected: %(lease)s") % {"lease": reservation},
        body=reservation.decision_comment,
        link=reservation.get_absolute_url(),
    )
    return reservation


@transaction.atomic
def end_reservation(
    *,
    actor,
    reservation: Reservation,
    reason: str = TerminationReason.USER,
    now: datetime | None = None,
    source: str = "web",
) -> Reservation:
    """End a lease: a waiting one is cancelled; a running one's usage closes at ``now`` and
    its instances are terminated by the worker. Ending twice is refused, never billed twice."""
    from rental.services import instances as instance_services

    if actor is not None and not (
        access.can_request_for(actor, reservation.project)
        or access.can_manage(actor, reservation.project)
    ):
        raise NotPermitted(
            _("Only members of %(project)s can end its leases.") % {"project": reservation.project}
        )
    now = now or timezone.now()
    reservation = Reservation.objects.select_for_update().get(pk=reservation.pk)
    before = reservation.status
    if reservation.status in (Status.PENDING_APPROVAL, Status.QUEUED, Status.SCHEDULED):
        reservation.status = Status.CANCELLED
        reservation.ended_at = now
        reservation.end_reason = reason
        reservation.save()
    elif reservation.status in (Status.PROVISIONING, Status.ACTIVE):
        reservation.status = Status.ENDING
        reservation.end_reason = reason
        reservation.ended_at = now
        reservation.save()
        for instance in reservation.instances.select_for_update():
            instance_services.stop_billing_and_terminate(instance, reason=reason, at=now)
        instance_services.finish_if_all_terminated(reservation.pk)
    else:
        raise InvalidTransition(
            _("This lease is %(status)s and cannot be ended.")
            % {"status": reservation.get_status_display().lower()}
        )
    audit.record(
        actor=actor,
        verb="lease.ended",
        obj=reservation,
        project=reservation.project_id,
        source=source if actor else "worker",
        at=now,
        before={"status": before},
        after={"status": reservation.status, "reason": reason},
    )
    gpu_model_id = reservation.gpu_model_id
    transaction.on_commit(lambda: _enqueue_admission(gpu_model_id))
    return reservation


def _enqueue_admission(gpu_model_id: int) -> None:
    from rental import tasks

    tasks.admit_queued_task.delay(gpu_model_id)


def end_expired_leases(*, now: datetime | None = None) -> int:
    """End every running lease whose time is up; usage closes at the lease's end, not now."""
    now = now or timezone.now()
    due = Reservation.objects.filter(
        status__in=(Status.PROVISIONING, Status.ACTIVE), end__lte=now
    ).values_list("pk", flat=True)
    ended = 0
    for pk in list(due):
        reservation = Reservation.objects.get(pk=pk)
        try:
            end_reservation(
                actor=None,
                reservation=reservation,
                reason=TerminationReason.LEASE_END,
                now=min(reservation.end, now),
                source="worker",
            )
        except InvalidTransition:
            continue  # ended meanwhile by someone else
        ended += 1
    return ended


def queue_order(
    queued: list[Reservation], standings: dict[int, Standing], weights: dict[int, Decimal]
) -> list[Reservation]:
    """Q5: guaranteed-eligible first, then priority, then lowest (U − G)⁺ / w, then oldest."""
    rank = {Priority.PRODUCTION: 0, Priority.EXPERIMENT: 1, Priority.LEARNING: 2}

    def key(lease: Reservation) -> tuple:
        standing = standings[lease.project_id]
        eligible = (
            lease.market != Market.SPOT
            and standing.used_guaranteed + lease.gpu_count <= standing.guaranteed
        )
        over = max(standing.used - standing.guaranteed, 0) / weights.get(
            lease.project_id, Decimal(1)
        )
        return (not eligible, rank[lease.priority], over, lease.submitted_at, lease.pk)

    return sorted(queued, key=key)


@transaction.atomic
def admit_queued(*, gpu_model: GpuModel | int, now: datetime | None = None) -> list[Reservation]:
    """Admit queued leases of one pool that now fit, in Q5 order; one that cannot fit
    does not block those behind it."""
    now = now or timezone.now()
    pool = _lock_pool(gpu_model)
    admitted: list[Reservation] = []
    while True:
        queued = list(
            Reservation.objects.select_for_update(of=("self",))
            .filter(gpu_model=pool.gpu_model_id, status=Status.QUEUED)
            .exclude(pk__in=[lease.pk for lease in admitted])
            .select_related("offering", "image", "project")
        )
        if not queued:
            break
        project_ids = {lease.project_id for lease in queued}
        standings = {pid: _standing(pool, pid) for pid in project_ids}
        weights = dict(
            Quota.objects.filter(
                project_id__in=project_ids, gpu_model=pool.gpu_model_id
            ).values_list("project_id", "weight")
        )
        for lease in queue_order(queued, standings, weights):
            try:
                decision = decide(
                    standings[lease.project_id],
                    gpu_count=lease.gpu_count,
                    priority=lease.priority,
                    market=lease.market,
                    approved=lease.approved_at is not None,
                )
            except QuotaExceeded:
                continue  # its project's standing changed; it waits
            if decision.status == Status.PROVISIONING:
                _apply(lease, decision, now=now)
                audit.record(
                    actor=None,
                    verb="lease.admitted",
                    obj=lease,
                    project=lease.project_id,
                    source="worker",
                    at=now,
                    after={"tier": lease.tier},
                )
                notify(
                    [lease.requester],
                    subject=_("Starting: %(lease)s") % {"lease": lease},
                    link=lease.get_absolute_url(),
                )
                admitted.append(lease)
                break  # standings changed: re-read before the next one
        else:
            break
    return admitted
