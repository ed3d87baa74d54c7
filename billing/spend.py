"""Month-to-date spend for the budget cap's cheap read (BU3 at admission).

The full computation (``billing.selectors.month_to_date``) apportions every pool over the
whole month's usage: about 1.5 s at 2,000,000 usage intervals, too slow for a lease
submission to wait on. So a periodic task computes it once for every project and keeps the
result as a ``SpendSnapshot`` per project and period; the admission check reads one row.

Invalidation, all of it:
- each refresh replaces every project's row for the current period (``as_of`` = its now);
- a manual line (adjustment or credit) added to the open period adds its amount to the
  project's row in the same transaction (a statement's total is the sum of its lines);
- a new period has no rows until its first refresh; rows of earlier periods are deleted;
- a row older than ``PORTAL_SPEND_SNAPSHOT_MAX_AGE_SECONDS`` (or missing, e.g. the beat is
  down) is not trusted: the check then computes the figure in full, as before.
So the cap acts on spend at most one refresh interval old, exact to the cent as of then.
"""

import logging
from collections.abc import Iterable
from datetime import datetime, timedelta
from decimal import Decimal

from django.conf import settings
from django.db import transaction
from django.db.models import F
from django.utils import timezone

from billing import drafts, rollups
from billing.models import SpendSnapshot
from billing.money import AMOUNT_LIMIT
from billing.periods import period_start
from billing.requesters import spend_by_project
from billing.selectors import month_to_date, totals
from billing.statements import compute_period
from portal.models import Project

log = logging.getLogger(__name__)


def refresh(*, now: datetime | None = None) -> int:
    """Roll the closed usage up (``billing.rollups``), then recompute every active
    project's month-to-date spend (one full computation) and store it. Returns the number
    of rows written. A spend too large for the column (prices or counts stored at their
    columns' edge) is not written but reported; that project's cap then computes its spend
    in full, and the other projects' rows are written."""
    rollups.roll_up_usage()
    now = now or timezone.now()
    period = period_start(now).date()
    projects = dict(Project.objects.filter(is_active=True).values_list("pk", "slug"))
    computed = compute_period(period=period_start(now), now=now)
    drafts.store(
        computed,
        now=now,
        requesters=spend_by_project(project_ids=None, period=period_start(now), now=now),
    )
    spent = totals(computed, project_ids=list(projects))
    rows = []
    for project_id, slug in projects.items():
        amount = spent.get(project_id, Decimal("0.00"))
        if abs(amount) >= AMOUNT_LIMIT:
            log.warning("spend of project %s not kept: %s has more than 14 digits", slug, amount)
            continue
        rows.append(SpendSnapshot(project_id=project_id, period=period, amount=amount, as_of=now))
    with transaction.atomic():
        SpendSnapshot.objects.bulk_create(
            rows,
            update_conflicts=True,
            unique_fields=["project", "period"],
            update_fields=["amount", "as_of"],
            batch_size=1000,
        )
        SpendSnapshot.objects.filter(period__lt=period).delete()
    return len(rows)


def add_manual_line(*, project_id: int, period: datetime, amount: Decimal) -> None:
    """Within the caller's transaction: a manual line changes the spend by its amount."""
    SpendSnapshot.objects.filter(project_id=project_id, period=period_start(period).date()).update(
        amount=F("amount") + amount
    )


def spend_now(*, project_id: int, now: datetime) -> Decimal:
    """The project's month-to-date spend for the cap: the snapshot when fresh (one indexed
    row), else the full computation."""
    return spent_now(project_ids=[project_id], now=now)[project_id]


def spent_now(*, project_ids: Iterable[int], now: datetime) -> dict[int, Decimal]:
    """The projects' month-to-date spend: their fresh snapshots (one query), and the full
    computation for any project without one."""
    project_ids = list(project_ids)
    max_age = timedelta(seconds=settings.PORTAL_SPEND_SNAPSHOT_MAX_AGE_SECONDS)
    found = dict(
        SpendSnapshot.objects.filter(
            project_id__in=project_ids,
            period=period_start(now).date(),
            as_of__lte=now,
            as_of__gte=now - max_age,
        ).values_list("project_id", "amount")
    )
    missing = [project_id for project_id in project_ids if project_id not in found]
    if missing:
        log.warning(
            "no fresh spend snapshot for project %s; computing it in full",
            ", ".join(str(project_id) for project_id in missing),
        )
        computed = month_to_date(project_ids=missing, now=now)
        found.update({p: computed.get(p, Decimal("0.00")) for p in missing})
    return found
