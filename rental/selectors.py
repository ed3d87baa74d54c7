"""Non-trivial reads of the compute side. Billing reads usage only through here."""

from collections import defaultdict
from collections.abc import Iterable
from dataclasses import dataclass
from datetime import datetime
from decimal import Decimal

from django.db.models import (
    Count,
    DurationField,
    ExpressionWrapper,
    F,
    IntegerField,
    Max,
    OuterRef,
    Prefetch,
    Q,
    QuerySet,
    Subquery,
    Sum,
)
from django.db.models.functions import Coalesce, Now

from portal import access
from portal.models import Membership, Project
from rental.models import (
    DataVolume,
    GpuModel,
    Image,
    Instance,
    Market,
    Offering,
    Pool,
    Quota,
    Reservation,
    Tier,
    UnbilledCloudTime,
    UsageRecord,
)
from rental.providers.base import Capability
from rental.providers.registry import capabilities


@dataclass(frozen=True)
class BeyondCeiling:
    """A running lease a manager approved, so it may run past the ceiling (Q2): why a
    project can run more than its ceiling."""

    lease_id: int
    gpu_count: int
    approver: str  # their name as the pages show it; "" when the account is gone
    approved_at: datetime


@dataclass(frozen=True)
class QuotaStatus:
    """A project's standing in one GPU model's pool, in GPUs."""

    guaranteed: int
    ceiling: int
    used_guaranteed: int
    used: int
    pool_capacity: int
    pool_running: int
    # Above its ceiling: its running leases a manager approved, oldest approval first
    # (none when the ceiling came down below leases already running).
    approved_beyond: tuple[BeyondCeiling, ...] = ()

    @property
    def above_ceiling(self) -> int:
        """GPUs running above the ceiling (U − L, or 0)."""
        return max(self.used - self.ceiling, 0)

    @property
    def guaranteed_left(self) -> int:
        return max(self.guaranteed - self.used_guaranteed, 0)

    @property
    def ceiling_left(self) -> int:
        return max(self.ceiling - self.used, 0)

    @property
    def pool_free(self) -> int:
        return max(self.pool_capacity - self.pool_running, 0)


def pool_running_gpus(gpu_model: GpuModel | int) -> int:
    """GPUs held by leases that run or are being started or ended (Q4)."""
    return (
        Reservation.objects.filter(gpu_model=gpu_model, status__in=Reservation.HOLDING).aggregate(
            n=Sum("gpu_count")
        )["n"]
        or 0
    )


def project_running_gpus(project: Project | int, gpu_model: GpuModel | int) -> tuple[int, int]:
    """(Ug, U): the project's running guaranteed GPUs and all its running non-spot GPUs."""
    totals = Reservation.objects.filter(
        project=project, gpu_model=gpu_model, status__in=Reservation.HOLDING
    ).aggregate(
        guaranteed=Sum("gpu_count", filter=Q(tier=Tier.GUARANTEED)),
        non_spot=Sum("gpu_count", filter=~Q(tier=Tier.SPOT)),
    )
    return totals["guaranteed"] or 0, totals["non_spot"] or 0


def quota_for(project: Project | int, gpu_model: GpuModel | int) -> Quota | None:
    return Quota.objects.filter(project=project, gpu_model=gpu_model).first()


def quota_status(*, project: Project | int, gpu_model: GpuModel | int) -> QuotaStatus:
    quota = quota_for(project, gpu_model)
    pool = Pool.objects.filter(gpu_model=gpu_model).first()
    used_guaranteed, used = project_running_gpus(project, gpu_model)
    ceiling = quota.ceiling if quota else 0
    model_id = gpu_model if isinstance(gpu_model, int) else gpu_model.pk
    return QuotaStatus(
        guaranteed=quota.guaranteed if quota else 0,
        ceiling=ceiling,
        used_guaranteed=used_guaranteed,
        used=used,
        pool_capacity=pool.capacity if pool else 0,
        pool_running=pool_running_gpus(gpu_model),
        approved_beyond=(
            approved_beyond(project, [model_id]).get(model_id, ()) if used > ceiling else ()
        ),
    )


def approved_beyond(
    project: Project | int, model_ids: list[int]
) -> dict[int, tuple[BeyondCeiling, ...]]:
    """Per GPU model: the project's running non-spot leases a manager approved (which
    lifts the ceiling for them, Q2), oldest approval first. One query."""
    found: dict[int, list[BeyondCeiling]] = defaultdict(list)
    leases = (
        Reservation.objects.filter(
            project=project,
            gpu_model__in=model_ids,
            status__in=Reservation.HOLDING,
            approved_at__isnull=False,
        )
        .exclude(tier=Tier.SPOT)
        .select_related("approved_by")
        .order_by("approved_at", "pk")
    )
    for lease in leases:
        approver = lease.approved_by
        found[lease.gpu_model_id].append(
            BeyondCeiling(
                lease_id=lease.pk,
                gpu_count=lease.gpu_count,
                approver=(approver.get_full_name() or approver.get_username()) if approver else "",
                approved_at=lease.approved_at,
            )
        )
    return {model_id: tuple(rows) for model_id, rows in found.items()}


def on_sale() -> QuerySet[Offering]:
    """Offerings that sell now: available, on an active account (loaded: its driver says
    which markets the offering can sell on, ``sells_on``)."""
    return Offering.objects.filter(is_available=True, account__is_active=True).select_related(
        "account"
    )


def sells_on(offering: Offering, market: str) -> bool:
    """Whether ``offering`` sells on ``market``: it has a price there and, for spot, its
    driver has a spot market (the registry's static table; the account must be loaded)."""
    if offering.price_per_hour(market) is None:
        return False
    return market != Market.SPOT or Capability.SPOT in capabilities(offering.account.driver)


def offerings_of(gpu_model: GpuModel | int) -> QuerySet[Offering]:
    """The offerings that sell ``gpu_model`` now (``on_sale``)."""
    return (
        on_sale()
        .filter(gpu_model=gpu_model)
        .select_related("account", "gpu_model")
        .order_by("gpus_per_instance", "on_demand_price_per_hour", "pk")
    )


def gpu_models_that_fit(gpu_model_ids: Iterable[int], *, gpu_count: int, market: str) -> set[int]:
    """Of these GPU models, those with an offering that can carry ``gpu_count`` GPUs on
    ``market`` now (``fitting_offerings`` for each), in one query."""
    by_model: dict[int, list[Offering]] = defaultdict(list)
    for offering in on_sale().filter(gpu_model_id__in=list(gpu_model_ids)):
        by_model[offering.gpu_model_id].append(offering)
    return {
        model_id
        for model_id, offerings in by_model.items()
        if fitting(offerings, gpu_count=gpu_count, market=market)
    }


def would_run(quota: Quota, n: int, *, pool_running: int, used_guaranteed: int, used: int) -> bool:
    """``runs_now`` for one ask: ``quota`` with its GPU model's pool loaded."""
    if quota.max_gpus_per_lease is not None and n > quota.max_gpus_per_lease:
        return False
    free = quota.gpu_model.pool.capacity - pool_running
    guaranteed = used_guaranteed + n <= quota.guaranteed
    burst = used + n <= quota.ceiling and n <= free
    return guaranteed or burst


def _gpus(leases: QuerySet[Reservation]) -> Coalesce:
    """The GPUs of ``leases`` (correlated to a quota's GPU model), 0 for none."""
    return Coalesce(
        Subquery(
            leases.values("gpu_model").annotate(n=Sum("gpu_count")).values("n"),
            output_field=IntegerField(),
        ),
        0,
    )


def quotas_in_use(quotas: QuerySet[Quota]) -> QuerySet[Quota]:
    """Quotas with their GPU model and pool, annotated with ``quota_status``'s running
    figures: ``pool_running`` (the pool's running GPUs, Q4), ``used_guaranteed`` and
    ``used`` (the project's, Ug and U). Sums over the live leases only, through the
    (GPU model, status) and (project, status) indexes: one query."""
    holding = Reservation.objects.filter(
        gpu_model=OuterRef("gpu_model"), status__in=Reservation.HOLDING
    ).order_by()
    own = holding.filter(project=OuterRef("project"))
    return quotas.select_related("gpu_model__pool").annotate(
        pool_running=_gpus(holding),
        used_guaranteed=_gpus(own.filter(tier=Tier.GUARANTEED)),
        used=_gpus(own.exclude(tier=Tier.SPOT)),
    )


def fitting(offerings: Iterable[Offering], *, gpu_count: int, market: str) -> list[Offering]:
    """Of ``offerings``, those that can carry exactly ``gpu_count`` GPUs, cheapest first.

    An offering fits when its GPUs per instance divide the count and it sells on the
    market (``sells_on``). Ties go to fewer, larger instances.
    """
    return sorted(
        (
            offering
            for offering in offerings
            if gpu_count % offering.gpus_per_instance == 0 and sells_on(offering, market)
        ),
        key=lambda o: (o.rate_per_gpu_hour(market), -o.gpus_per_instance, o.instance_type),
    )


def fitting_offerings(*, gpu_model: GpuModel | int, gpu_count: int, market: str) -> list[Offering]:
    """The offerings selling ``gpu_model`` that can carry ``gpu_count`` GPUs, cheapest
    first (``fitting``)."""
    return fitting(offerings_of(gpu_model), gpu_count=gpu_count, market=market)


def images_for(*, project: Project | int, offering: Offering | None = None) -> QuerySet[Image]:
    """Images a lease of ``project`` may use: active, available site images and the
    project's own (saved ones appear once the cloud says they are available)."""
    images = Image.objects.filter(is_active=True, state=Image.State.AVAILABLE).filter(
        Q(project__isnull=True) | Q(project=project)
    )
    if offering is not None:
        images = images.filter(account_id=offering.account_id, region=offering.region)
    return images.select_related("project").order_by("name", "pk")


def image_catalog(user) -> QuerySet[Image]:
    """The image catalog a user sees: site images and their projects' images, in every
    state (a project image being saved shows as pending), site images first."""
    images = Image.objects.filter(is_active=True)
    if not access.sees_everything(user):
        images = images.filter(Q(project__isnull=True) | Q(project_id__in=list(access.roles(user))))
    return images.select_related("account", "project", "created_by").order_by(
        F("project__name").asc(nulls_first=True), "name", "region", "pk"
    )


def requestable_gpu_models(project: Project | int) -> QuerySet[GpuModel]:
    """GPU models the project has a quota for and that some offering sells."""
    return (
        GpuModel.objects.filter(
            quotas__project=project, quotas__ceiling__gt=0, offerings__is_available=True
        )
        .distinct()
        .order_by("name")
    )


def leases(queryset: QuerySet[Reservation] | None = None) -> QuerySet[Reservation]:
    """Leases with everything a list shows, in a fixed number of queries."""
    base = queryset if queryset is not None else Reservation.objects.all()
    return base.select_related(
        "project", "requester", "gpu_model", "offering", "image", "approved_by", "data_volume"
    ).prefetch_related("instances")


# Leases not over yet: waiting, booked, starting, running, stopped or ending.
IN_PROGRESS = tuple(
    status for status in Reservation.Status.values if status not in Reservation.FINAL
)


def lease_rows(queryset: QuerySet[Reservation]) -> QuerySet[Reservation]:
    """Leases with what a list of them shows (project, GPU model, instances for the
    address), in two queries: joined to nothing else, so a page read through the
    newest-first indexes stays a walk of the rows it shows."""
    return queryset.select_related("project", "gpu_model").prefetch_related("instances")


def projects_overview(projects: QuerySet[Project]) -> QuerySet[Project]:
    """Projects annotated with ``members_count``, ``live_leases`` and ``running_gpus``, in one
    query (subqueries, so the counts do not multiply each other). The projects list reads
    this written out (``rental.project_rows``), held to it by a test."""
    holding = Reservation.objects.filter(project=OuterRef("pk"), status__in=Reservation.HOLDING)
    # Each count a subquery per project row: no join multiplies the rows the others read.
    members = Membership.objects.filter(project=OuterRef("pk")).order_by()
    return projects.annotate(
        members_count=Coalesce(
            Subquery(
                members.values("project").annotate(n=Count("pk")).values("n"),
                output_field=IntegerField(),
            ),
            0,
        ),
        live_leases=Coalesce(
            Subquery(
                holding.values("project").annotate(n=Count("pk")).values("n"),
                output_field=IntegerField(),
            ),
            0,
        ),
        running_gpus=Coalesce(
            Subquery(
                holding.values("project").annotate(n=Sum("gpu_count")).values("n"),
                output_field=IntegerField(),
            ),
            0,
        ),
    )


@dataclass(frozen=True)
class QuotaUse:
    """One row of a project's quota page: the quota and its standing in the pool."""

    quota: Quota
    status: QuotaStatus


def project_quota_use(project: Project | int) -> list[QuotaUse]:
    """Every quota of a project with its standing, in one query (``quotas_in_use``; one
    more when a quota runs above its ceiling, to say who approved it). The project's page
    reads this written out (``rental.project_reads.quota_use``), held to it by a test."""
    quotas = list(
        quotas_in_use(Quota.objects.filter(project=project)).order_by("gpu_model__name", "pk")
    )
    capacities = {
        quota.gpu_model_id: pool.capacity if (pool := pool_of(quota.gpu_model)) else 0
        for quota in quotas
    }
    return quota_uses(project, quotas, capacities)


def quota_uses(
    project: Project | int, quotas: list[Quota], capacities: dict[int, int]
) -> list[QuotaUse]:
    """The standing of ``quotas``, annotated as ``quotas_in_use`` does, in their pools of
    ``capacities`` GPUs (by model); who approved the leases above a ceiling is read only
    when one runs above it (one query)."""
    above = [quota.gpu_model_id for quota in quotas if quota.used > quota.ceiling]
    approvals = approved_beyond(project, above) if above else {}
    return [
        QuotaUse(
            quota=quota,
            status=QuotaStatus(
                guaranteed=quota.guaranteed,
                ceiling=quota.ceiling,
                used_guaranteed=quota.used_guaranteed,
                used=quota.used,
                pool_capacity=capacities[quota.gpu_model_id],
                pool_running=quota.pool_running,
                approved_beyond=approvals.get(quota.gpu_model_id, ()),
            ),
        )
        for quota in quotas
    ]


def pool_of(gpu_model: GpuModel) -> Pool | None:
    """The model's pool, loaded with it (None when it has none)."""
    return getattr(gpu_model, "pool", None)


def live_instances(account_id: int | None = None) -> QuerySet[Instance]:
    instances = Instance.objects.filter(state__in=Instance.LIVE)
    if account_id is not None:
        instances = instances.filter(account_id=account_id)
    return instances


def usage_records(queryset: QuerySet[UsageRecord] | None = None) -> QuerySet[UsageRecord]:
    """Usage runs with what a list shows, in one query, each with ``duration``: how long
    it ran, to its end or, while open, to now (measured time, before billing's minimum)."""
    base = queryset if queryset is not None else UsageRecord.objects.all()
    return base.select_related("project", "gpu_model", "instance").annotate(
        duration=ExpressionWrapper(
            Coalesce(F("end"), Now()) - F("start"), output_field=DurationField()
        )
    )


def usage_for_period(
    *, start: datetime, end: datetime, project_ids: Iterable[int] | None = None
) -> QuerySet[UsageRecord]:
    """Usage records that may bill in [start, end): they began before its end and had not
    ended before its start (a run ending exactly at ``start`` may owe a top-up there)."""
    records = UsageRecord.objects.filter(start__lt=end).filter(
        Q(end__isnull=True) | Q(end__gte=start)
    )
    if project_ids is not None:
        records = records.filter(project_id__in=list(project_ids))
    return records.select_related("gpu_model").order_by("start", "id")


def rate_for(offering: Offering, market: str) -> Decimal:
    rate = offering.rate_per_gpu_hour(market)
    if rate is None:
        raise ValueError(f"{offering} has no {Market(market).label} price")
    return rate


def pending_approvals(user) -> QuerySet[Reservation]:
    """The requests waiting for this manager's decision (admins: every project's), read
    through the (status, submitted_at, id) index: oldest first, only the waiting ones."""
    waiting = Reservation.objects.filter(status=Reservation.Status.PENDING_APPROVAL)
    if access.is_admin(user):
        return waiting
    return waiting.filter(project_id__in=access.managed_project_ids(user))


def waiting_rows(queryset: QuerySet[Reservation]) -> QuerySet[Reservation]:
    """Requests with what the approvals list and panel show of them (project, requester,
    GPU model), in one query."""
    return queryset.select_related("project", "requester", "gpu_model")


@dataclass(frozen=True)
class PoolOverview:
    """A pool at a glance (Q1): capacity, commitments, guarantees, and what holds GPUs."""

    pool: Pool
    guaranteed_total: int  # Σ G
    running_by_tier: dict[str, int]
    under_notice: int
    held_for_reservations: int  # bookings starting now whose GPUs are being freed
    scheduled: int  # bookings not started yet (GPUs, all of them)
    queued: int  # GPUs asked by queued leases

    @property
    def running(self) -> int:
        return sum(self.running_by_tier.values())

    @property
    def below_guarantees(self) -> bool:
        """C below Σ G (Q1)."""
        return self.pool.capacity < self.guaranteed_total

    @property
    def degraded(self) -> bool:
        """Below its guarantees, or marked degraded by an admin."""
        return self.below_guarantees or bool(self.pool.degraded_reason)


def pool_overview(pool: Pool) -> PoolOverview:
    """Two aggregate queries: the quotas' Σ G and the leases' GPUs by what holds them."""
    return pool_overviews([pool])[0]


def pool_overviews(pools: Iterable[Pool]) -> list[PoolOverview]:
    """``pool_overview`` of many pools in the same two queries, whatever their number."""
    pools = list(pools)
    model_ids = [pool.gpu_model_id for pool in pools]
    status = Reservation.Status
    holding = Q(status__in=Reservation.HOLDING)
    # Every figure counts live or waiting leases: the ended history is never read.
    per_model = Reservation.objects.filter(
        gpu_model_id__in=model_ids,
        status__in=(*Reservation.HOLDING, status.SCHEDULED, status.QUEUED),
    ).values("gpu_model_id")
    rows = per_model.annotate(
        guaranteed=Sum("gpu_count", filter=holding & Q(tier=Tier.GUARANTEED)),
        burst=Sum("gpu_count", filter=holding & Q(tier=Tier.BURST)),
        reserved=Sum("gpu_count", filter=holding & Q(tier=Tier.RESERVED)),
        spot=Sum("gpu_count", filter=holding & Q(tier=Tier.SPOT)),
        notice=Sum(
            "gpu_count",
            filter=Q(status__in=(status.PROVISIONING, status.ACTIVE), notice_due_at__isnull=False),
        ),
        held=Sum(
            "gpu_count",
            filter=Q(status__in=(status.SCHEDULED, status.QUEUED), reclaim_due_at__isnull=False),
        ),
        scheduled=Sum("gpu_count", filter=Q(status=status.SCHEDULED)),
        queued=Sum("gpu_count", filter=Q(status=status.QUEUED)),
    )
    by_model = {row["gpu_model_id"]: row for row in rows.order_by()}
    totals = dict(
        Quota.objects.filter(gpu_model_id__in=model_ids)
        .values("gpu_model_id")
        .annotate(g=Sum("guaranteed"))
        .order_by()
        .values_list("gpu_model_id", "g")
    )
    overviews = []
    for pool in pools:
        row = by_model.get(pool.gpu_model_id, {})
        overviews.append(
            PoolOverview(
                pool=pool,
                guaranteed_total=totals.get(pool.gpu_model_id) or 0,
                running_by_tier={tier: row.get(tier) or 0 for tier in Tier.values},
                under_notice=row.get("notice") or 0,
                held_for_reservations=row.get("held") or 0,
                scheduled=row.get("scheduled") or 0,
                queued=row.get("queued") or 0,
            )
        )
    return overviews


def project_volumes(project: Project | int):
    """A project's data volumes (deleted ones left out) with where each is attached and
    the lease that holds it, in a fixed number of queries."""
    return volumes(
        DataVolume.objects.filter(project=project).exclude(state=DataVolume.State.DELETED)
    ).order_by("name", "pk")


def volumes(queryset):
    """Data volumes with their project, where each is attached and the lease that holds
    it (``holding_leases``), in a fixed number of queries."""
    holding = Reservation.objects.exclude(status__in=Reservation.FINAL).order_by("pk")
    return queryset.select_related(
        "project", "attached_instance__reservation", "account", "created_by"
    ).prefetch_related(Prefetch("leases", queryset=holding, to_attr="holding_leases"))


def available_volumes(project: Project | int):
    """The project's volumes a new lease may pick: available and held by no live lease."""
    held = Reservation.objects.exclude(status__in=Reservation.FINAL).filter(
        data_volume__isnull=False
    )
    return (
        DataVolume.objects.filter(project=project, state=DataVolume.State.AVAILABLE)
        .exclude(pk__in=held.values("data_volume_id"))
        .order_by("name", "pk")
    )


@dataclass(frozen=True)
class Unbilled:
    """Cloud time after billing stopped in a pool since a moment: GPU-seconds, the
    instances that ran it, and the longest of them (seconds after its billing stopped)."""

    gpu_seconds: int
    instances: int
    longest_seconds: int

    @property
    def gpu_hours(self) -> Decimal:
        return (Decimal(self.gpu_seconds) / 3600).quantize(Decimal("0.01"))


def unbilled_cloud_time(gpu_model_id: int, *, since: datetime) -> Unbilled:
    """One aggregate query, whatever the number of instances."""
    found = UnbilledCloudTime.objects.filter(gpu_model_id=gpu_model_id, end__gt=since).aggregate(
        total=Sum("gpu_seconds"),
        instances=Count("id"),
        longest=Max(
            ExpressionWrapper(F("gpu_seconds") / F("gpu_count"), output_field=IntegerField())
        ),
    )
    return Unbilled(
        gpu_seconds=found["total"] or 0,
        instances=found["instances"] or 0,
        longest_seconds=found["longest"] or 0,
    )
