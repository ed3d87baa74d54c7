"""A pool's state (Q1) and availability watches (point 3)."""

from datetime import datetime

from django.db import transaction
from django.db.models import Sum
from django.utils import timezone
from django.utils.translation import gettext as _

from portal import access, audit
from portal.errors import InvalidInput, NotPermitted
from rental import jobs
from rental.loans import messages
from rental.loans.standing import lock_pool, pool_use
from rental.models import AvailabilityWatch, GpuModel, Pool, Quota


def refresh_state(pool: Pool, *, now: datetime | None = None) -> Pool:
    """Within the caller's transaction, pool locked: C below Σ G makes the pool
    ``degraded`` and alerts the admins once; back within, it is ``ok`` again (Q1)."""
    total = (
        Quota.objects.filter(gpu_model_id=pool.gpu_model_id).aggregate(g=Sum("guaranteed"))["g"]
        or 0
    )
    state = Pool.State.DEGRADED if pool.capacity < total else Pool.State.OK
    if state != pool.state:
        before = pool.state
        pool.state = state
        pool.save(update_fields=["state"])
        audit.record(
            actor=None,
            verb="pool.state",
            obj=pool,
            source="worker",
            at=now or timezone.now(),
            before={"state": before},
            after={"state": state, "capacity": pool.capacity, "guaranteed": total},
        )
        if state == Pool.State.DEGRADED:
            messages.pool_degraded(pool, guaranteed=total)
    return pool


@transaction.atomic
def set_capacity(*, actor, gpu_model: GpuModel | int, capacity: int, source: str = "web") -> Pool:
    """Change C (admins): the state follows Q1 and the queue is admitted into new room."""
    if not access.is_admin(actor):
        raise NotPermitted(_("Only admins change a pool's capacity."))
    pool = lock_pool(gpu_model)
    if not isinstance(capacity, int) or capacity < pool.committed_gpus:
        raise InvalidInput(
            _("The capacity must be a whole number of at least the committed GPUs (%(k)s).")
            % {"k": pool.committed_gpus},
            field="capacity",
        )
    before = pool.capacity
    pool.capacity = capacity
    pool.save(update_fields=["capacity"])
    audit.record(
        actor=actor,
        verb="pool.capacity",
        obj=pool,
        source=source,
        before={"capacity": before},
        after={"capacity": capacity},
    )
    refresh_state(pool)
    jobs.admit_queued_on_commit(pool.gpu_model_id)
    return pool


@transaction.atomic
def watch_availability(*, actor, gpu_model: GpuModel, count: int) -> AvailabilityWatch:
    """'Tell me when this fits': one notification when ``count`` GPUs of the model are free."""
    if not access.roles(actor):
        raise NotPermitted(_("Only project members can watch a pool."))
    if not isinstance(count, int) or count < 1 or count > 100_000:
        raise InvalidInput(_("Ask for at least one GPU."), field="count")
    watch, _created = AvailabilityWatch.objects.get_or_create(
        user=actor, gpu_model=gpu_model, count=count, notified_at=None
    )
    return watch


@transaction.atomic
def stop_watching(*, actor, watch: AvailabilityWatch, source: str = "web") -> None:
    """Remove one of the actor's own availability watches."""
    if watch.user_id != actor.pk:
        raise NotPermitted(_("This is not your watch."))
    audit.record(
        actor=actor,
        verb="watch.deleted",
        obj=watch,
        source=source,
        before={"gpu_model": watch.gpu_model_id, "count": watch.count},
    )
    watch.delete()


def tell_watchers(pool: Pool, *, now: datetime) -> int:
    """Within the caller's transaction, pool locked: each watch whose count now fits is
    told once (claimed by a conditional update, so a second pass tells nobody)."""
    free = pool.capacity - pool_use(pool).held
    told = 0
    for watch in AvailabilityWatch.objects.filter(
        gpu_model_id=pool.gpu_model_id, notified_at__isnull=True, count__lte=free
    ).select_related("user"):
        if AvailabilityWatch.objects.filter(pk=watch.pk, notified_at__isnull=True).update(
            notified_at=now
        ):
            messages.room_appeared(watch, pool=pool, free=free)
            told += 1
    return told
