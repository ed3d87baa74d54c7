"""Rental's part of ``/readyz`` (``PORTAL_READINESS_CHECKS``): the sync runs.

The sync is running when some region of an active account with credentials has finished
a sync, good or failed, within ``MISSED_PERIODS`` sync periods plus the time one region's
sync may take (``PORTAL_SYNC_CLAIM_SECONDS``). A region whose cloud keeps failing does not
make the portal unready (the cloud's trouble, not a stopped process): its lag and error
are metrics (``rental.metrics``) with alerts of their own.
"""

from datetime import datetime

from django.conf import settings
from django.db.models import Count, Max

from portal.health import Check, is_late
from rental.models import RegionSync


def sync(*, now: datetime) -> Check:
    period = float(settings.CELERY_BEAT_SCHEDULE["sync-instances"]["schedule"])
    regions = (
        RegionSync.objects.filter(account__is_active=True)
        .exclude(account__credentials_encrypted="")
        .aggregate(count=Count("pk"), good=Max("synced_at"), failed=Max("sync_failed_at"))
    )
    if not regions["count"]:
        return Check("sync", True, "No provider account has a region to sync yet.")
    ends = [at for at in (regions["good"], regions["failed"]) if at is not None]
    last = max(ends) if ends else None
    if is_late(last, now=now, period=period, slack=settings.PORTAL_SYNC_CLAIM_SECONDS):
        said = (
            "No region's sync has finished yet"
            if last is None
            else f"The last region's sync finished {int((now - last).total_seconds())} s ago"
        )
        return Check(
            "sync",
            False,
            f"{said} (the sync runs every {period:g} s): beat or the workers have stopped.",
        )
    age = int((now - last).total_seconds())
    return Check("sync", True, f"A region's sync finished {age} s ago (every {period:g} s).")
