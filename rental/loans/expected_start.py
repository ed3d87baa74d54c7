"""Expected start of waiting leases: a pool's state read once (two queries), played
forward by ``expected_start_rules``, and said in words. The lease page, the lease list,
the request form and the API read it here; a list reads each pool once
(``ExpectedStarts``), however many of its leases it shows."""

import time
from collections.abc import Callable
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from decimal import Decimal

from django.conf import settings
from django.core.cache import cache
from django.db.models import (
    BooleanField,
    ExpressionWrapper,
    F,
    FilteredRelation,
    FloatField,
    Func,
    Q,
    Subquery,
    Sum,
)
from django.utils import timezone
from django.utils.translation import gettext as _

from rental.loans import fair_share
from rental.loans.admission_checks import is_held
from rental.loans.expected_start_rules import (
    APPROVAL,
    BUSY,
    CEILING,
    HELD,
    HORIZON_DAYS,
    PRODUCTION,
    TOO_BIG,
    UNKNOWN,
    Expected,
    Picture,
    expected_start_of,
    expected_starts,
)
from rental.loans.expected_start_state import Lease, Quota
from rental.loans.queue_rules import Waiting, usage_per_share
from rental.models import Pool, Reservation
from rental.models import Quota as QuotaRow

Status = Reservation.Status

# What the play starts from: leases holding GPUs (a lease being terminated counts as
# gone: the cloud confirms it within a minute or so), claiming them, booked, queued; and
# those waiting for a manager, read for their project's quota only.
PLAYED = (Status.PROVISIONING, Status.ACTIVE, Status.QUEUED, Status.SCHEDULED)
READ = (*PLAYED, Status.PENDING_APPROVAL)
# Its times, read as seconds since 1970 (``Epoch``).
TIMES = ("start", "end", "notice_due_at", "reclaim_due_at", "submitted_at")
COLUMNS = (
    "pk",
    "project_id",
    "gpu_count",
    "tier",
    "market",
    "priority",
    "start_epoch",
    "end_epoch",
    "notice_due_at_epoch",
    "reclaim_due_at_epoch",
    "is_reservation",
    "approved",
    "status",
    "status_code",
    "requeue_on_preemption",
    "submitted_at_epoch",
    "quota_guaranteed",
    "quota_ceiling",
    "quota_weight",
    "guaranteed_total",
    "pool_capacity",
    "pool_fair_share",
)


def _rows(gpu_model_id: int, *, most: int | None) -> list[dict]:
    """The pool's live leases, each with its project's quota, the pool's Σ G, C and
    fair-share flag: one query; at most ``most`` + 1 of them (None: all)."""
    quotas = QuotaRow.objects.filter(gpu_model_id=gpu_model_id).order_by()
    pool = Pool.objects.filter(gpu_model_id=gpu_model_id)
    rows = (
        Reservation.objects.filter(gpu_model_id=gpu_model_id, status__in=READ)
        .alias(
            quota=FilteredRelation(
                "project__quotas", condition=Q(project__quotas__gpu_model_id=gpu_model_id)
            )
        )
        .annotate(
            quota_guaranteed=F("quota__guaranteed"),
            quota_ceiling=F("quota__ceiling"),
            quota_weight=F("quota__weight"),
            guaranteed_total=Subquery(
                quotas.values("gpu_model_id").annotate(total=Sum("guaranteed")).values("total")
            ),
            pool_capacity=Subquery(pool.values("capacity")[:1]),
            pool_fair_share=Subquery(pool.values("fair_share")[:1]),
            approved=ExpressionWrapper(Q(approved_at__isnull=False), output_field=BooleanField()),
            **{f"{name}_epoch": Epoch(name) for name in TIMES},
        )
        .order_by()
    )
    listed = rows.values_list(*COLUMNS)
    read = []
    for values in listed if most is None else listed[: most + 1]:
        row = dict(zip(COLUMNS, values, strict=True))
        for name in TIMES:
            epoch = row.pop(f"{name}_epoch")
            row[name] = None if epoch is None else datetime.fromtimestamp(epoch, tz=UTC)
        read.append(row)
    return read


class Epoch(Func):
    """A time column as seconds since 1970 (a double: exact to the microsecond for these
    dates): psycopg parses a timestamp's text at about 6 µs, a pool's 40,000 of them in a
    quarter of a second; ``datetime.fromtimestamp`` takes a twentieth of that."""

    template = "EXTRACT(EPOCH FROM %(expressions)s)::float8"
    output_field = FloatField()


def read_picture(
    gpu_model_id: int,
    *,
    now: datetime,
    pool: Pool | None = None,
    asking: tuple[int, Quota] | None = None,
    bounded: bool = True,
) -> Picture | None:
    """The pool's live leases with their projects' quotas, in one query (a fair pool: two
    more, the pool and its projects' decayed usage, as the queue reads it). ``asking``:
    a project and its quota that may have no lease in the pool yet (a request being
    written). None without a pool. ``bounded`` (a page's read): None, too, for a pool of
    more than PORTAL_EXPECTED_START_MAX_LEASES live leases, which only the beat plays."""
    most = settings.PORTAL_EXPECTED_START_MAX_LEASES if bounded else None
    read = _rows(gpu_model_id, most=most)
    if not read and pool is None:
        return None
    if most is not None and len(read) > most:
        return None  # too many live leases to play within a page's time: the beat's
    quotas = {
        row["project_id"]: Quota(row["quota_guaranteed"], row["quota_ceiling"], row["quota_weight"])
        for row in read
        if row["quota_guaranteed"] is not None
    }
    if asking is not None:
        quotas.setdefault(*asking)
    capacity = read[0]["pool_capacity"] if read else pool.capacity
    fair = read[0]["pool_fair_share"] if read else pool.fair_share
    total = read[0]["guaranteed_total"] if read else None
    usage: dict[int, Decimal] = {}
    if fair:
        pool = pool or Pool.objects.get(gpu_model_id=gpu_model_id)
        usage = fair_usage(pool, quotas, {row["project_id"] for row in read} | set(quotas), now=now)
    running, claims, scheduled, queued = [], [], [], []
    for row in read:
        lease = _lease(row, quotas, usage)
        status = row["status"]
        if status == Status.PENDING_APPROVAL:
            continue  # not played: it runs only once a manager approves it
        if status in (Status.PROVISIONING, Status.ACTIVE):
            running.append(lease)
        elif row["reclaim_due_at"] is not None:
            claims.append(lease)
        elif status == Status.SCHEDULED:
            scheduled.append(lease)
        else:
            queued.append(lease)
    return Picture(
        usage=usage,
        now=now,
        capacity=capacity,
        notice=timedelta(seconds=settings.PORTAL_PREEMPTION_NOTICE_SECONDS),
        quotas=quotas,
        guaranteed_total=total,
        running=running,
        claims=claims,
        scheduled=scheduled,
        queued=queued,
    )


def fair_usage(
    pool: Pool, quotas: dict[int, Quota], project_ids: set[int], *, now: datetime
) -> dict[int, Decimal]:
    """A fair pool's figure per project (as ``queue.queue_in_order`` computes it); held
    as it is now while the pool is played: usage decays over days, the play's hours
    change it little. Empty for a pool without fair share."""
    if not getattr(pool, "fair_share", False) or not project_ids:
        return {}
    seconds = fair_share.decayed_gpu_seconds(pool, project_ids, now=now)
    return {
        pid: usage_per_share(value, guaranteed=quotas[pid].guaranteed if pid in quotas else 0)
        for pid, value in seconds.items()
    }


def _lease(row: dict, quotas: dict[int, Quota], usage: dict[int, Decimal]) -> Lease:
    return Lease(
        id=row["pk"],
        project_id=row["project_id"],
        gpus=row["gpu_count"],
        tier=row["tier"],
        market=row["market"],
        priority=row["priority"],
        start=row["start"],
        end=row["end"],
        length=row["end"] - row["start"],
        notice_due=row["notice_due_at"],
        claim_due=row["reclaim_due_at"],
        booking=row["is_reservation"],
        approved=row["approved"],
        held=is_held(row["status_code"]),
        requeue=row["requeue_on_preemption"],
        submitted_at=row["submitted_at"],
        waiting=waiting_of(
            row["pk"], row["priority"], row["submitted_at"], row["project_id"], quotas, usage
        ),
    )


def waiting_of(
    pk: int,
    priority: str,
    submitted_at: datetime,
    project_id: int,
    quotas: dict[int, Quota],
    usage: dict[int, Decimal],
) -> Waiting:
    """The lease's Q5 figures that do not move while the pool is played (its project's
    standing does, and the play fills it in at each instant)."""
    weight = quotas[project_id].weight if project_id in quotas else Decimal(1)
    return Waiting(
        id=pk,
        guaranteed_eligible=False,
        priority=priority,
        over_guarantee=0,
        weight=weight,
        submitted_at=submitted_at,
        fair_usage=usage.get(project_id),
        project_id=project_id,
    )


def time_limit() -> Callable[[], bool]:
    """Whether the plays of one request have used ``PORTAL_EXPECTED_START_SECONDS``: a
    page never waits longer on its forecasts (what was not played by then has no
    estimate)."""
    deadline = time.monotonic() + settings.PORTAL_EXPECTED_START_SECONDS
    return lambda: time.monotonic() > deadline


def _forecast_key(gpu_model_id: int) -> str:
    return f"expected-start:{gpu_model_id}"


def forecast_pools(*, now: datetime | None = None) -> dict[int, int]:
    """The beat's play of every pool with waiting leases, whatever its size and however
    long it takes, kept in the cache for the pages (a page plays a big pool no more):
    GPU model id → how many waiting leases got an estimate."""
    now = now or timezone.now()
    counted = {}
    models = (
        Reservation.objects.filter(status=Status.QUEUED)
        .order_by()
        .values_list("gpu_model_id", flat=True)
        .distinct()
    )
    for gpu_model_id in models:
        picture = read_picture(gpu_model_id, now=now, bounded=False)
        found = expected_starts(picture, out_of_time=lambda: False) if picture else {}
        cache.set(_forecast_key(gpu_model_id), found, settings.PORTAL_EXPECTED_START_FORECAST_TTL)
        counted[gpu_model_id] = len(found)
    return counted


def read_forecast(gpu_model_id: int) -> dict[int, Expected]:
    """The beat's last estimates for the pool's waiting leases ({} when it has none yet or
    they expired): a lease queued since is played live, within the page's bounds."""
    return cache.get(_forecast_key(gpu_model_id)) or {}


class ExpectedStarts:
    """Expected starts for the leases one request shows: each pool is read and played
    once, on the first lease of it asked about."""

    def __init__(self, *, now: datetime | None = None) -> None:
        self.now = now or timezone.now()
        self.pictures: dict[int, Picture | None] = {}
        self.found: dict[int, dict[int, Expected]] = {}
        self.forecasts: dict[int, dict[int, Expected]] = {}
        # One time allowance for every play this request makes.
        self.out_of_time = time_limit()

    def forecast(self, gpu_model_id: int) -> dict[int, Expected]:
        """The beat's last play of the pool (``forecast_pools``), read once a request."""
        if gpu_model_id not in self.forecasts:
            self.forecasts[gpu_model_id] = read_forecast(gpu_model_id)
        return self.forecasts[gpu_model_id]

    def picture(self, gpu_model_id: int) -> Picture | None:
        if gpu_model_id not in self.pictures:
            self.pictures[gpu_model_id] = read_picture(gpu_model_id, now=self.now)
        return self.pictures[gpu_model_id]

    def of(self, lease: Reservation) -> Expected | None:
        """A queued or pending lease's expected start; None for any other."""
        if lease.status not in (Status.QUEUED, Status.PENDING_APPROVAL):
            return None
        if lease.status == Status.QUEUED and lease.reclaim_due_at is not None:
            return Expected(lease.reclaim_due_at)
        if lease.status == Status.QUEUED:
            forecast = self.forecast(lease.gpu_model_id)
            if lease.pk in forecast:
                return forecast[lease.pk]
        picture = self.picture(lease.gpu_model_id)
        if picture is None:
            return None
        if lease.status == Status.QUEUED:
            if lease.gpu_model_id not in self.found:
                self.found[lease.gpu_model_id] = expected_starts(
                    picture, out_of_time=self.out_of_time
                )
            return self.found[lease.gpu_model_id].get(lease.pk)
        quotas = picture.quotas
        approved = Lease(
            id=lease.pk,
            project_id=lease.project_id,
            gpus=lease.gpu_count,
            tier=lease.tier,
            market=lease.market,
            priority=lease.priority,
            start=self.now,
            end=lease.end,
            length=lease.end - lease.start,
            booking=False,
            approved=True,
            submitted_at=lease.submitted_at,
            waiting=waiting_of(
                lease.pk,
                lease.priority,
                lease.submitted_at,
                lease.project_id,
                quotas,
                picture.usage,
            ),
        )
        if lease.is_reservation and lease.start > self.now:
            return Expected(None, APPROVAL, {"booking": True, "at": lease.start})
        found = expected_start_of(picture, approved, out_of_time=self.out_of_time)
        return Expected(None, APPROVAL, {"if_approved": found})


def request_expected(
    *,
    pool: Pool,
    project_id: int,
    quota: QuotaRow | None,
    gpu_count: int,
    hours: Decimal,
    priority: str,
    market: str,
    approved: bool = False,
    now: datetime | None = None,
) -> Expected:
    """The request form's "if you send this now": the request added to the pool's queue
    at ``now`` (as approved, for one that would wait for a manager). One query (the
    project's ``quota`` as the form read it)."""
    now = now or timezone.now()
    asking = (
        (project_id, Quota(quota.guaranteed, quota.ceiling, quota.weight))
        if quota is not None
        else None
    )
    picture = read_picture(pool.gpu_model_id, now=now, pool=pool, asking=asking)
    length = timedelta(seconds=int(hours * 3600))
    asked = Lease(
        id=0,
        project_id=project_id,
        gpus=gpu_count,
        tier="",
        market=market,
        priority=priority,
        start=now,
        end=now + length,
        length=length,
        approved=approved,
        submitted_at=now,
        waiting=waiting_of(0, priority, now, project_id, picture.quotas, picture.usage),
    )
    return expected_start_of(picture, asked, out_of_time=time_limit())


# --- In words --------------------------------------------------------------------------


def _at(when: datetime) -> str:
    return when.strftime("%Y-%m-%d %H:%M")


def expected_text(expected: Expected | None) -> str:
    """One sentence a person reads on a waiting lease's page, its list row and the API."""
    if expected is None:
        return ""
    if expected.reason == APPROVAL:
        if expected.figures.get("booking"):
            return _("Once a manager approves it, it is booked from %(at)s UTC.") % {
                "at": _at(expected.figures["at"])
            }
        found = expected.figures["if_approved"]
        if found.start is not None:
            return _(
                "It waits for a manager's approval; approved now, it would most likely "
                "start at about %(at)s UTC (if nothing else changes)."
            ) % {"at": _at(found.start)}
        return _("It waits for a manager's approval; approved now: %(why)s") % {
            "why": reason_text(found)
        }
    if expected.start is not None:
        return _("Expected to start at about %(at)s UTC (if nothing else changes).") % {
            "at": _at(expected.start)
        }
    return reason_text(expected)


def sent_now_text(expected: Expected, *, approval: bool = False) -> str:
    """The request form's sentence before the request is sent."""
    if expected.start is not None:
        if approval:
            return _(
                "If you send this now and a manager approves it at once, it would most "
                "likely start at about %(at)s UTC (if nothing else changes)."
            ) % {"at": _at(expected.start)}
        return _(
            "If you send this now, it would most likely start at about %(at)s UTC (if "
            "nothing else changes)."
        ) % {"at": _at(expected.start)}
    return _("If you send this now: %(why)s") % {"why": reason_text(expected)}


def reason_text(expected: Expected) -> str:
    """Why no start is in sight, in words."""
    figures = {"days": HORIZON_DAYS, **expected.figures}
    if expected.reason == TOO_BIG:
        return (
            _("No start in sight: it needs %(n)s GPUs and the pool has only %(capacity)s.")
            % figures
        )
    if expected.reason == HELD:
        return _("No start in sight while the admission check named above holds it back.") % figures
    if expected.reason == PRODUCTION:
        return (
            _(
                "No start in sight in the next %(days)s days: production leases run only "
                "within the project's guarantee (%(guaranteed)s GPUs), and no lease that holds "
                "it ends or gives it back."
            )
            % figures
        )
    if expected.reason == CEILING:
        return (
            _(
                "No start in sight in the next %(days)s days: beside the project's other "
                "leases and bookings it would pass its ceiling of %(ceiling)s GPUs; a manager "
                "must approve it."
            )
            % figures
        )
    if expected.reason == UNKNOWN:
        return _("No estimate: the pool is too busy to forecast in the time a page allows.")
    if expected.reason == BUSY:
        return (
            _(
                "No start in sight in the next %(days)s days: the pool's %(capacity)s GPUs stay "
                "taken by leases running past then, leases ahead of it in the queue and "
                "bookings (%(booked)s GPUs booked then)."
            )
            % figures
        )
    return ""


@dataclass(frozen=True)
class Shown:
    """What a page or the API shows of a waiting lease's expected start."""

    start: datetime | None
    text: str


def shown(expected: Expected | None) -> Shown:
    if expected is None:
        return Shown(None, "")
    return Shown(expected.start, expected_text(expected))
