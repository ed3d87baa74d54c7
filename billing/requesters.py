"""Spend per requester: who in a project used what in a period, at the rates captured at
launch, before any apportionment.

Each requester's GPU-seconds are summed per rate (and exchange rate), priced, and rounded
once per requester. The seconds come from the period's requester rollups plus the runs not
rolled up yet (``billing.rollups``), so a project's figure reads its own rollup rows and a
few live runs, not its month of runs; a computation as of a moment the rollups have passed
(a replay) reads the month's runs, under the same rule.
"""

from collections import defaultdict
from collections.abc import Iterable, Iterator
from dataclasses import dataclass
from datetime import datetime
from decimal import Decimal

from django.contrib.auth import get_user_model

from billing import rollups
from billing.money import SECONDS_PER_HOUR, gpu_seconds_cost, quantize
from billing.periods import billed_seconds, period_end, period_start
from rental import billing_reads

UNKNOWN = "?"


@dataclass(frozen=True)
class RequesterSpend:
    requester: str
    gpu_seconds: int
    value: Decimal  # usage at the captured rates, before any apportionment

    @property
    def gpu_hours(self) -> Decimal:
        return (Decimal(self.gpu_seconds) / SECONDS_PER_HOUR).quantize(Decimal("0.01"))

    def data(self) -> list:
        """As JSON data (kept with the draft lines); ``from_data`` gives it back."""
        return [self.requester, self.gpu_seconds, str(self.value)]

    @classmethod
    def from_data(cls, data: Iterable) -> "RequesterSpend":
        requester, seconds, value = data
        return cls(requester=requester, gpu_seconds=seconds, value=Decimal(value))


def spend_per_requester(
    *, project_id: int, period: datetime, now: datetime
) -> list[RequesterSpend]:
    """One project's spend per requester in the period as of ``now``, largest first."""
    return spend_by_project(project_ids=[project_id], period=period, now=now).get(project_id, [])


def spend_by_project(
    *, project_ids: list[int] | None, period: datetime, now: datetime
) -> dict[int, list[RequesterSpend]]:
    """Spend per requester of ``project_ids`` (every project: None) in the period as of
    ``now``: each project's requesters, largest value first."""
    start = period_start(period)
    covered_end = min(period_end(start), max(now, start))

    def runs(not_rolled_up: bool) -> Iterator[tuple[dict, int]]:
        for run in billing_reads.usage_rows_for_period(
            start=start, end=covered_end, project_ids=project_ids, not_rolled_up=not_rolled_up
        ):
            seconds = billed_seconds(run, start=start, end=covered_end, now=now) * run.gpu_count
            if seconds:
                yield (
                    dict(
                        zip(
                            rollups.REQUESTER_FIELDS,
                            (getattr(run, path) for path in rollups.REQUESTER_PATHS),
                            strict=True,
                        )
                    ),
                    seconds,
                )

    found = rollups.read_usage(
        start=start,
        now=now,
        live=lambda: runs(True),
        stored=lambda day: rollups.requester_rows(day, project_ids),
    )
    if found is None:
        found = list(runs(False))
    seconds: dict[int, dict[int | None, dict[tuple, int]]] = defaultdict(
        lambda: defaultdict(lambda: defaultdict(int))
    )
    for row, gpu_seconds in found:
        if gpu_seconds:
            by_rate = seconds[row["project_id"]][row["requester_id"]]
            by_rate[(row["rate"], row["exchange_rate"])] += gpu_seconds
    people = {who for requesters in seconds.values() for who in requesters}
    names = dict(
        get_user_model().objects.filter(pk__in=people - {None}).values_list("pk", "username")
    )
    return {
        project_id: sorted(
            (
                RequesterSpend(
                    requester=names.get(who, UNKNOWN),
                    gpu_seconds=sum(by_rate.values()),
                    value=quantize(
                        sum(
                            (
                                gpu_seconds_cost(part, rate, exchange_rate)
                                for (rate, exchange_rate), part in by_rate.items()
                            ),
                            Decimal(0),
                        )
                    ),
                )
                for who, by_rate in requesters.items()
            ),
            key=lambda spend: (-spend.value, spend.requester),
        )
        for project_id, requesters in seconds.items()
    }
