"""What billing reads of the compute side, in bulk: usage runs and reserved windows for a
period, pool terms, exchange rates, storage intervals, idle hours. Billing reads rental
only through these reads and ``rental.selectors``; rental never imports billing."""

from collections import defaultdict
from collections.abc import Iterable
from dataclasses import dataclass
from datetime import datetime, timedelta
from decimal import Decimal

from django.conf import settings
from django.db.models import F, Q
from django.db.models.functions import Coalesce

from rental.models import (
    ExchangeRate,
    Market,
    Pool,
    Quota,
    Reservation,
    StorageInterval,
    Tier,
    UnbilledCloudTime,
    UsageRecord,
    UtilizationRollup,
    UtilizationSample,
)
from rental.models.agent import ROLL_BACK_HOURS, hour_of, rollup
from rental.models.currency import billing_currency
from rental.selectors import usage_for_period

# What billing reads of each usage run (billed seconds are computed from these).
# A usage run's requester (its lease's), as a field path from the run.
REQUESTER = "instance__reservation__requester_id"
USAGE_ROW_FIELDS = (
    "id",
    "project_id",
    "gpu_model_id",
    "tier",
    "market",
    "rate",
    "currency",
    "exchange_rate",
    "exchange_rate_ref_id",
    "gpu_count",
    "start",
    "end",
    "end_reason",
)


def usage_rows_for_period(
    *,
    start: datetime,
    end: datetime,
    project_ids: Iterable[int] | None = None,
    not_rolled_up: bool = False,
):
    """The usage that may bill in [start, end) as plain rows, in one query, with the lease
    and requester each run belongs to (for statements, drill-down and spend per requester).
    ``not_rolled_up``: only the runs billing has not rolled up (open ones, recent ones).

    Each row has the ``USAGE_ROW_FIELDS`` and ``instance_id, reservation_id,
    requester_id``.
    """
    records = usage_for_period(start=start, end=end, project_ids=project_ids)
    if not_rolled_up:
        records = records.filter(rolled_up=False)
    return records.select_related(None).values_list(
        *USAGE_ROW_FIELDS,
        "instance_id",
        "instance__reservation_id",
        REQUESTER,
        named=True,
    )


@dataclass(frozen=True)
class PoolTerms:
    """What billing needs of a pool to apportion its cost: K, F, the mode and each G."""

    gpu_model_id: int
    gpu_model_name: str
    committed_gpus: int
    committed_monthly_cost: Decimal
    apportionment: str
    residual: str
    guarantees: dict[int, int]


def pool_terms() -> dict[int, PoolTerms]:
    """Every pool's apportionment terms keyed by GPU model id, in two queries."""
    guarantees: dict[int, dict[int, int]] = {}
    for model_id, project_id, guaranteed in Quota.objects.filter(guaranteed__gt=0).values_list(
        "gpu_model_id", "project_id", "guaranteed"
    ):
        guarantees.setdefault(model_id, {})[project_id] = guaranteed
    return {
        row["gpu_model_id"]: PoolTerms(
            gpu_model_id=row["gpu_model_id"],
            gpu_model_name=row["gpu_model__name"],
            committed_gpus=row["committed_gpus"],
            committed_monthly_cost=row["committed_monthly_cost"],
            apportionment=row["apportionment"],
            residual=row["residual"],
            guarantees=guarantees.get(row["gpu_model_id"], {}),
        )
        for row in Pool.objects.values(
            "gpu_model_id",
            "gpu_model__name",
            "committed_gpus",
            "committed_monthly_cost",
            "apportionment",
            "residual",
        )
    }


# A reservation is charged for its window (B7) unless it never became one.
UNCHARGED_RESERVATION = (
    Reservation.Status.PENDING_APPROVAL,
    Reservation.Status.REJECTED,
    Reservation.Status.CANCELLED,
    Reservation.Status.FAILED,
)


def reserved_windows_for_period(
    *, start: datetime, end: datetime, project_ids: Iterable[int] | None = None
) -> list[dict]:
    """Leases in tier ``reserved`` whose window overlaps [start, end), as plain dicts with
    the offering's rate per GPU-hour for their market, in one query."""
    leases = (
        Reservation.objects.filter(tier=Tier.RESERVED, start__lt=end, end__gt=start)
        .exclude(status__in=UNCHARGED_RESERVATION)
        .order_by("start", "id")
    )
    if project_ids is not None:
        leases = leases.filter(project_id__in=list(project_ids))
    rows = []
    for row in leases.values(
        "id",
        "project_id",
        "gpu_model_id",
        "gpu_count",
        "market",
        "start",
        "end",
        "requester_id",
        "offering__on_demand_price_per_hour",
        "offering__spot_price_per_hour",
        "offering__gpus_per_instance",
        "offering__currency",
    ):
        price = (
            row["offering__spot_price_per_hour"]
            if row["market"] == Market.SPOT
            else row["offering__on_demand_price_per_hour"]
        ) or Decimal(0)
        per_instance = row["offering__gpus_per_instance"] or 1
        row["rate"] = (price / per_instance).quantize(Decimal("0.000001"))
        rows.append(row)
    return rows


def unbilled_for_period(*, start: datetime, end: datetime) -> list[dict]:
    """Cloud time after billing stopped that overlaps [start, end), as plain dicts (one
    query): billing carries it as each pool's platform line."""
    return list(
        UnbilledCloudTime.objects.filter(start__lt=end, end__gt=start)
        .order_by("start", "id")
        .values("gpu_model_id", "gpu_count", "start", "end", "rate", "currency", "exchange_rate")
    )


def usage_for_rollup(*, start: datetime, end: datetime):
    """The runs billing has not rolled up that may bill in [start, end), as a queryset for
    its aggregate (read through the partial index on runs not rolled up)."""
    return usage_for_period(start=start, end=end).filter(rolled_up=False)


def rolled_usage(*, start: datetime | None = None, end: datetime | None = None):
    """The runs marked rolled up (all, or those that may bill in [start, end)), for
    rebuilding the rollups from them."""
    records = (
        usage_for_period(start=start, end=end)
        if start is not None and end is not None
        else UsageRecord.objects.all()
    )
    return records.filter(rolled_up=True, end__isnull=False)


def claim_usage_to_roll_up(*, after: int, limit: int) -> list:
    """Within the caller's transaction: up to ``limit`` closed runs not rolled up yet with
    an id above ``after``, in id order, as plain rows with their ``REQUESTER``, locked
    (runs another roll-up holds are skipped, not waited for). Read through the partial
    index on runs not rolled up."""
    return list(
        # Only the runs are locked, not the leases their requester comes from.
        UsageRecord.objects.select_for_update(skip_locked=True, of=("self",))
        .filter(rolled_up=False, end__isnull=False, id__gt=after)
        .order_by("id")
        .values_list(*USAGE_ROW_FIELDS, REQUESTER, named=True)[:limit]
    )


def mark_rolled_up(ids: Iterable[int]) -> int:
    """Within the caller's transaction, with the runs claimed: billing has added these
    closed runs to its rollups. The one write billing makes to the compute side's rows."""
    return UsageRecord.objects.filter(pk__in=list(ids), end__isnull=False).update(rolled_up=True)


def lease_usage_rows(reservation_id: int):
    """One lease's usage runs as plain rows (the lease page's cost so far)."""
    return (
        UsageRecord.objects.filter(instance__reservation_id=reservation_id)
        .order_by("start", "id")
        .values_list(*USAGE_ROW_FIELDS, named=True)
    )


@dataclass(frozen=True)
class IdleHour:
    """One instance-hour: how many samples came and how many were idle (L6: every GPU
    below the site's threshold), with what billing needs to price the idle ones."""

    gpu_model_id: int
    gpu_count: int
    rate_per_hour: Decimal  # the instance's, captured at launch
    exchange_rate: Decimal
    samples: int
    idle_samples: int


def idle_hours(*, start: datetime, end: datetime, project_ids: Iterable[int]) -> list[IdleHour]:
    """The projects' instance-hours in [start, end). Hours already rolled up are read from
    the hourly rollups (kept ``PORTAL_ROLLUP_RETENTION_DAYS``); the recent hours the beat
    has not rolled up yet from the raw samples, so the last minutes count too. Two queries,
    whatever the window."""
    projects = list(project_ids)
    priced = (
        "instance__reservation__gpu_model_id",
        "instance__gpu_count",
        "instance__rate_per_hour",
        "instance__exchange_rate",
    )
    rolled = UtilizationRollup.objects.filter(
        hour__gte=hour_of(start), hour__lt=end, instance__reservation__project_id__in=projects
    ).values_list("instance_id", "hour", "samples", "idle_samples", *priced)
    hours: list[IdleHour] = []
    covered: set[tuple[int, datetime]] = set()
    for instance_id, hour, samples, idle, *price in rolled:
        covered.add((instance_id, hour))
        hours.append(IdleHour(*price, samples=samples, idle_samples=idle))
    recent = UtilizationSample.objects.filter(
        at__gte=max(start, hour_of(end) - timedelta(hours=ROLL_BACK_HOURS + 1)),
        at__lt=end,
        instance__reservation__project_id__in=projects,
    ).values_list("instance_id", "at", "gpu_utilization", *priced)
    pending: dict[tuple, list] = defaultdict(list)
    for instance_id, at, utilization, *price in recent:
        if (instance_id, hour_of(at)) not in covered:
            pending[(instance_id, hour_of(at), *price)].append((utilization, []))
    threshold = settings.PORTAL_IDLE_THRESHOLD_PERCENT
    for (_instance, _hour, *price), rows in pending.items():
        tally = rollup(rows, threshold=threshold)
        hours.append(IdleHour(*price, samples=tally["samples"], idle_samples=tally["idle_samples"]))
    return hours


def pool_usage_intervals(*, gpu_model_ids: Iterable[int], start: datetime, end: datetime):
    """The pools' usage runs overlapping [start, end) as ``(gpu_model_id, start, end,
    gpu_count, rate, tier, exchange_rate)`` rows, in one query whatever the number of pools
    (for the committed-capacity advice)."""
    return (
        UsageRecord.objects.filter(gpu_model_id__in=list(gpu_model_ids), start__lt=end)
        .filter(Q(end__isnull=True) | Q(end__gt=start))
        .order_by()
        .values_list("gpu_model_id", "start", "end", "gpu_count", "rate", "tier", "exchange_rate")
    )


def exchange_rates() -> list[ExchangeRate]:
    """Every exchange rate into the billing currency, oldest first, in one query (a small
    table: billing picks the one in force at a moment from it)."""
    return list(
        ExchangeRate.objects.filter(billing_currency=billing_currency()).order_by(
            "currency", "valid_from", "pk"
        )
    )


# -- storage (B8) and data volumes -------------------------------------------------------


def storage_intervals_for_period(
    *, start: datetime, end: datetime, project_ids: Iterable[int] | None = None
):
    """When each data volume and each stopped instance's disk existed and was billable,
    for those overlapping [start, end), as plain rows in one query: ``id, project_id, kind,
    volume_id, instance_id, size_gb, rate_per_gb_month, start, end, name, reservation_id``
    (``name``: the volume's name or the instance's cloud id)."""
    rows = StorageInterval.objects.filter(start__lt=end).filter(
        Q(end__isnull=True) | Q(end__gt=start)
    )
    if project_ids is not None:
        rows = rows.filter(project_id__in=list(project_ids))
    return (
        rows.annotate(
            name=Coalesce(F("volume__name"), F("instance__external_id")),
            reservation_id=F("instance__reservation_id"),
        )
        .order_by("start", "id")
        .values_list(
            "id",
            "project_id",
            "kind",
            "volume_id",
            "instance_id",
            "size_gb",
            "rate_per_gb_month",
            "start",
            "end",
            "name",
            "reservation_id",
            named=True,
        )
    )
