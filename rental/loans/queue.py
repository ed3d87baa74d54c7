"""Queue services: promote burst leases into the guarantee (Q3) and admit queued leases in
Q5 order whenever room appears; a lease that cannot fit does not block those behind it."""

from dataclasses import dataclass, field
from datetime import datetime
from decimal import Decimal

from django.db import transaction
from django.utils import timezone
from django.utils.translation import gettext_noop

from portal import audit
from portal.errors import QuotaExceeded
from portal.phrases import Phrase
from rental.loans import ceiling, fair_share, messages, reclaim, reservations
from rental.loans.admission_checks import hold
from rental.loans.admission_rules import Decision, Standing
from rental.loans.placement import apply_decision
from rental.loans.pools import tell_watchers
from rental.loans.queue_rules import Waiting, queue_order, usage_per_share
from rental.loans.standing import lock_pool, read_standing, read_standings
from rental.loans.usage import close_usage
from rental.models import GpuModel, Market, Pool, Quota, Reservation, Tier, UsageRecord

Status = Reservation.Status


@transaction.atomic
def admit_queued(*, gpu_model: GpuModel | int, now: datetime | None = None) -> list[Reservation]:
    """Promote what now fits the guarantee, then admit queued leases of one pool that fit,
    in Q5 order, taking capacity back for guaranteed-eligible ones (Q6)."""
    now = now or timezone.now()
    return admit_in_pool(lock_pool(gpu_model), now=now)


def _quotas(pool: Pool, project_ids: set[int]) -> dict[int, Quota]:
    return {
        quota.project_id: quota
        for quota in Quota.objects.filter(project_id__in=project_ids, gpu_model=pool.gpu_model_id)
    }


@dataclass(frozen=True)
class QueueOrder:
    """A pool's queued leases in Q5 order, with what the order was decided on."""

    leases: list[Reservation]
    waiting: dict[int, Waiting]  # by lease id
    standings: dict[int, Standing]  # by project id
    # A fair pool's figure per project: decayed GPU-hours per share (empty otherwise).
    usage: dict[int, Decimal] = field(default_factory=dict)


def queue_in_order(
    pool: Pool, queued: list[Reservation], *, now: datetime, bulk: bool = False
) -> QueueOrder:
    """Queued leases in Q5 order (``queue_rules.queue_order``) with their projects'
    standings (no locks taken here). A fair pool adds one aggregate query of its
    projects' decayed usage as of ``now``; a pool without fair share reads nothing more."""
    project_ids = {lease.project_id for lease in queued}
    quotas = _quotas(pool, project_ids)
    # ``bulk``: a page's read (three queries for all projects); admission reads each
    # project's standing under the pool lock, as it decides.
    standings = (
        read_standings(pool, project_ids)
        if bulk
        else {pid: read_standing(pool, pid) for pid in project_ids}
    )
    usage: dict[int, Decimal] = {}
    if pool.fair_share and queued:
        gpu_seconds = fair_share.decayed_gpu_seconds(pool, project_ids, now=now)
        usage = {
            pid: usage_per_share(seconds, guaranteed=standings[pid].guaranteed)
            for pid, seconds in gpu_seconds.items()
        }
    by_id = {lease.pk: lease for lease in queued}
    waiting = [
        Waiting(
            id=lease.pk,
            guaranteed_eligible=lease.market != Market.SPOT
            and standings[lease.project_id].used_guaranteed + lease.gpu_count
            <= standings[lease.project_id].guaranteed,
            priority=lease.priority,
            over_guarantee=max(
                standings[lease.project_id].used - standings[lease.project_id].guaranteed, 0
            ),
            weight=quotas[lease.project_id].weight if lease.project_id in quotas else 1,
            submitted_at=lease.submitted_at,
            fair_usage=usage.get(lease.project_id),
            project_id=lease.project_id,
        )
        for lease in queued
    ]
    ordered = queue_order(waiting)
    return QueueOrder(
        leases=[by_id[w.id] for w in ordered],
        waiting={w.id: w for w in ordered},
        standings=standings,
        usage=usage,
    )


def waiting_in_order(
    pool: Pool, queued: list[Reservation], *, now: datetime | None = None
) -> tuple[list[Reservation], dict[int, Standing]]:
    """Queued leases in Q5 order with their projects' standings (no locks taken here)."""
    order = queue_in_order(pool, queued, now=now or timezone.now())
    return order.leases, order.standings


def admit_in_pool(pool: Pool, *, now: datetime) -> list[Reservation]:
    """Within the caller's transaction, pool locked."""
    promote_in_pool(pool, now=now)
    admitted: list[Reservation] = []
    passed: set[int] = set()
    while True:
        queued = list(
            Reservation.objects.select_for_update(of=("self",))
            .filter(gpu_model=pool.gpu_model_id, status=Status.QUEUED, reclaim_due_at__isnull=True)
            .exclude(pk__in=passed)
            .select_related("offering", "image", "project", "gpu_model")
        )
        if not queued:
            break
        ordered, standings = waiting_in_order(pool, queued, now=now)
        bookings = reservations.booked_windows(pool.gpu_model_id)  # once a pass, not a lease
        for lease in ordered:
            standing = standings[lease.project_id]
            end = now + (lease.end - lease.start)
            until = end if lease.is_reservation else ceiling.queued_window(end)
            booked = reservations.overlaps(bookings.get(lease.project_id, []), now, until)
            try:
                decision = reservations.decide_waiting(
                    pool, standing, lease, start=now, end=end, booked=booked
                )
            except QuotaExceeded:
                passed.add(lease.pk)
                continue  # its project's standing changed; it waits
            if beyond_ceiling(pool, lease, decision, standing, now=now, booked=booked):
                passed.add(lease.pk)
                continue  # it would take its project over L at a booking's start; it waits
            if held_by_check(lease, decision, now=now):
                passed.add(lease.pk)
                continue  # a check refuses it for now; it keeps its place
            if decision.status == Status.PROVISIONING:
                apply_decision(lease, decision, now=now)
                audit.record(
                    actor=None,
                    verb="lease.admitted",
                    obj=lease,
                    project=lease.project_id,
                    source="worker",
                    at=now,
                    after={"tier": lease.tier},
                )
                messages.starting(lease)
                admitted.append(lease)
                passed.add(lease.pk)
                break  # standings changed: re-read before the next one
            if decision.status == Status.QUEUED:
                changed = (lease.tier, lease.status_code, lease.status_message) != (
                    decision.tier,
                    decision.code,
                    decision.message,
                )
                lease.tier = decision.tier
                lease.status_code, lease.status_message = decision.code, decision.message
                if reclaim.reclaim_for(pool=pool, lease=lease, standing=standing, now=now):
                    passed.add(lease.pk)
                    break  # GPUs are now claimed: re-read
                if changed:  # a long queue is not rewritten on every pass
                    lease.save(
                        update_fields=["tier", "status_code", "status_message", "updated_at"]
                    )
            passed.add(lease.pk)
        else:
            break
    tell_watchers(pool, now=now)
    return admitted


def beyond_ceiling(
    pool: Pool,
    lease: Reservation,
    decision: Decision,
    standing: Standing,
    *,
    now: datetime,
    booked: bool,
) -> bool:
    """Whether starting ``lease`` now would take its project over L when one of its
    bookings starts (``ceiling.keep_ceiling``; ``booked``: whether some overlap its
    window); if so it keeps its place, saying why. A lease a manager approved is beyond
    L by decision."""
    if lease.approved_at is not None or decision.status not in (Status.PROVISIONING, Status.QUEUED):
        return False
    end = now + (lease.end - lease.start)
    kept = ceiling.keep_ceiling(
        pool,
        decision,
        project_id=lease.project_id,
        ceiling=standing.ceiling,
        gpus=lease.gpu_count,
        market=lease.market,
        start=now,
        end=end,
        booked=booked,
        may_reclaim=not lease.is_reservation,
    )
    if kept.status != Status.PENDING_APPROVAL:
        return False
    if (lease.status_code, lease.status_message) != (CEILING_BOOKED, kept.message):
        lease.status_code, lease.status_message = CEILING_BOOKED, kept.message
        lease.save(update_fields=["status_code", "status_message", "updated_at"])
    return True


# A queued lease that would take its project over L beside its bookings.
CEILING_BOOKED = "ceiling_booked"


def held_by_check(lease: Reservation, decision: Decision, *, now: datetime) -> bool:
    """True when an admission check holds ``lease`` back for now (``hold``): it stays
    queued with the check's message as its reason, keeps its place, and is asked again on
    the next pass."""
    held = hold(lease, decision, now=now)
    if held is None:
        return False
    now_shown = (held.code, held.message, held.tier)
    if (lease.status_code, lease.status_message, lease.tier) != now_shown:
        lease.status_code, lease.status_message, lease.tier = now_shown
        lease.save(update_fields=["status_code", "status_message", "tier", "updated_at"])
    return True


def promote_in_pool(pool: Pool, *, now: datetime) -> list[Reservation]:
    """Q3: where a project's guaranteed use has fallen, its burst leases that now fit become
    guaranteed, oldest first, and can no longer be reclaimed as burst; not one that would
    then leave its project's bookings without their room (R2): it stays burst, so R4 can
    take it back at the booking's start."""
    burst = Reservation.objects.select_for_update(of=("self",)).filter(
        gpu_model=pool.gpu_model_id,
        status__in=(Status.PROVISIONING, Status.ACTIVE),
        tier=Tier.BURST,
        notice_due_at__isnull=True,
    )
    project_ids = set(burst.values_list("project_id", flat=True))
    if not project_ids:
        return []
    promoted: list[Reservation] = []
    for project_id in sorted(project_ids):
        standing = read_standing(pool, project_id)
        room = standing.guaranteed - standing.used_guaranteed
        for lease in burst.filter(project_id=project_id).order_by("start", "pk"):
            if lease.gpu_count <= room and beside_bookings_allowed(pool, lease, now=now):
                promote(lease=lease, now=now)
                room -= lease.gpu_count
                promoted.append(lease)
    return promoted


def beside_bookings_allowed(pool: Pool, lease: Reservation, *, now: datetime) -> bool:
    if not reservations.booked_between(lease.project_id, pool.gpu_model_id, now, lease.end):
        return True
    try:
        reservations.check_beside_bookings(
            pool, project_id=lease.project_id, gpus=lease.gpu_count, start=now, end=lease.end
        )
    except QuotaExceeded:
        return False
    return True


def promote(*, lease: Reservation, now: datetime) -> None:
    """One burst lease becomes guaranteed from ``now``: its open usage is split at ``now`` so
    billing sees each second in the tier it ran in."""
    lease.tier = Tier.GUARANTEED
    lease.status_code = "promoted"
    lease.status_message = Phrase(gettext_noop("Promoted to guaranteed at %(at)s UTC."), at=now)
    lease.save()
    for instance in lease.instances.select_for_update():
        for record in UsageRecord.objects.filter(instance=instance, end__isnull=True):
            if record.start >= now:
                record.tier = Tier.GUARANTEED
                record.save(update_fields=["tier"])
                continue
            close_usage(instance, at=now, reason="")
            UsageRecord.objects.create(
                instance=instance,
                project_id=record.project_id,
                gpu_model_id=record.gpu_model_id,
                tier=Tier.GUARANTEED,
                market=record.market,
                gpu_count=record.gpu_count,
                start=now,
                rate=record.rate,
                currency=record.currency,
                exchange_rate=record.exchange_rate,
                exchange_rate_ref_id=record.exchange_rate_ref_id,
            )
    audit.record(
        actor=None,
        verb="lease.promoted",
        obj=lease,
        project=lease.project_id,
        source="worker",
        at=now,
        before={"tier": Tier.BURST},
        after={"tier": Tier.GUARANTEED},
    )
    messages.promoted(lease)


def queue_positions(gpu_model: GpuModel | int, *, now: datetime | None = None) -> dict[int, int]:
    """Each queued lease's place (1-based) in its pool's queue, as admission would take
    them now; leases waiting for reclaimed GPUs come first. Read-only."""
    queue = pool_queue(gpu_model, now=now)
    return {} if queue is None else queue.places


@dataclass(frozen=True)
class PoolQueue:
    """A pool's queue as admission would take it now: the leases waiting for reclaimed
    GPUs first (``claiming``), then the rest in Q5 order (``order``)."""

    pool: Pool
    claiming: list[Reservation]
    order: QueueOrder

    @property
    def leases(self) -> list[Reservation]:
        return self.claiming + self.order.leases

    @property
    def places(self) -> dict[int, int]:
        return {lease.pk: place for place, lease in enumerate(self.leases, start=1)}


def pool_queue(gpu_model: GpuModel | int, *, now: datetime | None = None) -> PoolQueue | None:
    """The queue of ``gpu_model``'s pool (None without a pool). Read-only."""
    pool = Pool.objects.filter(gpu_model=gpu_model).first()
    return None if pool is None else queue_of(pool, now=now)


def queue_of(pool: Pool, *, now: datetime | None = None) -> PoolQueue:
    """``pool``'s queue as admission would take it at ``now``. Read-only."""
    queued = list(
        Reservation.objects.filter(gpu_model=pool.gpu_model_id, status=Status.QUEUED)
        .select_related("project")
        .order_by("reclaim_due_at", "pk")
    )
    claiming = [lease for lease in queued if lease.reclaim_due_at is not None]
    order = queue_in_order(
        pool,
        [lease for lease in queued if lease.reclaim_due_at is None],
        now=now or timezone.now(),
        bulk=True,
    )
    return PoolQueue(pool=pool, claiming=claiming, order=order)
