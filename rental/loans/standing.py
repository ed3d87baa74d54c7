"""The pool row lock and the one aggregate read of a pool's standing under it.

Every writer that decides on a pool's capacity locks the pool row first, then
reads what it decides on with ``read_standing`` (one query), and does everything
else (validation, offering choice, rendering) before or after.
"""

from collections.abc import Iterable
from dataclasses import dataclass, replace
from datetime import datetime
from functools import cache

from django.db import connection
from django.db.models import Q, Sum
from django.utils.translation import gettext as _

from portal.errors import InvalidInput
from rental.loans.admission_rules import Standing
from rental.models import (
    GpuModel,
    Pool,
    Priority,
    Quota,
    Reservation,
    TerminationReason,
    Tier,
)

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


@cache
def _pool_columns() -> tuple[str, ...]:
    return tuple(field.attname for field in Pool._meta.concrete_fields)


def _lock_sql() -> str:
    lock = " FOR UPDATE" if connection.features.has_select_for_update else ""
    return f"SELECT {', '.join(_pool_columns())} FROM rental_pool WHERE gpu_model_id = %s{lock}"


def _pool_from(row: tuple | None) -> Pool:
    if row is None:
        raise InvalidInput(
            _("No pool is configured for this GPU model."), code="no_pool", field="gpu_model"
        )
    return Pool.from_db(connection.alias, list(_pool_columns()), row)


def lock_pool(gpu_model: GpuModel | int) -> Pool:
    """Serialize admissions per GPU model: every admission locks its pool first.

    One short statement: every admission waits here, so it is written out rather than
    compiled by the ORM on each call (about 1 ms less while the queue of writers waits)."""
    gpu_model_id = gpu_model if isinstance(gpu_model, int) else gpu_model.pk
    with connection.cursor() as cursor:
        cursor.execute(_lock_sql(), [gpu_model_id])
        return _pool_from(cursor.fetchone())


def lock_and_read(
    gpu_model: GpuModel | int,
    project_id: int,
    *,
    priority: str = Priority.LEARNING,
    window: tuple[datetime, datetime] | None = None,
) -> tuple[Pool, Standing]:
    """``lock_pool`` then ``read_standing``, in one round trip on PostgreSQL: both
    statements are sent at once (psycopg's pipeline mode) and the server runs the read as
    soon as the lock is granted, without waiting for this process to be scheduled again.
    The read is still its own statement, so under READ COMMITTED it takes its snapshot
    after the lock is granted and sees every admission committed before."""
    gpu_model_id = gpu_model if isinstance(gpu_model, int) else gpu_model.pk
    sql = _STANDING if window is None else _STANDING_IN_WINDOW
    params = _standing_params(gpu_model_id, project_id, window)
    connection.ensure_connection()
    pipeline = getattr(connection.connection, "pipeline", None)
    if connection.vendor != "postgresql" or pipeline is None:
        pool = lock_pool(gpu_model_id)
        return pool, read_standing(pool, project_id, priority=priority, window=window)
    with connection.cursor() as lock, connection.cursor() as read:
        # The results (and any error) arrive when the pipeline ends, outside the
        # cursors' own translation of driver errors into Django's.
        with connection.wrap_database_errors, pipeline():
            lock.execute(_lock_sql(), [gpu_model_id])
            read.execute(sql, params)
        pool = _pool_from(lock.fetchone())
        return pool, _standing(pool, read.fetchone(), priority=priority)


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


# Bookings that count in their project's entitlement E(t) (R2).
BOOKED = (Status.SCHEDULED, Status.QUEUED, Status.PROVISIONING, Status.ACTIVE)

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


# The standing in one statement, written out: it runs under the pool lock on every
# admission, where compiling the ORM's seven filtered sums took 3–4 ms of the lock's time.
# tests/rental/loans/test_standing_sql.py checks it against HOLDING_GPUS, NOTICED and CLAIMING
# over every combination of status, tier, notice and reclaim.
_HOLDING_SQL = "(status IN (%s, %s, %s) AND NOT (status = %s AND end_reason = %s))"
_NOTICED_SQL = "(status IN (%s, %s) AND notice_due_at IS NOT NULL)"
_CLAIMING_SQL = "(status IN (%s, %s) AND reclaim_due_at IS NOT NULL)"
_HOLDING_PARAMS = [*Reservation.HOLDING, Status.ENDING, TerminationReason.PREEMPTED]
_NOTICED_PARAMS = [Status.PROVISIONING, Status.ACTIVE]
_CLAIMING_PARAMS = [Status.QUEUED, Status.SCHEDULED]
_MINE_SQL = f"project_id = %s AND ({_HOLDING_SQL} OR {_CLAIMING_SQL})"
_QUOTA_SQL = "(SELECT {column} FROM rental_quota WHERE project_id = %s AND gpu_model_id = %s)"
STANDING_SQL = f"""
SELECT
  SUM(gpu_count) FILTER (WHERE {_HOLDING_SQL}),
  SUM(gpu_count) FILTER (WHERE {_NOTICED_SQL}),
  SUM(gpu_count) FILTER (WHERE {_CLAIMING_SQL}),
  SUM(gpu_count) FILTER (WHERE {_MINE_SQL} AND tier = %s),
  SUM(gpu_count) FILTER (WHERE {_MINE_SQL} AND NOT tier = %s),
  SUM(gpu_count) FILTER (WHERE project_id = %s AND tier = %s AND notice_due_at IS NULL
                         AND status IN (%s, %s) AND priority IN (%s, %s)),
  {_QUOTA_SQL.format(column="guaranteed")},
  {_QUOTA_SQL.format(column="ceiling")},
  {{booked}}
FROM rental_reservation
WHERE gpu_model_id = %s AND status IN (%s, %s, %s, %s, %s)
"""
# The project's bookings overlapping a window [start, end) (R2 beside a guaranteed lease).
_BOOKED_SQL = (
    "SUM(gpu_count) FILTER (WHERE project_id = %s AND is_reservation"
    ' AND status IN (%s, %s, %s, %s) AND start < %s AND "end" > %s)'
)
_STANDING = STANDING_SQL.format(booked="0")
_STANDING_IN_WINDOW = STANDING_SQL.format(booked=_BOOKED_SQL)


def _standing_params(
    gpu_model_id: int, project_id: int, window: tuple[datetime, datetime] | None
) -> list:
    mine = [project_id, *_HOLDING_PARAMS, *_CLAIMING_PARAMS]
    booked = [] if window is None else [project_id, *BOOKED, window[1], window[0]]
    quota = [project_id, gpu_model_id]
    return [
        *_HOLDING_PARAMS,
        *_NOTICED_PARAMS,
        *_CLAIMING_PARAMS,
        *mine,
        Tier.GUARANTEED,
        *mine,
        Tier.SPOT,
        project_id,
        Tier.GUARANTEED,
        Status.PROVISIONING,
        Status.ACTIVE,
        Priority.LEARNING,
        Priority.EXPERIMENT,
        *quota,
        *quota,
        *booked,
        gpu_model_id,
        *LIVE_STATUSES,
    ]


def read_standing(
    pool: Pool,
    project_id: int,
    *,
    priority: str = Priority.LEARNING,
    window: tuple[datetime, datetime] | None = None,
) -> Standing:
    """The project's and the pool's standing in one aggregate query (Q2, Q4, Q8), its
    quota (G, L) included, so a writer holding the pool lock decides on figures nobody
    can change until it commits (quotas change under the same lock). With ``window``,
    also the project's bookings overlapping it.

    A claiming lease counts in its project's use already, so a second request cannot
    take the same guarantee while the first waits for its victims."""
    sql = _STANDING if window is None else _STANDING_IN_WINDOW
    with connection.cursor() as cursor:
        cursor.execute(sql, _standing_params(pool.gpu_model_id, project_id, window))
        return _standing(pool, cursor.fetchone(), priority=priority)


def read_standings(pool: Pool, project_ids: Iterable[int]) -> dict[int, Standing]:
    """``read_standing`` (priority learning, no window) of many projects in three
    queries, whatever their number: the pool's figures once, each project's use in one
    grouped aggregate, their quotas in one. For pages that show a queue; a writer
    deciding under the pool lock reads ``read_standing``."""
    project_ids = sorted(set(project_ids))
    if not project_ids:
        return {}
    pool_wide = read_standing(pool, project_ids[0])
    mine = Q(project_id__in=project_ids) & (HOLDING_GPUS | CLAIMING)
    uses = {
        row["project_id"]: row
        # Through the (gpu_model, status) index: the live leases, not the projects' history.
        for row in Reservation.objects.filter(
            mine, gpu_model_id=pool.gpu_model_id, status__in=LIVE_STATUSES
        )
        .order_by()
        .values("project_id")
        .annotate(
            used_guaranteed=Sum("gpu_count", filter=Q(tier=Tier.GUARANTEED)),
            used=Sum("gpu_count", filter=~Q(tier=Tier.SPOT)),
        )
    }
    quotas = {
        project_id: (guaranteed, ceiling)
        for project_id, guaranteed, ceiling in Quota.objects.filter(
            gpu_model_id=pool.gpu_model_id, project_id__in=project_ids
        ).values_list("project_id", "guaranteed", "ceiling")
    }
    return {
        project_id: replace(
            pool_wide,
            guaranteed=quotas.get(project_id, (0, 0))[0],
            ceiling=quotas.get(project_id, (0, 0))[1],
            used_guaranteed=uses.get(project_id, {}).get("used_guaranteed") or 0,
            used=uses.get(project_id, {}).get("used") or 0,
            displaceable=0,
            booked_in_window=0,
        )
        for project_id in project_ids
    }


def _standing(pool: Pool, row: tuple, *, priority: str) -> Standing:
    running, noticed, claimed, used_guaranteed, used, own, g, ceiling, booked = row
    use = PoolUse(
        capacity=pool.capacity, running=running or 0, noticed=noticed or 0, claimed=claimed or 0
    )
    return Standing(
        guaranteed=g or 0,
        ceiling=ceiling or 0,
        used_guaranteed=used_guaranteed or 0,
        used=used or 0,
        capacity=pool.capacity,
        running=use.held,
        # Only a production request may take its own project's guarantee back (Q2, Q6).
        displaceable=(own or 0) if priority == Priority.PRODUCTION else 0,
        booked_in_window=booked or 0,
    )
