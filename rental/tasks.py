"""Celery tasks: thin interfaces that pass ids to services. Duplicates do nothing."""

from datetime import datetime, timedelta
from functools import partial

from celery import shared_task
from django.conf import settings
from django.utils import timezone

from rental import jobs
from rental.agent import samples
from rental.catalog import images
from rental.fleet import (
    cloud,
    instances,
    node_offerings,
    own_hosts,
    recovery,
    stop,
    sync,
    termination,
    volume_cloud,
)
from rental.fleet.retry import RETRY_COUNTDOWNS
from rental.loans import due, ending, expected_start, expiry, queue

# Every task here sends its retries through the outbox, never straight to the broker.
task = partial(shared_task, base=jobs.OutboxTask)


# The launch's own attempt rows decide when to give up (PORTAL_LAUNCH_MAX_ATTEMPTS and
# the provisioning timeout); Celery's limit is only a backstop.
@task(bind=True, acks_late=True, max_retries=100)
def provision_instance_task(self, instance_id: int) -> None:
    try:
        instances.provision_instance(instance_id=instance_id)
    except cloud.LaunchRetry as exc:
        if self.request.retries >= self.max_retries:
            instances.fail_instance(instance_id=instance_id, message=str(exc))
            return
        countdown = exc.countdown or RETRY_COUNTDOWNS[self.request.retries]
        raise self.retry(exc=exc, countdown=countdown) from exc


@task(bind=True, acks_late=True, max_retries=len(RETRY_COUNTDOWNS))
def terminate_instance_task(self, instance_id: int) -> None:
    try:
        termination.terminate_instance(instance_id=instance_id)
    except cloud.LaunchRetry as exc:
        # The next sync re-sends terminations still pending after the last retry.
        raise self.retry(exc=exc, countdown=RETRY_COUNTDOWNS[min(self.request.retries, 4)]) from exc


@task(acks_late=True, ignore_result=True)
def sync_instances_task() -> None:
    """The periodic sync: fans out one sync_region_task per account and region."""
    sync.start_sync()


@task(acks_late=True, ignore_result=True)
def check_own_hosts_task() -> None:
    """The own GPU servers of every active ssh account looked at, and the nodes of every
    active Kubernetes pool (one driver call per account; offerings kept in step with
    both); a second delivery looks again and changes nothing that did not change."""
    own_hosts.check_all()
    node_offerings.check_all()


@task(acks_late=True, ignore_result=True)
def sync_region_task(account_id: int, region: str, tick: str = "") -> None:
    """One account in one region; a duplicate delivery finds the region claimed, and the
    beat's sync (``tick``: when its tick fired, ISO 8601) finds the period taken when the
    same tick, or another beat's within three quarters of a period, synced it already."""
    sync.sync_account_region(
        account_id=account_id,
        region=region,
        tick=datetime.fromisoformat(tick) if tick else None,
    )


@task(acks_late=True, ignore_result=True)
def sweep_launches_task() -> None:
    """Launches and terminations whose worker died, or whose message was lost, sent
    again (L1)."""
    recovery.sweep_launches()
    recovery.sweep_terminations()


@task(acks_late=True, ignore_result=True)
def forecast_expected_starts_task() -> None:
    """Every pool with waiting leases played forward, for the pages' expected starts."""
    expected_start.forecast_pools()


@task(acks_late=True, ignore_result=True)
def send_outbox_task() -> None:
    """Work the broker could not take when its change committed, sent oldest first; sent
    rows past their retention deleted."""
    jobs.send_all_pending()
    jobs.prune_sent()


@task(acks_late=True, ignore_result=True)
def end_expired_leases_task() -> None:
    """The lease check: warn (L5), end what is due, and give each lease that ends before
    the next check a task at its end second."""
    now = timezone.now()
    expiry.warn_ending_leases(now=now)
    ending.end_expired_leases(now=now)
    interval = settings.CELERY_BEAT_SCHEDULE["end-expired-leases"]["schedule"]
    until = now + timedelta(seconds=float(interval))
    jobs.end_leases_at(expiry.leases_ending_before(until=until, now=now))


@task(acks_late=True, ignore_result=True)
def end_lease_task(reservation_id: int) -> None:
    expiry.end_lease_at_its_end(reservation_id=reservation_id)


@task(acks_late=True, ignore_result=True)
def admit_queued_task(gpu_model_id: int) -> None:
    queue.admit_queued(gpu_model=gpu_model_id)


@task(acks_late=True, ignore_result=True)
def process_due_task() -> None:
    """Notices that ran out and leases waiting for reclaimed GPUs (Q8). Also on the beat."""
    due.process_due()


@task(acks_late=True)
def roll_up_utilization_task() -> None:
    samples.roll_up_hours()
    samples.purge_samples()


@task(acks_late=True, autoretry_for=(cloud.LaunchRetry,), max_retries=5)
def stop_instances_task(instance_ids: list[int]) -> None:
    stop.cloud_stop(instance_ids)


@task(acks_late=True, autoretry_for=(cloud.LaunchRetry,), max_retries=5)
def start_instances_task(instance_ids: list[int]) -> None:
    stop.cloud_start(instance_ids)


@task(acks_late=True)
def expire_stopped_leases_task() -> None:
    stop.expire_stopped_leases()


@task(bind=True, acks_late=True, max_retries=None)
def save_image_task(self, image_id: int) -> None:
    """CreateImage once (the driver's idempotency key), then poll until it settles."""
    try:
        settled = images.advance_image(image_id=image_id)
    except images.ProviderError as exc:
        settled = False
        if self.request.retries >= images.MAX_POLLS:
            images.fail_image(image_id=image_id, message=str(exc))
            return
    if settled:
        return
    if self.request.retries >= images.MAX_POLLS:
        images.give_up(image_id=image_id)
        return
    raise self.retry(countdown=images.POLL_SECONDS)


@task(acks_late=True, autoretry_for=(cloud.LaunchRetry,), max_retries=5, retry_backoff=True)
def create_volume_task(volume_id: int) -> None:
    volume_cloud.create_in_cloud(volume_id)


@task(acks_late=True, autoretry_for=(cloud.LaunchRetry,), max_retries=8, retry_backoff=True)
def attach_volume_task(volume_id: int) -> None:
    volume_cloud.attach_in_cloud(volume_id)


@task(acks_late=True, autoretry_for=(cloud.LaunchRetry,), max_retries=5)
def delete_volume_task(volume_id: int) -> None:
    volume_cloud.delete_in_cloud(volume_id)
