"""The request form's submission: the lease (rental.loans.admission) plus what the
engineer chose on the instance — which SSH keys are installed, which data volume is
attached — and the image check (an image whose CUDA the offering's driver cannot run is
refused before admission)."""

from datetime import datetime

from django.db import transaction

from portal import audit
from portal.errors import InvalidInput
from rental.catalog import volumes
from rental.catalog.images import check_image_fits
from rental.catalog.keys import check_lease_keys
from rental.loans.admission import submit_reservation
from rental.loans.validation import validate_request
from rental.models import DataVolume, Offering, Reservation, SshKey


def offering_with_volume(volume: DataVolume, **request) -> Offering:
    """The offering a request with this data volume runs on (``volumes.check_volume``).
    The request's own fields are checked first, so that a bad count, duration or quota is
    named on its field rather than as a volume that fits nowhere; the image is checked
    afterwards, against this offering (a volume may be in another region than the
    cheapest offering)."""
    try:
        validate_request(
            project=request["project"],
            gpu_model=request["gpu_model"],
            gpu_count=request["gpu_count"],
            offering=None,
            duration_hours=request["duration_hours"],
            priority=request["priority"],
            market=request["market"],
            image=None,
        )
    except InvalidInput as error:
        if error.field != "image":
            raise
    return volumes.check_volume(
        volume,
        project=request["project"],
        gpu_model=request["gpu_model"],
        gpu_count=request["gpu_count"],
        market=request["market"],
        offering=request.get("offering"),
    )


@transaction.atomic
def submit_lease(
    *,
    actor,
    ssh_keys: list[SshKey] | None = None,
    data_volume: DataVolume | None = None,
    now: datetime | None = None,
    **request,
) -> Reservation:
    """``submit_reservation`` with the chosen keys stored on the lease (None or empty:
    all of the requester's keys at launch) and, when a data volume is picked, the launch
    placed in its zone (``submit_with_volume``). Refusals write nothing."""
    keys = check_lease_keys(requester=actor, keys=ssh_keys)
    if data_volume is not None:
        # The volume decides the offering (its zone), so the image is checked against it.
        request["offering"] = offering_with_volume(data_volume, **request)
    offering, image, _hours = validate_request(
        project=request["project"],
        gpu_model=request["gpu_model"],
        gpu_count=request["gpu_count"],
        offering=request.get("offering"),
        duration_hours=request["duration_hours"],
        priority=request["priority"],
        market=request["market"],
        image=request.get("image"),
    )
    check_image_fits(image, offering)
    if data_volume is not None:
        lease = submit_with_volume(actor=actor, volume=data_volume, now=now, **request)
    else:
        lease = submit_reservation(actor=actor, now=now, **request)
    if keys:
        lease.ssh_keys.set(keys)
        audit.record(
            actor=actor,
            verb="lease.ssh_keys_chosen",
            obj=lease,
            project=lease.project_id,
            source=request.get("source", "web"),
            at=lease.submitted_at,
            after={"keys": sorted(key.name for key in keys)},
        )
    return lease


@transaction.atomic
def submit_with_volume(*, actor, volume: DataVolume, **request) -> Reservation:
    """``submit_reservation`` with a data volume: the lease runs one instance of an offering
    in the volume's zone (the cheapest that fits unless one is picked), and the volume is
    the lease's until it ends. Refusals name the field and write nothing."""
    locked = DataVolume.objects.select_for_update().get(pk=volume.pk)
    request["offering"] = volumes.check_volume(
        locked,
        project=request["project"],
        gpu_model=request["gpu_model"],
        gpu_count=request["gpu_count"],
        market=request["market"],
        offering=request.get("offering"),
    )
    lease = submit_reservation(actor=actor, **request)
    Reservation.objects.filter(pk=lease.pk).update(data_volume=locked)
    lease.data_volume = locked
    return lease
