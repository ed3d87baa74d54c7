"""A fair pool's decayed usage (Q5, fair share): each project's GPU-seconds in the pool,
each weighted by 2^(−age/half-life), read in one aggregate query.

The decay is integrated over each usage run exactly, in closed form (as
``queue_rules.decay_integral``, which the tests hold this query to): a run of n GPUs
over [s, e) counts n × h / ln 2 × (2^(−(now − e)/h) − 2^(−(now − s)/h)) GPU-seconds,
its ends clipped to the window (``queue_rules.WINDOW_HALF_LIVES`` half-lives back) and
to now. Only runs of the pool's GPU model within the window are read, all tiers and
markets: every GPU-second a project took from the pool counts.
"""

import math
from dataclasses import dataclass
from datetime import datetime, timedelta
from decimal import Decimal
from typing import Any

from django.db.models import F, FloatField, Func, Q, Sum, Value
from django.db.models.functions import Cast, Coalesce, Greatest, Least, Power

from portal.models import Project
from rental.loans.queue_rules import USAGE_PLACES, fair_share_of, usage_per_share, window_start
from rental.models import Pool, Quota, UsageRecord


class EpochSeconds(Func):
    """A datetime column as seconds since 1970 (a float), on PostgreSQL and SQLite."""

    output_field = FloatField()

    def as_postgresql(self, compiler: Any, connection: Any, **extra: Any) -> Any:
        return self.as_sql(
            compiler,
            connection,
            template="EXTRACT(EPOCH FROM %(expressions)s)::double precision",
            **extra,
        )

    def as_sqlite(self, compiler: Any, connection: Any, **extra: Any) -> Any:
        # The demo's SQLite keeps datetimes as UTC text; julianday reads it to the
        # millisecond (2440587.5 is 1970-01-01 as a Julian day).
        return self.as_sql(
            compiler,
            connection,
            template="((julianday(%(expressions)s) - 2440587.5) * 86400.0)",
            **extra,
        )


def half_life_of(pool: Pool) -> timedelta:
    return timedelta(hours=float(pool.fair_share_half_life_hours))


def decayed_gpu_seconds(pool: Pool, project_ids: set[int], *, now: datetime) -> dict[int, float]:
    """Each project's decayed GPU-seconds in ``pool`` as of ``now`` (0 for one without
    usage in the window). One query, whatever the number of runs or leases."""
    if not project_ids:
        return {}
    half_life = half_life_of(pool)
    h = half_life.total_seconds()
    since = window_start(now, half_life)
    at_now = Value(now.timestamp(), output_field=FloatField())
    per_half_life = Value(h, output_field=FloatField())

    def weight(moment: Any) -> Power:
        """2^(−(now − moment)/h): the weight of the GPU-second at ``moment``."""
        return Power(
            Value(2.0, output_field=FloatField()),
            (EpochSeconds(moment) - at_now) / per_half_life,
        )

    start = Greatest(F("start"), Value(since))
    end = Least(Coalesce(F("end"), Value(now)), Value(now))
    rows = (
        UsageRecord.objects.filter(
            Q(end__isnull=True) | Q(end__gt=since),
            gpu_model_id=pool.gpu_model_id,
            project_id__in=project_ids,
            start__lt=now,
        )
        .order_by()
        .values("project_id")
        .annotate(
            weighted=Sum(
                Cast(F("gpu_count"), FloatField()) * (weight(end) - weight(start)),
                output_field=FloatField(),
            )
        )
    )
    totals = {row["project_id"]: (row["weighted"] or 0.0) * h / math.log(2) for row in rows}
    return {project_id: max(totals.get(project_id, 0.0), 0.0) for project_id in project_ids}


@dataclass(frozen=True)
class ProjectFigure:
    """One project's standing in a fair pool, as the pool page shows it."""

    project: Project
    guaranteed: int
    share: int  # G, or 1 GPU when G is 0
    gpu_hours: Decimal  # decayed GPU-hours in the pool
    per_share: Decimal  # what Q5 compares: decayed GPU-hours per share


def project_figures(pool: Pool, *, now: datetime) -> list[ProjectFigure]:
    """Every project with a quota in a fair pool, least used per share first (two queries:
    the quotas and the decayed usage); empty for a pool without fair share."""
    if not pool.fair_share:
        return []
    quotas = list(Quota.objects.filter(gpu_model_id=pool.gpu_model_id).select_related("project"))
    seconds = decayed_gpu_seconds(pool, {quota.project_id for quota in quotas}, now=now)
    figures = [
        ProjectFigure(
            project=quota.project,
            guaranteed=quota.guaranteed,
            share=fair_share_of(quota.guaranteed),
            gpu_hours=Decimal(repr(seconds[quota.project_id] / 3600)).quantize(USAGE_PLACES),
            per_share=usage_per_share(seconds[quota.project_id], guaranteed=quota.guaranteed),
        )
        for quota in quotas
    ]
    return sorted(figures, key=lambda item: (item.per_share, item.project.slug))
