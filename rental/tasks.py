"""Celery tasks: thin interfaces that pass ids to services. Duplicates do nothing."""

from celery import shared_task

from rental import services

RETRY_COUNTDOWNS = (5, 15, 45, 120, 300)


@shared_task(bind=True, acks_late=True, max_retries=len(RETRY_COUNTDOWNS))
def provision_instance_task(self, instance_id: int) -> None:
    try:
        services.provision_instance(instance_id=instance_id)
    except services.LaunchRetry as exc:
        if self.request.retries >= self.max_retries:
            services.fail_instance(instance_id=instance_id, message=str(exc))
            return
        raise self.retry(exc=exc, countdown=RETRY_COUNTDOWNS[self.request.retries]) from exc


@shared_task(bind=True, acks_late=True, max_retries=len(RETRY_COUNTDOWNS))
def terminate_instance_task(self, instance_id: int) -> None:
    try:
        services.terminate_instance(instance_id=instance_id)
    except services.LaunchRetry as exc:
        # The next sync re-sends terminations still pending after the last retry.
        raise self.retry(exc=exc, countdown=RETRY_COUNTDOWNS[min(self.request.retries, 4)]) from exc


@shared_task(acks_late=True, ignore_result=True)
def sync_instances_task() -> None:
    services.sync_instances()


@shared_task(acks_late=True, ignore_result=True)
def end_expired_leases_task() -> None:
    services.end_expired_leases()


@shared_task(acks_late=True, ignore_result=True)
def admit_queued_task(gpu_model_id: int) -> None:
    services.admit_queued(gpu_model=gpu_model_id)


@shared_task(acks_late=True)
def roll_up_utilization_task() -> None:
    from rental.services import samples

    samples.roll_up_hours()
    samples.purge_samples()


@shared_task(acks_late=True, autoretry_for=(services.LaunchRetry,), max_retries=5)
def stop_instances_task(instance_ids: list[int]) -> None:
    from rental.services import stop

    stop.cloud_stop(instance_ids)


@shared_task(acks_late=True, autoretry_for=(services.LaunchRetry,), max_retries=5)
def start_instances_task(instance_ids: list[int]) -> None:
    from rental.services import stop

    stop.cloud_start(instance_ids)


@shared_task(acks_late=True)
def expire_stopped_leases_task() -> None:
    from rental.services import stop

    stop.expire_stopped_leases()
