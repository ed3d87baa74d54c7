"""The order in which a change locks rows: a pool (``standing.lock_pool``), then leases,
then their instances, each kind in id order.

Ending a lease, reclaiming one or admitting one goes that way down. The worker's steps
start from an instance (a sync, a termination, a failed launch, a heartbeat) and must
still take the instance's lease first: a step that held an instance and then waited for
its lease could wait for a change that holds the lease and waits for that instance, a
cycle PostgreSQL breaks by failing one of them (a person's "End" answered with an error).
"""

from collections.abc import Iterable

from django.db.models import F

from portal.sql_arrays import AnyOf
from rental.models import Instance, Reservation


def lock_leases_of(instance_ids: Iterable[int]) -> list[int]:
    """Within the caller's transaction, before it locks any of these instances: lock their
    leases, in id order. Returns the lease ids."""
    ids = sorted(set(instance_ids))
    if not ids:
        return []
    # One array parameter: a sync locks the leases of a region's thousands of instances.
    leases = Instance.objects.filter(AnyOf(F("pk"), ids)).values("reservation_id")
    return list(
        Reservation.objects.select_for_update()
        .filter(pk__in=leases)
        .order_by("pk")
        .values_list("pk", flat=True)
    )
