"""Every state change on the compute side is one function here."""

from rental.services.accounts import set_credentials, validate_account
from rental.services.instances import (
    LaunchRetry,
    fail_instance,
    provision_instance,
    sync_instances,
    terminate_instance,
)
from rental.services.leases import (
    admit_queued,
    approve_reservation,
    end_expired_leases,
    end_reservation,
    reject_reservation,
    submit_reservation,
)
from rental.services.quotas import check_quota, set_quota

__all__ = [
    "LaunchRetry",
    "admit_queued",
    "approve_reservation",
    "check_quota",
    "end_expired_leases",
    "end_reservation",
    "fail_instance",
    "provision_instance",
    "reject_reservation",
    "set_credentials",
    "set_quota",
    "submit_reservation",
    "sync_instances",
    "terminate_instance",
    "validate_account",
]
