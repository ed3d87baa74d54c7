"""The request form's submission: the lease (rental.services.admission) plus what the
engineer chose on the instance — which SSH keys are installed — and the image check
(an image whose CUDA the offering's driver cannot run is refused before admission)."""

from datetime import datetime

from django.db import transaction

from portal import audit
from rental.models import Reservation, SshKey
from rental.services.admission import submit_reservation, validate_request
from rental.services.images import check_image_fits
from rental.services.keys import check_lease_keys


@transaction.atomic
def submit_lease(
    *,
    actor,
    ssh_keys: list[SshKey] | None = None,
    now: datetime | None = None,
    **request,
) -> Reservation:
    """``submit_reservation`` with the chosen keys stored on the lease (None or empty:
    all of the requester's keys at launch). Refusals write nothing."""
    keys = check_lease_keys(requester=actor, keys=ssh_keys)
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
