"""Celery tasks: thin interfaces that pass ids to services. Duplicates do nothing."""

from datetime import timedelta

from celery import shared_task
from django.conf import settings
from django.utils import timezone

from rental import jobs
from rental.agent import samples
from rental.catalog import images
from rental.fleet import cloud, instances, recovery, stop, sync, termination, volume_cloud
from rental.fleet.retry import RETRY_COUNTDOWNS
from rental.loans import due, ending, expiry, queue


# The launch's own attempt rows decide when to give up (PORTAL_LAUNCH_MAX_ATTEMPTS and
# the provisioning timeout); Celery's limit is only a backstop.
@shared_task(bind=True, acks_late=True, max_retries=100)
def provision_instance_task(self, instance_id: int) -> None:
    try:
        instances.provision_instance(instance_id=instance_id)
    except cloud.LaunchRetry as exc:
        if self.request.retries >= self.max_retries:
            instances.fail_instance(instance_id=instance_id, message=str(exc))
            return
        countdown = exc.countdown or RETRY_COUNTDOWNS[self.request.retries]
        raise self.retry(exc=exc, countdown=countdown) from exc


@shared_task(bind=True, acks_late=True, max_retries=len(RETRY_COUNTDOWNS))
def terminate_instance_task(self, instance_id: int) -> None:
    try:
        termination.terminate_instance(instance_id=instance_id)
    except cloud.LaunchRetry as exc:
        # The next sync re-sends terminations still pending after the last retry.
        raise self.retry(exc=exc, countdown=RETRY_COUNTDOWNS[min(self.request.retries, 4)]) from exc


@shared_task(acks_late=True, ignore_result=True)
def sync_instances_task() -> None:
    """The periodic sync: fans out one sync_region_task per account and region."""
    sync.start_sync()


@shared_task(acks_late=True, ignore_result=True)
def sync_region_task(account_id: int, region: str, periodic: bool = False) -> None:
    """One account in one region; a duplicate delivery finds the region claimed, and a
    ``periodic`` one (the beat's) finds the period taken when another beat's tick, or a
    second delivery of its own, synced the region less than three quarters of a period
    ago."""
    sync.sync_account_region(account_id=account_id, region=region, periodic=periodic)


@shared_task(acks_late=True, ignore_result=True)
def sweep_launches_task() -> None:
    """Launches and terminations whose worker died, or whose message was lost, sent
    again (L1)."""
    recovery.sweep_launches()
    recovery.sweep_terminations()


@shared_task(acks_late=True, ignore_result=True)
def send_outbox_task() -> None:
    """Work the broker could not take when its change committed, sent oldest first; sent
    rows past their retention deleted."""
    jobs.send_all_pending()
    jobs.prune_sent()


@shared_task(acks_late=True, ignore_result=True)
def end_expired_leases_task() -> None:
    """The lease check: warn (L5), end what is due, and give each lease that ends before
    the next check a task at its end second."""
    now = timezone.now()
    expiry.warn_ending_leases(now=now)
    ending.end_expired_leases(now=now)
    interval = settings.CELERY_BEAT_SCHEDULE["end-expired-leases"]["schedule"]
    until = now + timedelta(seconds=float(interval))
    for pk, end in expiry.leases_ending_before(until=until, now=now):
        end_lease_task.apply_async(args=[pk], eta=end)


@shared_task(acks_late=True, ignore_result=True)
def end_lease_task(reservation_id: int) -> None:
    expiry.end_lease_at_its_end(reservation_id=reservation_id)


@shared_task(acks_late=True, ignore_result=True)
def admit_queued_task(gpu_model_id: int) -> None:
    queue.admit_queued(gpu_model=gpu_model_id)


@shared_task(acks_late=True, ignore_result=True)
def process_due_task() -> None:
    """Notices that ran out and leases waiting for reclaimed GPUs (Q8). Also on the beat."""
    due.process_due()


@shared_task(acks_late=True)
def roll_up_utilization_task() -> None:
    samples.roll_up_hours()
    samples.purge_samples()


@shared_task(acks_late=True, autoretry_for=(cloud.LaunchRetry,), max_retries=5)
def stop_instances_task(instance_ids: list[int]) -> None:
    stop.cloud_stop(instance_ids)


@shared_task(acks_late=True, autoretry_for=(cloud.LaunchRetry,), max_retries=5)
def start_instances_task(instance_ids: list[int]) -> None:
    stop.cloud_start(instance_ids)


@shared_task(acks_late=True)
def expire_stopped_leases_task() -> None:
    stop.expire_stopped_leases()


@shared_task(bind=True, acks_late=True, max_retries=None)
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


@shared_task(acks_late=True, autoretry_for=(cloud.LaunchRetry,), max_retries=5, retry_backoff=True)
def create_volume_task(volume_id: int) -> None:
    volume_cloud.create_in_cloud(volume_id)


@shared_task(acks_late=True, autoretry_for=(cloud.LaunchRetry,), max_retries=8, retry_backoff=True)
def attach_volume_task(volume_id: int) -> None:
    volume_cloud.attach_in_cloud(volume_id)


@shared_task(acks_late=True, autoretry_for=(cloud.LaunchRetry,), max_retries=5)
def delete_volume_task(volume_id: int) -> None:
    volume_cloud.delete_in_cloud(volume_id)
