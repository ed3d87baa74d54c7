"""Every state change on the compute side is one function here."""

from rental.services.accounts import set_credentials, validate_account
from rental.services.admission import (
    approve_reservation,
    reject_reservation,
    submit_reservation,
)
from rental.services.ending import end_expired_leases, end_reservation
from rental.services.instances import (
    LaunchRetry,
    fail_instance,
    provision_instance,
    terminate_instance,
)
from rental.services.queue import admit_queued, promote
from rental.services.quotas import check_quota, set_quota
from rental.services.reclaim import process_due
from rental.services.sync import sync_instances

__all__ = [
    "LaunchRetry",
    "admit_queued",
    "approve_reservation",
    "check_quota",
    "end_expired_leases",
    "end_reservation",
    "fail_instance",
    "process_due",
    "promote",
    "provision_instance",
    "reject_reservation",
    "set_credentials",
    "set_quota",
    "submit_reservation",
    "sync_instances",
    "terminate_instance",
    "validate_account",
]
