"""The pool row lock and the one aggregate read of a pool's standing under it.

Every writer that decides on a pool's capacity locks the pool row first, then
reads what it decides on with ``read_standing`` (one query), and does everything
else (validation, offering choice, rendering) before or after.
"""

from dataclasses import dataclass

from django.db.models import Q, Sum
from django.utils.translation import gettext as _

from portal.errors import InvalidInput
from rental.models import GpuModel, Pool, Priority, Quota, Reservation, TerminationReason, Tier
from rental.services.admission_rules import Standing

Status = Reservation.Status

# GPUs that count as used in the pool: running leases, including those under notice,
# but not a preempted lease whose notice is over (its billing stopped at T + notice).
HOLDING_GPUS = Q(status__in=Reservation.HOLDING) & ~Q(
    status=Status.ENDING, end_reason=TerminationReason.PREEMPTED
)
# Victims told and not yet ended (Q8).
NOTICED = Q(status__in=(Status.PROVISIONING, Status.ACTIVE), notice_due_at__isnull=False)
# Leases waiting for the GPUs their victims give back: a reclaim, or a reservation
# starting (R4). Their GPUs are held so nothing else is admitted on them in between.
CLAIMING = Q(status__in=(Status.QUEUED, Status.SCHEDULED), reclaim_due_at__isnull=False)


def lock_pool(gpu_model: GpuModel | int) -> Pool:
    """Serialize admissions per GPU model: every admission locks its pool first."""
    try:
        return Pool.objects.select_for_update().get(gpu_model=gpu_model)
    except Pool.DoesNotExist:
        raise InvalidInput(
            _("No pool is configured for this GPU model."), code="no_pool", field="gpu_model"
        ) from None


@dataclass(frozen=True)
class PoolUse:
    """A pool's GPUs by what holds them."""

    capacity: int
    running: int
    noticed: int
    claimed: int

    @property
    def held(self) -> int:
        """Running GPUs, plus what claims need beyond what their victims give back:
        the most the pool will be using now or at the end of any notice."""
        return self.running + max(self.claimed - self.noticed, 0)


# Only these statuses can hold or claim GPUs: the aggregates read them through the
# (gpu_model, status) index, so a pool's history does not slow its admissions down.
LIVE_STATUSES = (*Reservation.HOLDING, Status.QUEUED, Status.SCHEDULED)


def _live(pool: Pool):
    return Reservation.objects.filter(gpu_model_id=pool.gpu_model_id, status__in=LIVE_STATUSES)


def pool_use(pool: Pool) -> PoolUse:
    row = _live(pool).aggregate(
        running=Sum("gpu_count", filter=HOLDING_GPUS),
        noticed=Sum("gpu_count", filter=NOTICED),
        claimed=Sum("gpu_count", filter=CLAIMING),
    )
    return PoolUse(
        capacity=pool.capacity,
        running=row["running"] or 0,
        noticed=row["noticed"] or 0,
        claimed=row["claimed"] or 0,
    )


def read_standing(
    pool: Pool, project_id: int, quota: Quota | None, *, priority: str = Priority.LEARNING
) -> Standing:
    """The project's and the pool's standing in one aggregate query (Q2, Q4, Q8).

    A claiming lease counts in its project's use already, so a second request cannot
    take the same guarantee while the first waits for its victims."""
    mine = Q(project_id=project_id) & (HOLDING_GPUS | CLAIMING)
    displaceable = Q(project_id=project_id, tier=Tier.GUARANTEED, notice_due_at__isnull=True) & Q(
        status__in=(Status.PROVISIONING, Status.ACTIVE)
    )
    row = _live(pool).aggregate(
        running=Sum("gpu_count", filter=HOLDING_GPUS),
        noticed=Sum("gpu_count", filter=NOTICED),
        claimed=Sum("gpu_count", filter=CLAIMING),
        used_guaranteed=Sum("gpu_count", filter=mine & Q(tier=Tier.GUARANTEED)),
        used=Sum("gpu_count", filter=mine & ~Q(tier=Tier.SPOT)),
        own_learning=Sum("gpu_count", filter=displaceable & Q(priority=Priority.LEARNING)),
        own_experiment=Sum("gpu_count", filter=displaceable & Q(priority=Priority.EXPERIMENT)),
    )
    use = PoolUse(
        capacity=pool.capacity,
        running=row["running"] or 0,
        noticed=row["noticed"] or 0,
        claimed=row["claimed"] or 0,
    )
    return Standing(
        guaranteed=quota.guaranteed if quota else 0,
        ceiling=quota.ceiling if quota else 0,
        used_guaranteed=row["used_guaranteed"] or 0,
        used=row["used"] or 0,
        capacity=pool.capacity,
        running=use.held,
        # Only a production request may take its own project's guarantee back (Q2, Q6).
        displaceable=(row["own_learning"] or 0) + (row["own_experiment"] or 0)
        if priority == Priority.PRODUCTION
        else 0,
    )
