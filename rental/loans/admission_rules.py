"""Admission rules: which tier a lease runs in and whether it may start now (Q2, Q4).

Pure decisions over numbers read under the pool's row lock; the services in
``admission.py`` lock, read, decide and write in one transaction.
"""

from dataclasses import dataclass

from django.utils.translation import gettext_noop

from portal.errors import QuotaExceeded
from portal.phrases import Phrase, Text
from rental.models import Market, Priority, Reservation, Tier

Status = Reservation.Status


@dataclass(frozen=True)
class Standing:
    """What admission needs to know, in GPUs."""

    guaranteed: int  # G
    ceiling: int  # L
    used_guaranteed: int  # Ug
    used: int  # U, non-spot
    capacity: int  # C
    running: int  # GPUs held in the pool: running, under notice, claimed by reclaims (Q8)
    # The project's own guaranteed GPUs a request of this priority may take back (Q6 step 3:
    # lower priority, non-production, not already under notice).
    displaceable: int = 0
    # GPUs of the project's bookings overlapping the window asked for (read only when a
    # window is given): a guaranteed lease there must leave them their room (R2).
    booked_in_window: int = 0

    @property
    def free(self) -> int:
        return self.capacity - self.running

    @property
    def guaranteed_eligible_for(self) -> int:
        """How many more GPUs fit in the guarantee."""
        return max(self.guaranteed - self.used_guaranteed, 0)


@dataclass(frozen=True)
class Decision:
    status: str
    tier: str
    code: str = ""
    # Why, as a phrase (portal.phrases): it becomes the lease's reason, said to each reader
    # in their language.
    message: Text = ""


def needs_approval(
    *, gpu_count: int, hours: float, max_gpus: int | None, max_hours: int | None
) -> bool:
    """Beyond the quota's auto-approve limits a manager decides."""
    return (max_gpus is not None and gpu_count > max_gpus) or (
        max_hours is not None and hours > max_hours
    )


def decide(
    standing: Standing, *, gpu_count: int, priority: str, market: str, approved: bool = False
) -> Decision:
    """Tier by Q2, then room by Q4. Raises QuotaExceeded for a refusal.

    ``approved`` is a manager's approval: the ceiling no longer applies.
    """
    if market == Market.SPOT:
        return _with_room(standing, gpu_count, Tier.SPOT)
    over_ceiling = not approved and standing.used + gpu_count > standing.ceiling
    if standing.used_guaranteed + gpu_count <= standing.guaranteed:
        if over_ceiling:
            # Burst leases may already fill L while the guarantee has room (a burst lease
            # too big for the room left, Q2): L stays the most a project runs without a
            # manager, whatever the tier.
            return _over_ceiling(standing, gpu_count, Tier.GUARANTEED)
        return _with_room(standing, gpu_count, Tier.GUARANTEED)
    if (
        priority == Priority.PRODUCTION
        and standing.used_guaranteed - standing.displaceable + gpu_count <= standing.guaranteed
    ):
        # Room in the guarantee once the project's own lower-priority leases give theirs
        # back (Q6 step 3, scenario 5): the reclaim decides which. L still holds: what
        # those leases give back is all the room the project gets under its ceiling, and
        # beyond that a manager decides.
        if not approved and standing.used - standing.displaceable + gpu_count > standing.ceiling:
            return _over_ceiling(standing, gpu_count, Tier.GUARANTEED)
        return Decision(
            status=Status.QUEUED,
            tier=Tier.GUARANTEED,
            code="needs_own_reclaim",
            message=Phrase(
                gettext_noop(
                    "The project's guarantee is in use by its own lower-priority leases; "
                    "they give their GPUs back."
                )
            ),
        )
    if priority == Priority.PRODUCTION:
        raise QuotaExceeded(
            Phrase(
                gettext_noop(
                    "Production leases run only within the project's guarantee: %(left)s of "
                    "%(g)s guaranteed GPUs are free and %(n)s were asked."
                ),
                left=max(standing.guaranteed - standing.used_guaranteed, 0),
                g=standing.guaranteed,
                n=gpu_count,
            ),
            code="production_over_guarantee",
            field="priority",
            figures={
                "asked": gpu_count,
                "guaranteed": standing.guaranteed,
                "guaranteed_free": max(standing.guaranteed - standing.used_guaranteed, 0),
            },
        )
    if not over_ceiling:
        return _with_room(standing, gpu_count, Tier.BURST)
    return _over_ceiling(standing, gpu_count, Tier.BURST)


def _over_ceiling(standing: Standing, gpu_count: int, tier: str) -> Decision:
    return Decision(
        status=Status.PENDING_APPROVAL,
        tier=tier,
        code="over_ceiling",
        message=Phrase(
            gettext_noop(
                "Over the project's ceiling: %(used)s of %(ceiling)s GPUs in use, %(n)s asked. "
                "A manager must approve."
            ),
            used=standing.used,
            ceiling=standing.ceiling,
            n=gpu_count,
        ),
    )


def _with_room(standing: Standing, gpu_count: int, tier: str) -> Decision:
    free = standing.capacity - standing.running
    if gpu_count <= free:
        return Decision(status=Status.PROVISIONING, tier=tier)
    return Decision(
        status=Status.QUEUED,
        tier=tier,
        code="no_capacity",
        message=Phrase(
            gettext_noop(
                "The pool has %(free)s of %(capacity)s GPUs free; the lease waits for room."
            ),
            free=max(free, 0),
            capacity=standing.capacity,
        ),
    )
