"""GPU-hour allocations (GA1–GA3): a project's GPU-hours a month per GPU model, beside its
money budget. Each allocation's thresholds fire once a period, as a budget's do (BU1);
with a hard stop, the admission check (``billing.admission.gpu_hour_cap``) refuses new
burst and spot leases of the model once the month's hours are used.

Used GPU-hours are the period's billed GPU-seconds of the project's runs of that model
(B1, B6: ``billing.periods``) over 3,600, read as statements read usage: the period's
rollups plus the runs not rolled up yet, from one moment, so no reader goes through the
month's runs. ``used_seconds`` reads them through ``billing.rollups.read_usage``;
``measured`` reads them with the allocations in one statement (one snapshot), for the
pages and the admission check, and falls back to ``used_seconds`` where it cannot.
"""

import logging
from collections import defaultdict
from collections.abc import Iterable, Iterator
from dataclasses import dataclass
from datetime import date, datetime, timedelta
from decimal import ROUND_DOWN, Decimal
from typing import Any

from django.core.exceptions import ValidationError
from django.db import IntegrityError, connection, transaction
from django.db.models import DateTimeField, DecimalField, OuterRef, Subquery, Sum, Value
from django.db.models.functions import Coalesce
from django.urls import reverse
from django.utils import timezone, translation
from django.utils.translation import gettext as _
from django.utils.translation import gettext_noop

from billing import rollups
from billing.budgets import FORECAST_AFTER, SPEND_WORDS
from billing.models import GpuHourAlert, GpuHourAllocation, RolledPeriod, UsageRollup
from billing.periods import (
    aggregate_billed_seconds,
    billed_seconds,
    period_end,
    period_start,
    whole_seconds,
)
from billing.services import SOURCE
from billing.thresholds import clean_thresholds, readable_thresholds
from portal import access, audit, notifications
from portal.errors import Conflict, InvalidInput, NotFound, NotPermitted
from portal.models import Project
from portal.numbers import decimal_number
from portal.phrases import Phrase
from rental import billing_reads
from rental.models import GpuModel
from rental.selectors import usage_for_period

log = logging.getLogger(__name__)

SECONDS_PER_HOUR = 3600
HOURS_BELOW = Decimal(10) ** 10  # the column's 12 digits with two decimals
HUNDREDTH = Decimal("0.01")
USAGE_FIELDS = ("project_id", "gpu_model_id")

# --- Usage ------------------------------------------------------------------------------

Key = tuple[int, int]  # (project id, GPU model id)


def used_seconds(
    *,
    project_ids: Iterable[int],
    period: date | datetime,
    now: datetime,
    gpu_model_ids: Iterable[int] | None = None,
    in_database: bool | None = None,
) -> dict[Key, int]:
    """Billed GPU-seconds of the period as of ``now`` per (project, GPU model), for the
    projects (and models, when given): the period's rollups plus the runs not rolled up,
    from one moment; the projects' runs of the period when the rollups cannot serve
    ``now`` (a replay). The same rule as the statement's lines, to the second."""
    project_ids = sorted(set(project_ids))
    models = None if gpu_model_ids is None else sorted(set(gpu_model_ids))
    if not project_ids or models == []:
        return {}
    if in_database is None:
        in_database = connection.vendor == "postgresql"
    start = period_start(period)
    covered_end = min(period_end(start), max(now, start))

    def stored(day: Any) -> list[tuple[dict, int]]:
        rows = UsageRollup.objects.filter(period=day, project_id__in=project_ids)
        if models is not None:
            rows = rows.filter(gpu_model_id__in=models)
        return [
            (row, int(row["gpu_seconds"]))
            for row in rows.order_by()
            .values(*USAGE_FIELDS)
            .annotate(gpu_seconds=Sum("gpu_seconds"))
        ]

    def summed(live_only: bool) -> Iterator[tuple[dict, int]]:
        if in_database:
            records = usage_for_period(start=start, end=covered_end, project_ids=project_ids)
            if live_only:  # through the partial index on runs not rolled up
                records = records.filter(rolled_up=False)
            if models is not None:
                records = records.filter(gpu_model_id__in=models)
            for row in aggregate_billed_seconds(
                records, start=start, end=covered_end, now=now, fields=USAGE_FIELDS
            ):
                yield row, int(row["gpu_seconds"] or 0)
            return
        for run in billing_reads.usage_rows_for_period(
            start=start, end=covered_end, project_ids=project_ids, not_rolled_up=live_only
        ):
            if models is None or run.gpu_model_id in models:
                seconds = billed_seconds(run, start=start, end=covered_end, now=now)
                yield run._asdict(), seconds * run.gpu_count

    found = rollups.read_usage(start=start, now=now, live=lambda: summed(True), stored=stored)
    used: dict[Key, int] = defaultdict(int)
    for row, seconds in found if found is not None else summed(False):
        if seconds:
            used[(row["project_id"], row["gpu_model_id"])] += seconds
    return dict(used)


# --- Standing ---------------------------------------------------------------------------


def hours(seconds: int | Decimal) -> Decimal:
    """GPU-seconds as GPU-hours to the hundredth, rounded down: never more than used."""
    return (Decimal(seconds) / SECONDS_PER_HOUR).quantize(HUNDREDTH, rounding=ROUND_DOWN)


@dataclass(frozen=True)
class HoursStanding:
    """One allocation's use this period: exact GPU-seconds against the allocated hours."""

    allocation: GpuHourAllocation
    used_seconds: int
    elapsed_seconds: int
    period_seconds: int

    @property
    def allocated_hours(self) -> Decimal:
        return self.allocation.monthly_hours

    @property
    def allocated_seconds(self) -> Decimal:
        return self.allocation.monthly_hours * SECONDS_PER_HOUR  # exact: 0.01 h = 36 s

    @property
    def used_hours(self) -> Decimal:
        return hours(self.used_seconds)

    @property
    def used_up(self) -> bool:
        """GA3: the month's hours are used (an allocation of 0 from the first second)."""
        return self.used_seconds >= self.allocated_seconds

    @property
    def has_forecast(self) -> bool:
        """BU2's rule: a forecast only after 24 h of the period."""
        return self.elapsed_seconds >= FORECAST_AFTER // timedelta(seconds=1)

    @property
    def forecast_hours(self) -> Decimal | None:
        if not self.has_forecast:
            return None
        return hours(Decimal(self.used_seconds) * self.period_seconds / self.elapsed_seconds)

    @property
    def percent(self) -> Decimal:
        """Used as a percent of the allocation, to a tenth, rounded down."""
        if not self.allocated_seconds:
            return Decimal("100.0") if self.used_seconds else Decimal("0.0")
        return (Decimal(self.used_seconds) * 100 / self.allocated_seconds).quantize(
            Decimal("0.1"), rounding=ROUND_DOWN
        )

    @property
    def bar_percent(self) -> int:
        return int(min(self.percent, Decimal(100)))

    def passes(self, percent: int, kind: str) -> bool:
        """GA1 (as BU1): the used (or forecast) hours are strictly more than the
        allocation × percent, compared in exact integers."""
        if kind == "actual":
            return self.used_seconds * 100 > self.allocated_seconds * percent
        if not self.has_forecast:
            return False
        return (
            self.used_seconds * self.period_seconds * 100
            > self.allocated_seconds * percent * self.elapsed_seconds
        )

    def value(self, kind: str) -> Decimal:
        return self.used_hours if kind == "actual" else self.forecast_hours or Decimal(0)


def _annotated(queryset: Any, *, start: datetime, covered_end: datetime, now: datetime) -> Any:
    """``queryset``'s allocations, each with its rollup seconds, its runs not rolled up
    summed by the same rule, and the period's rolled-up-through moment, in one statement:
    one snapshot, so a roll-up committing meanwhile is seen wholly or not at all."""
    day = start.date()
    mine = {"project_id": OuterRef("project_id"), "gpu_model_id": OuterRef("gpu_model_id")}
    rolled = (
        UsageRollup.objects.filter(period=day, **mine)
        .order_by()
        .values("project_id")
        .annotate(seconds=Sum("gpu_seconds"))
        .values("seconds")[:1]
    )
    runs = usage_for_period(start=start, end=covered_end).filter(rolled_up=False, **mine)
    live = aggregate_billed_seconds(
        runs, start=start, end=covered_end, now=now, fields=("project_id",)
    ).values("gpu_seconds")[:1]
    seconds = DecimalField(max_digits=30, decimal_places=6)
    return queryset.annotate(
        rolled_seconds=Coalesce(
            Subquery(rolled, output_field=seconds), Value(0), output_field=seconds
        ),
        live_seconds=Coalesce(Subquery(live, output_field=seconds), Value(0), output_field=seconds),
        rolled_through=Subquery(
            RolledPeriod.objects.filter(period=day).values("through")[:1],
            output_field=DateTimeField(),
        ),
    )


def measured(
    queryset: Any, *, period: date | datetime, now: datetime, in_database: bool | None = None
) -> list[HoursStanding]:
    """The allocations of ``queryset`` with their use in the period as of ``now`` (the
    whole period once it ended). On PostgreSQL in one query; when the rollups cannot serve
    ``now`` (a replay), or elsewhere, through ``used_seconds``."""
    if in_database is None:
        in_database = connection.vendor == "postgresql"
    start = period_start(period)
    end = period_end(start)
    covered_end = min(end, max(now, start))
    used: dict[Key, int] | None = None
    if in_database:
        rows = list(_annotated(queryset, start=start, covered_end=covered_end, now=now))
        if rows and rollups.usable(start=start, now=now, through=rows[0].rolled_through):
            used = {
                (row.project_id, row.gpu_model_id): int(row.rolled_seconds + row.live_seconds)
                for row in rows
            }
    else:
        rows = list(queryset)
    if rows and used is None:
        used = used_seconds(
            project_ids=[row.project_id for row in rows],
            gpu_model_ids=[row.gpu_model_id for row in rows],
            period=start,
            now=now,
            in_database=in_database,
        )
    return [
        HoursStanding(
            allocation=row,
            used_seconds=(used or {}).get((row.project_id, row.gpu_model_id), 0),
            elapsed_seconds=whole_seconds(covered_end - start),
            period_seconds=whole_seconds(end - start),
        )
        for row in rows
    ]


def project_standings(
    project_id: int, *, period: date | datetime, now: datetime
) -> list[HoursStanding]:
    """The project's allocations with their use in the period, by GPU model name: one
    query on PostgreSQL, whatever the number of allocations and runs."""
    return measured(
        GpuHourAllocation.objects.filter(project_id=project_id)
        .select_related("gpu_model")
        .order_by("gpu_model__name"),
        period=period,
        now=now,
    )


# --- Thresholds -------------------------------------------------------------------------


def evaluate_allocations(*, now: datetime | None = None) -> list[GpuHourAlert]:
    """The hourly task's work: fire each crossed threshold of every active project's
    allocations once per period (GA1). An allocation whose stored thresholds do not read
    as thresholds is skipped with a warning naming its project; the others are evaluated
    all the same."""
    now = now or timezone.now()
    allocations = (
        GpuHourAllocation.objects.select_related("project", "gpu_model")
        .filter(project__is_active=True)
        .exclude(thresholds=[])
    )
    period = period_start(now).date()
    fired: list[GpuHourAlert] = []
    for current in measured(allocations, period=period, now=now):
        allocation = current.allocation
        with translation.override("en"):
            thresholds, problem = readable_thresholds(allocation.thresholds)
        if problem:
            log.warning(
                "GPU-hour allocation of project %s (%s) skipped: its thresholds are malformed (%s)",
                allocation.project.slug,
                allocation.gpu_model.name,
                problem,
            )
            continue
        for threshold in thresholds:
            percent, kind = int(threshold["percent"]), threshold["kind"]
            if current.passes(percent, kind):
                alert = _fire(current, period=period, percent=percent, kind=kind, now=now)
                if alert is not None:
                    fired.append(alert)
    return fired


def _fire(
    current: HoursStanding, *, period: date, percent: int, kind: str, now: datetime
) -> GpuHourAlert | None:
    allocation = current.allocation
    project = allocation.project
    value = current.value(kind)
    try:
        with transaction.atomic():
            alert = GpuHourAlert.objects.create(
                allocation=allocation,
                period=period,
                percent=percent,
                kind=kind,
                value=value,
                fired_at=now,
            )
            audit.record(
                actor=None,
                verb="allocation.alert",
                obj=alert,
                project=project,
                source="worker",
                after={"percent": percent, "kind": kind, "gpu_hours": value},
                at=now,
            )
            notifications.notify(
                [*notifications.managers_of(project)],
                subject=Phrase(
                    gettext_noop(
                        "%(project)s: %(kind)s GPU-hours of %(model)s passed %(percent)s%% "
                        "of the allocation"
                    ),
                    project=project.name,
                    kind=Phrase(SPEND_WORDS[kind]) if kind in SPEND_WORDS else kind,
                    model=allocation.gpu_model.name,
                    percent=percent,
                ),
                body=Phrase(
                    gettext_noop("%(used)s of %(allocated)s GPU-hours"),
                    used=value,
                    allocated=allocation.monthly_hours,
                ),
                link=reverse("rental:project", args=[project.slug]),
                event=notifications.Event.BUDGET_THRESHOLD,
                project=project,
            )
    except IntegrityError:
        return None  # fired already this period (the unique constraint says so)
    return alert


# --- Setting and removing ---------------------------------------------------------------


def _gpu_model(value: Any) -> GpuModel:
    """The GPU model given by id, name or instance, or InvalidInput on ``gpu_model``."""
    if isinstance(value, GpuModel):
        return value
    text = "" if value is None or isinstance(value, bool) else str(value).strip()
    found = None
    if text.isdigit() and len(text) < 19:
        found = GpuModel.objects.filter(pk=int(text)).first()
    elif text:
        found = GpuModel.objects.filter(name=text[:100]).first()
    if found is None:
        raise InvalidInput(_("Choose a GPU model."), field="gpu_model")
    return found


def _thresholds(value: Any) -> list[dict[str, Any]]:
    try:
        return clean_thresholds(value)
    except ValidationError as invalid:
        message = " ".join(invalid.messages)
        if invalid.code == "duplicate":  # a rule over two items, which no schema says
            raise Conflict(message, code="duplicate_threshold", field="thresholds") from None
        raise InvalidInput(message, field="thresholds") from None


def _require_manager(actor: Any, project: Project) -> None:
    if not access.can_manage(actor, project):
        raise NotPermitted(_("Only the project's manager sets its GPU-hour allocations."))


def _settings(allocation: GpuHourAllocation | None) -> dict[str, Any]:
    if allocation is None:
        return {}
    return {
        "gpu_model": allocation.gpu_model.name,
        "monthly_hours": allocation.monthly_hours,
        "thresholds": allocation.thresholds,
        "hard_stop": allocation.hard_stop,
    }


@transaction.atomic
def set_allocation(
    *,
    project: Project,
    actor: Any,
    gpu_model: Any,
    monthly_hours: Any,
    thresholds: Any,
    hard_stop: bool = False,
    source: str = SOURCE,
) -> GpuHourAllocation:
    """A manager (or an admin) gives the project an allocation of GPU-hours a month of
    one GPU model, or changes it: made or replaced. Bad input names its field; nothing
    is written."""
    _require_manager(actor, project)
    return _write(
        project=project,
        actor=actor,
        model=_gpu_model(gpu_model),
        monthly_hours=monthly_hours,
        thresholds=thresholds,
        hard_stop=hard_stop,
        source=source,
    )


@transaction.atomic
def change_allocation(
    *,
    allocation: GpuHourAllocation,
    actor: Any,
    monthly_hours: Any,
    thresholds: Any,
    hard_stop: bool = False,
    source: str = SOURCE,
) -> GpuHourAllocation:
    """``set_allocation`` for an allocation already named (the API's row): its project
    and GPU model are its own."""
    _require_manager(actor, allocation.project)
    return _write(
        project=allocation.project,
        actor=actor,
        model=allocation.gpu_model,
        monthly_hours=monthly_hours,
        thresholds=thresholds,
        hard_stop=hard_stop,
        source=source,
    )


def _write(
    *,
    project: Project,
    actor: Any,
    model: GpuModel,
    monthly_hours: Any,
    thresholds: Any,
    hard_stop: Any,
    source: str,
) -> GpuHourAllocation:
    amount = decimal_number(
        monthly_hours,
        field="monthly_hours",
        places=2,
        below=HOURS_BELOW,
        label=_("GPU-hours a month"),
    )
    cleaned = _thresholds(thresholds)
    if not isinstance(hard_stop, bool):
        raise InvalidInput(_("Hard stop is yes or no."), field="hard_stop")
    allocation = (
        GpuHourAllocation.objects.select_for_update()
        .select_related("gpu_model")
        .filter(project=project, gpu_model=model)
        .first()
    )
    before = _settings(allocation)
    if allocation is None:
        allocation = GpuHourAllocation(project=project, gpu_model=model)
    allocation.monthly_hours = amount
    allocation.thresholds = cleaned
    allocation.hard_stop = hard_stop
    allocation.save()
    audit.record(
        actor=actor,
        verb="allocation.set",
        obj=allocation,
        project=project,
        source=source,
        before=before,
        after=_settings(allocation),
    )
    return allocation


@transaction.atomic
def remove_allocation(
    *, project: Project, actor: Any, gpu_model: Any, source: str = SOURCE
) -> None:
    """A manager (or an admin) removes the project's allocation of a GPU model: its use is
    no longer measured against hours, and its hard stop lifts at once."""
    _require_manager(actor, project)
    model = _gpu_model(gpu_model)
    allocation = (
        GpuHourAllocation.objects.select_for_update()
        .select_related("gpu_model")
        .filter(project=project, gpu_model=model)
        .first()
    )
    if allocation is None:
        raise NotFound(
            _("The project has no GPU-hour allocation of %(model)s.") % {"model": model.name},
            field="gpu_model",
        )
    _remove(allocation, actor=actor, source=source)


@transaction.atomic
def remove_allocation_row(*, allocation: GpuHourAllocation, actor: Any, source: str) -> None:
    """``remove_allocation`` for an allocation already named (the API's row)."""
    _require_manager(actor, allocation.project)
    _remove(allocation, actor=actor, source=source)


def _remove(allocation: GpuHourAllocation, *, actor: Any, source: str) -> None:
    audit.record(
        actor=actor,
        verb="allocation.remove",
        obj=allocation,
        project=allocation.project_id,
        source=source,
        before=_settings(allocation),
    )
    allocation.delete()
