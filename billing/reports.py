"""Reports that save money: a 12-month trend, idle waste, and advice on committed capacity
and on renting versus buying, each with the figures it was computed from.

Pure functions take plain numbers (``best_commitment``, ``rent_or_buy``) so the rules are
tested with any figures; the readers around them pull rows from rental's selectors.
"""

from bisect import bisect_right
from collections import defaultdict
from collections.abc import Callable
from dataclasses import dataclass, field
from datetime import date, datetime, timedelta
from decimal import Decimal

from django.conf import settings
from django.core.cache import cache
from django.db.models import Count, Exists, OuterRef, Sum
from django.utils import timezone
from django.utils.translation import gettext as _

from billing import drafts
from billing.models import Statement
from billing.money import SECONDS_PER_HOUR, quantize, to_billing_currency
from billing.own_hardware import OwnedFigures, owned_figures
from billing.periods import period_start, whole_seconds
from portal.models import Project
from rental import billing_reads
from rental.catalog.placement_rules import OWN_DRIVER
from rental.models import GpuModel, Offering, Pool, Quota
from rental.selectors import usage_for_period

ADVICE_DAYS = 90
HOURS_PER_MONTH = Decimal(730)


@dataclass
class TrendMonth:
    period: datetime
    closed: bool
    per_model: dict[str, Decimal] = field(default_factory=dict)

    @property
    def total(self) -> Decimal:
        return sum(self.per_model.values(), Decimal("0.00"))


def _months_back(now: datetime, count: int) -> list[datetime]:
    months = [period_start(now)]
    while len(months) < count:
        months.append(period_start(months[-1] - timedelta(days=1)))
    return list(reversed(months))


def other_label() -> str:
    """The trend's column for lines of no GPU model: storage, adjustments and credits."""
    return _("Storage and corrections")


def first_month(
    *,
    project_id: int,
    created: datetime | None,
    first_line: date | None,
    since: datetime,
    now: datetime,
) -> datetime:
    """The first month the project existed or used anything in, from ``since`` on: the
    earliest of its creation (``created``), its first usage run and its first statement
    with a line (``first_line``; a project's history may be older than its row, when it
    was imported). Its first run is read (one query) only when it could move the answer:
    when neither of the others reaches back to ``since``."""
    candidates = [period_start(created or now)]
    if first_line is not None:
        candidates.append(period_start(first_line))
    if min(candidates) > period_start(since):
        first_run = (
            usage_for_period(start=since, end=now, project_ids=[project_id])
            .values_list("start", flat=True)
            .first()
        )
        if first_run is not None:
            candidates.append(period_start(first_run))
    return max(min(candidates), period_start(since))


def gpu_model_names() -> dict[int, str]:
    """Every GPU model's name by id, in one query."""
    return dict(GpuModel.objects.values_list("pk", "name"))


def project_gpu_models(project_id: int) -> tuple[dict[int, str], list[int]]:
    """Every GPU model's name by id, and the ids of those the project has a quota for (its
    pools' advice), in one query."""
    names: dict[int, str] = {}
    quota_models: list[int] = []
    for model_id, name, has_quota in GpuModel.objects.annotate(
        has_quota=Exists(Quota.objects.filter(project_id=project_id, gpu_model_id=OuterRef("pk")))
    ).values_list("pk", "name", "has_quota"):
        names[model_id] = name
        if has_quota:
            quota_models.append(model_id)
    return names, quota_models


def trend(
    *,
    project_id: int,
    now: datetime,
    months: int = 12,
    created: datetime | None = None,
    names: dict[int, str] | None = None,
) -> list[TrendMonth]:
    """The project's charges per GPU model over the last ``months`` months, from the
    project's first month on (``first_month``): closed months from their stored lines
    (one query for every statement of the window, with or without lines), the open month
    from its kept draft. ``created`` (the project's creation) and ``names`` (the GPU
    models' names) are read when not given."""
    periods = _months_back(now, months)
    if created is None:
        created = Project.objects.filter(pk=project_id).values_list("created_at", flat=True).first()
    other = other_label()
    # Per statement and GPU model: its status, its lines' sum and count (a statement
    # without lines comes once, with no name and no lines).
    rows = list(
        Statement.objects.filter(project_id=project_id, period__gte=periods[0].date())
        .values("period", "status", "lines__gpu_model__name")
        .annotate(amount=Sum("lines__amount"), count=Count("lines"))
        .order_by()
    )
    first_line = min((row["period"] for row in rows if row["count"]), default=None)
    first = first_month(
        project_id=project_id, created=created, first_line=first_line, since=periods[0], now=now
    )
    periods = [period for period in periods if period >= first]
    result = {p.date(): TrendMonth(period=p, closed=False) for p in periods}
    for row in rows:
        month = result.get(row["period"])
        if month is None or row["status"] == Statement.Status.DRAFT:
            continue
        month.closed = True
        if row["count"]:
            month.per_model[row["lines__gpu_model__name"] or other] = row["amount"]
    current = result[periods[-1].date()]
    if not current.closed:
        if names is None:
            names = gpu_model_names()
        draft = drafts.kept_or_computed(
            start=current.period, now=now, project_ids=[project_id]
        ).for_project(project_id)
        per_model: dict[str, Decimal] = defaultdict(lambda: Decimal("0.00"))
        for line in draft:
            per_model[names.get(line.gpu_model_id, other)] += line.amount
        current.per_model = dict(per_model)
    return [result[p.date()] for p in periods]


@dataclass(frozen=True)
class IdleWaste:
    gpu_model: str
    samples: int
    idle_samples: int
    idle_gpu_seconds: int
    cost: Decimal

    @property
    def idle_gpu_hours(self) -> Decimal:
        return (Decimal(self.idle_gpu_seconds) / SECONDS_PER_HOUR).quantize(Decimal("0.01"))


def sample_seconds() -> int:
    """How long one agent sample stands for: the agents' interval (L6: a minute unless the
    site sets ``PORTAL_AGENT_HEARTBEAT_SECONDS``, as the demo does)."""
    return settings.PORTAL_AGENT_HEARTBEAT_SECONDS


def idle_waste(
    *,
    project_id: int,
    now: datetime,
    days: int = ADVICE_DAYS,
    names: dict[int, str] | None = None,
) -> list[IdleWaste]:
    """Paid GPU-hours whose samples were idle (L6, the site's threshold), per GPU model,
    over the last ``days``: each idle sample stands for one sampling interval (the agents'
    interval, ``sample_seconds``) of all the instance's GPUs, priced at the instance's
    captured rate. Read from the hourly rollups
    (and the recent samples not rolled up yet), so the window is not bounded by how long
    raw samples are kept. ``names``: the GPU models' names, read when not given."""
    start = now - timedelta(days=days)
    interval = sample_seconds()
    if names is None:
        names = gpu_model_names()
    samples: dict[int, int] = defaultdict(int)
    idle: dict[int, int] = defaultdict(int)
    seconds: dict[int, int] = defaultdict(int)
    exact: dict[int, Decimal] = defaultdict(Decimal)
    for hour in billing_reads.idle_hours(start=start, end=now, project_ids=[project_id]):
        model = hour.gpu_model_id
        samples[model] += hour.samples
        idle[model] += hour.idle_samples
        seconds[model] += interval * hour.gpu_count * hour.idle_samples
        exact[model] += to_billing_currency(
            Decimal(interval * hour.idle_samples) * hour.rate_per_hour / SECONDS_PER_HOUR,
            hour.exchange_rate,
        )
    return [
        IdleWaste(
            gpu_model=names.get(model, "—"),
            samples=samples[model],
            idle_samples=idle[model],
            idle_gpu_seconds=seconds[model],
            cost=quantize(exact[model]),
        )
        for model in sorted(samples, key=lambda m: names.get(m, ""))
    ]


@dataclass(frozen=True)
class CommitmentOption:
    committed: int  # K
    fixed: Decimal
    metered: Decimal

    @property
    def total(self) -> Decimal:
        return self.fixed + self.metered


def best_commitment(
    *,
    seconds_at_level: dict[int, int],
    span_seconds: int,
    price_per_gpu_month: Decimal,
    metered_rate: Decimal,
    capacity: int,
) -> tuple[int, list[CommitmentOption]]:
    """The committed GPUs K that would have cost least over a span with this load profile,
    and the options to show beside it.

    ``seconds_at_level`` maps a number of GPUs running at once to how many seconds of the
    span ran at that level. Committing K costs K × the monthly price for the span (per
    second of a 730-hour month); GPUs above K are metered at ``metered_rate``. Ties go to
    the smaller K. K runs from 0 to the most GPUs that ran at once, at most ``capacity``:
    a K above that adds committed cost and saves nothing.

    The cost is linear in K between two levels that ran, so the cheapest K is 0, the top
    or one of those levels: only they are priced to find it, whatever the pool's size.
    The options shown are every K up to ``SHOWN_OPTIONS`` rows, else a sample of the
    range with the best K and its neighbours (``shown_commitments``)."""
    span_months = Decimal(span_seconds) / (HOURS_PER_MONTH * SECONDS_PER_HOUR)
    ran = {level: seconds for level, seconds in seconds_at_level.items() if seconds}
    top = min(capacity, max(ran, default=0))
    above = _gpu_seconds_above(ran)

    def fixed(k: int) -> Decimal:
        return price_per_gpu_month * k * span_months

    def metered(k: int) -> Decimal:
        return Decimal(above(k)) * metered_rate / SECONDS_PER_HOUR

    candidates = {0, top} | {level for level in ran if 0 <= level <= top}
    best = min(candidates, key=lambda k: (fixed(k) + metered(k), k))
    options = [
        CommitmentOption(committed=k, fixed=quantize(fixed(k)), metered=quantize(metered(k)))
        for k in shown_commitments(best=best, top=top)
    ]
    return best, options


SHOWN_OPTIONS = 21


def shown_commitments(*, best: int, top: int, rows: int = SHOWN_OPTIONS) -> list[int]:
    """Every K from 0 to ``top`` when they fit in ``rows``; else evenly spaced K from 0 to
    the top, plus the best K and the two on each side of it, so a pool of thousands of
    GPUs gets a table a person reads rather than one row per GPU."""
    if top < rows:
        return list(range(top + 1))
    near = set(range(max(best - 2, 0), min(best + 2, top) + 1))
    step = -(-top // (rows - len(near) - 1))  # ceiling: the spaced ones leave room for near
    return sorted(set(range(0, top, step)) | {top} | near)


def _gpu_seconds_above(seconds_at_level: dict[int, int]) -> Callable[[int], int]:
    """A function K -> the GPU-seconds run above K: the sum over levels L > K of
    (L − K) × seconds at L, from suffix sums over the sorted levels (one bisect per K)."""
    levels = sorted(seconds_at_level)
    seconds_from = [0] * (len(levels) + 1)  # seconds at levels[i:]
    gpu_seconds_from = [0] * (len(levels) + 1)  # level × seconds at levels[i:]
    for i in range(len(levels) - 1, -1, -1):
        seconds = seconds_at_level[levels[i]]
        seconds_from[i] = seconds_from[i + 1] + seconds
        gpu_seconds_from[i] = gpu_seconds_from[i + 1] + levels[i] * seconds

    def above(k: int) -> int:
        i = bisect_right(levels, k)
        return gpu_seconds_from[i] - k * seconds_from[i]

    return above


def load_profile(
    intervals: list[tuple[datetime, datetime | None, int]], *, start: datetime, end: datetime
) -> dict[int, int]:
    """Seconds spent at each number of GPUs running at once in [start, end) (a sweep)."""
    events: dict[datetime, int] = defaultdict(int)
    for run_start, run_end, gpus in intervals:
        lo, hi = max(run_start, start), min(run_end or end, end)
        if hi > lo:
            events[lo] += gpus
            events[hi] -= gpus
    profile: dict[int, int] = defaultdict(int)
    level, previous = 0, start
    for moment in sorted(events):
        profile[level] += whole_seconds(moment - previous)
        level += events[moment]
        previous = moment
    profile[level] += whole_seconds(end - previous)
    return {lvl: secs for lvl, secs in profile.items() if secs}


@dataclass(frozen=True)
class CommitmentAdvice:
    gpu_model_id: int
    gpu_model: str
    current: int
    best: int
    options: list[CommitmentOption]
    price_per_gpu_month: Decimal
    metered_rate: Decimal
    average_gpus: Decimal
    days: int
    as_of: datetime  # the end of the ``days`` it was computed over
    own: OwnedFigures | None = None  # the pool's own servers' figures, when it has some


def commitment_advice(
    *, gpu_model_ids: list[int], now: datetime, days: int = ADVICE_DAYS
) -> list[CommitmentAdvice]:
    """Per pool, the K that would have minimised cost over the last ``days`` of real usage,
    ordered by GPU model name, in two queries whatever the number of pools (their terms,
    then their usage runs of the window: every project's, so this reads the company's
    last ``days``; pages read it kept, ``kept_commitment_advice``).

    The price of a committed GPU-month is the pool's own (F / K) when it has a commitment,
    else ``PORTAL_COMMITTED_GPU_MONTH_PRICE``; the metered rate is the GPU-second-weighted
    rate of the usage actually run."""
    start = now - timedelta(days=days)
    span = whole_seconds(now - start)
    pools = {
        row["gpu_model_id"]: row
        for row in Pool.objects.filter(gpu_model_id__in=gpu_model_ids).values(
            "gpu_model_id",
            "gpu_model__name",
            "capacity",
            "committed_gpus",
            "committed_monthly_cost",
            # Sold from own servers: their figures are read for the rent-or-buy advice.
            has_own=Exists(
                Offering.objects.filter(
                    gpu_model_id=OuterRef("gpu_model_id"), account__driver=OWN_DRIVER
                )
            ),
        )
    }
    if not pools:
        return []
    owned = owned_figures() if any(row["has_own"] for row in pools.values()) else {}
    runs: dict[int, list[tuple]] = defaultdict(list)
    for model_id, *run in billing_reads.pool_usage_intervals(
        gpu_model_ids=list(pools), start=start, end=now
    ):
        runs[model_id].append(run)
    advice = []
    for model_id in sorted(pools, key=lambda m: pools[m]["gpu_model__name"]):
        pool = pools[model_id]
        rows = runs[model_id]
        profile = load_profile(
            [(s, e, n) for s, e, n, _rate, _tier, _fx in rows], start=start, end=now
        )
        gpu_seconds = sum(level * seconds for level, seconds in profile.items())
        weighted = Decimal(0)
        for s, e, n, rate, _tier, fx in rows:
            seconds = Decimal(whole_seconds(min(e or now, now) - max(s, start)) * n)
            weighted += to_billing_currency(seconds * rate, fx)
        metered_rate = (
            (weighted / gpu_seconds).quantize(Decimal("0.000001")) if gpu_seconds else Decimal(0)
        )
        if pool["committed_gpus"]:
            price = (pool["committed_monthly_cost"] / pool["committed_gpus"]).quantize(
                Decimal("0.01")
            )
        else:
            price = Decimal(settings.PORTAL_COMMITTED_GPU_MONTH_PRICE)
        best, options = best_commitment(
            seconds_at_level=profile,
            span_seconds=span,
            price_per_gpu_month=price,
            metered_rate=metered_rate,
            capacity=pool["capacity"],
        )
        advice.append(
            CommitmentAdvice(
                gpu_model_id=model_id,
                gpu_model=pool["gpu_model__name"],
                current=pool["committed_gpus"],
                best=best,
                options=options,
                price_per_gpu_month=price,
                metered_rate=metered_rate,
                average_gpus=(Decimal(gpu_seconds) / span).quantize(Decimal("0.01"))
                if span
                else Decimal(0),
                days=days,
                as_of=now,
                own=owned.get(model_id),
            )
        )
    return advice


# The advice is company-wide analytics over ``ADVICE_DAYS``: computing it reads every
# project's usage runs of the window (hundreds of thousands at production size), so it is
# computed every hour for every pool (``keep_commitment_advice``, a beat task) and kept in
# Django's cache, one entry per pool; a page reads its pools' entries in one cache call.
# An entry is exactly what ``commitment_advice`` gave at its ``as_of`` (the page says
# when); one older than ``ADVICE_MAX_AGE``, from the future, or missing (a cache flushed
# or down, a new pool) is computed at the page's moment and kept.
ADVICE_MAX_AGE = timedelta(hours=2)
# Part of the key: a deploy that changes what an entry holds starts from empty entries.
ADVICE_CACHE_VERSION = 2


@dataclass(frozen=True)
class KeptAdvice:
    """A pool's cache entry: its advice as of a moment (None: the GPU model has no pool)."""

    as_of: datetime
    advice: CommitmentAdvice | None


def advice_cache_key(*, gpu_model_id: int, days: int) -> str:
    return f"billing:commitment-advice:v{ADVICE_CACHE_VERSION}:{days}:{gpu_model_id}"


def _keep(*, gpu_model_ids: list[int], now: datetime, days: int) -> dict[int, KeptAdvice]:
    """Compute the pools' advice at ``now`` and keep it (one cache call)."""
    computed = {
        item.gpu_model_id: item
        for item in commitment_advice(gpu_model_ids=gpu_model_ids, now=now, days=days)
    }
    kept = {
        model_id: KeptAdvice(as_of=now, advice=computed.get(model_id)) for model_id in gpu_model_ids
    }
    cache.set_many(
        {advice_cache_key(gpu_model_id=m, days=days): entry for m, entry in kept.items()},
        timeout=whole_seconds(ADVICE_MAX_AGE),
    )
    return kept


def keep_commitment_advice(*, now: datetime | None = None, days: int = ADVICE_DAYS) -> int:
    """Compute every pool's advice as of ``now`` and keep it in the cache (the hourly beat
    task). Returns the number of pools."""
    now = now or timezone.now()
    model_ids = list(Pool.objects.values_list("gpu_model_id", flat=True))
    return len(_keep(gpu_model_ids=model_ids, now=now, days=days))


def kept_commitment_advice(
    *, gpu_model_ids: list[int], now: datetime, days: int = ADVICE_DAYS
) -> list[CommitmentAdvice]:
    """The pools' advice as kept in the cache, each as of its own ``as_of`` (at most
    ``ADVICE_MAX_AGE`` before ``now``), ordered by GPU model name: no query when every
    entry is fresh; the missing or stale ones computed at ``now`` (``commitment_advice``)
    and kept."""
    keys = {
        model_id: advice_cache_key(gpu_model_id=model_id, days=days) for model_id in gpu_model_ids
    }
    found = cache.get_many(list(keys.values())) if keys else {}
    kept: dict[int, KeptAdvice] = {}
    for model_id, key in keys.items():
        entry = found.get(key)
        if isinstance(entry, KeptAdvice) and now - ADVICE_MAX_AGE <= entry.as_of <= now:
            kept[model_id] = entry
    missing = [model_id for model_id in keys if model_id not in kept]
    if missing:
        kept.update(_keep(gpu_model_ids=missing, now=now, days=days))
    return sorted(
        (entry.advice for entry in kept.values() if entry.advice is not None),
        key=lambda item: item.gpu_model,
    )


@dataclass(frozen=True)
class RentOrBuy:
    gpus: Decimal
    rent_per_month: Decimal
    buy_per_month: Decimal
    card_price: Decimal
    lifetime_months: int
    power_per_gpu_month: Decimal
    hosting_per_gpu_month: Decimal
    # The pool's own servers, when it has some: owning is costed from them (their
    # amortisation and power), renting from the cheapest cloud offering of the model.
    own: OwnedFigures | None = None

    @property
    def cheaper(self) -> str:
        return "buy" if self.buy_per_month < self.rent_per_month else "rent"


def rent_or_buy(
    *,
    steady_gpus: Decimal,
    rate: Decimal,
    card_price: Decimal,
    lifetime_months: int,
    power_per_gpu_month: Decimal,
    hosting_per_gpu_month: Decimal,
) -> RentOrBuy:
    """A steady load of ``steady_gpus`` GPUs: renting at ``rate`` per GPU-hour for a
    730-hour month, against buying cards written off over their lifetime plus power and
    hosting per GPU-month."""
    rent = quantize(steady_gpus * HOURS_PER_MONTH * rate)
    buy = quantize(
        steady_gpus * (card_price / lifetime_months + power_per_gpu_month + hosting_per_gpu_month)
    )
    return RentOrBuy(
        gpus=steady_gpus,
        rent_per_month=rent,
        buy_per_month=buy,
        card_price=card_price,
        lifetime_months=lifetime_months,
        power_per_gpu_month=power_per_gpu_month,
        hosting_per_gpu_month=hosting_per_gpu_month,
    )


def rent_or_buy_own(advice: CommitmentAdvice, own: OwnedFigures) -> RentOrBuy:
    """Rent or buy where the pool has own servers: owning costs their amortisation and
    power per GPU-month (730 hours of power at their price), renting the cheapest cloud
    offering's rate (the metered rate when the model has no cloud offering)."""
    power_month = quantize(own.power_per_gpu_hour * HOURS_PER_MONTH)
    rate = own.cloud_rate if own.cloud_rate is not None else advice.metered_rate
    return RentOrBuy(
        gpus=advice.average_gpus,
        rent_per_month=quantize(advice.average_gpus * HOURS_PER_MONTH * rate),
        buy_per_month=quantize(
            advice.average_gpus
            * (own.amortisation_per_gpu_month + own.power_per_gpu_hour * HOURS_PER_MONTH)
        ),
        card_price=own.amortisation_per_gpu_month,
        lifetime_months=1,
        power_per_gpu_month=power_month,
        hosting_per_gpu_month=Decimal("0.00"),
        own=own,
    )


def rent_or_buy_all(advice: list[CommitmentAdvice]) -> list[tuple[CommitmentAdvice, RentOrBuy]]:
    """Each pool's advice with its rent-or-buy: from its own servers where it has some
    (read with the advice, so kept with it), else from the site's figures for a card
    (``rent_or_buy_for``). No query."""
    return [
        (item, rent_or_buy_own(item, item.own) if item.own else rent_or_buy_for(item))
        for item in advice
    ]


def rent_or_buy_for(advice: CommitmentAdvice) -> RentOrBuy:
    return rent_or_buy(
        steady_gpus=advice.average_gpus,
        rate=advice.metered_rate,
        card_price=Decimal(settings.PORTAL_BUY_CARD_PRICE),
        lifetime_months=settings.PORTAL_BUY_LIFETIME_MONTHS,
        power_per_gpu_month=Decimal(settings.PORTAL_BUY_POWER_PER_GPU_MONTH),
        hosting_per_gpu_month=Decimal(settings.PORTAL_BUY_HOSTING_PER_GPU_MONTH),
    )
