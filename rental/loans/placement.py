"""Writing an admission decision onto a lease: status, tier, reason, and its instances."""

from collections.abc import Sequence
from datetime import datetime, timedelta

from rental import jobs, selectors
from rental.loans.admission_rules import Decision
from rental.models import Instance, Reservation

Status = Reservation.Status


# What ``set_decision`` writes on a lease.
DECISION_FIELDS = (
    "status",
    "tier",
    "status_code",
    "status_message",
    "start",
    "end",
    "reclaim_due_at",
)


def set_decision(reservation: Reservation, decision: Decision, *, now: datetime) -> None:
    """A decision's fields on the lease, unsaved."""
    reservation.status = decision.status
    reservation.tier = decision.tier
    reservation.status_code = decision.code
    reservation.status_message = decision.message
    if decision.status == Status.PROVISIONING:
        # The lease's clock starts when it is admitted, not when it was asked for; a
        # booking keeps the end it was admitted with (R2), even when it starts late.
        length = reservation.end - reservation.start
        end = reservation.end if reservation.is_reservation else now + length
        reservation.start, reservation.end = now, max(end, now + timedelta(seconds=1))
        reservation.reclaim_due_at = None


def apply_decision(reservation: Reservation, decision: Decision, *, now: datetime) -> None:
    """Write a decision; an admitted lease gets its instances and launches on commit."""
    set_decision(reservation, decision, now=now)
    reservation.save()
    if decision.status == Status.PROVISIONING:
        create_instances(reservation)


def new_instances(reservation: Reservation, ids: Sequence[int] = ()) -> list[Instance]:
    """The lease's instances, unsaved (with primary keys when ``ids`` are given)."""
    offering = reservation.offering
    rate = selectors.rate_for(offering, reservation.market)
    keys = list(ids) or [None] * reservation.instance_count
    return [
        Instance(
            pk=keys[index],
            reservation=reservation,
            account_id=offering.account_id,
            offering=offering,
            region=offering.region,
            market=reservation.market,
            gpu_count=offering.gpus_per_instance,
            rate_per_hour=rate * offering.gpus_per_instance,
            ssh_user=reservation.image.ssh_user if reservation.image else "",
            provisioning_since=reservation.start,
            root_disk_gb=offering.root_disk_gb,
            idempotency_key=Instance.new_idempotency_key(),
        )
        for index in range(reservation.instance_count)
    ]


def create_instances(reservation: Reservation) -> list[Instance]:
    """Within the caller's transaction: the lease's instances (one statement), launched on
    commit."""
    instances = Instance.objects.bulk_create(new_instances(reservation))
    jobs.provision_on_commit(instance.pk for instance in instances)
    return instances
