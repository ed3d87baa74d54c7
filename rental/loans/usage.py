"""Billing stops: an instance's open usage interval closes, and the cloud work to end it
is asked for by name (``rental.jobs``) to run after the commit. Rows only, no provider:
ending a lease, promoting one, a spot notice and a stop all start here, inside the
caller's transaction. What the cloud then confirms is ``rental.fleet.termination``."""

from datetime import datetime

from rental import jobs
from rental.models import Instance, UsageRecord

State = Instance.State


def close_usage(instance: Instance, *, at: datetime, reason: str) -> None:
    """Close the instance's open usage interval at ``at`` (never before it opened)."""
    for record in UsageRecord.objects.select_for_update().filter(
        instance=instance, end__isnull=True
    ):
        record.end = max(at, record.start)
        record.end_reason = reason
        record.save(update_fields=["end", "end_reason"])


def stop_billing_and_terminate(instance: Instance, *, reason: str, at: datetime) -> None:
    """Within the caller's transaction: usage stops at ``at``; the cloud work follows on
    commit. An instance never launched is simply marked terminated."""
    if instance.state == State.REQUESTED:
        instance.state = State.TERMINATED
        instance.termination_reason = reason
        instance.terminated_at = at
        instance.save()
    elif instance.state in (State.LAUNCHING, State.RUNNING):
        close_usage(instance, at=at, reason=reason)
        instance.state = State.STOPPING
        instance.termination_reason = reason
        instance.save()
        jobs.terminate_on_commit(instance.pk)
