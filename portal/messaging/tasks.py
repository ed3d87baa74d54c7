"""Celery tasks of the chat channels: thin interfaces to ``portal.messaging.delivery``."""

import logging

from celery import shared_task
from django.conf import settings
from kombu.exceptions import OperationalError as BrokerUnreachable

from portal.messaging import delivery

logger = logging.getLogger(__name__)


@shared_task(
    bind=True,
    acks_late=True,
    ignore_result=True,
    autoretry_for=(delivery.TryAgain,),
    retry_backoff=True,
    retry_backoff_max=delivery.RETRY_BACKOFF_MAX,
    retry_jitter=True,
    max_retries=settings.PORTAL_MESSAGING_MAX_RETRIES,
)
def deliver_task(self, delivery_id: int) -> None:
    """Send one recorded delivery; a failure that may pass is tried again with
    exponential backoff, and the last try marks it failed."""
    delivery.deliver(delivery_id, final=self.request.retries >= self.max_retries)


@shared_task(ignore_result=True)
def sweep_deliveries_task() -> None:
    """Beat: send again the deliveries whose task was lost (the broker was away when
    their change committed, or a worker lost it)."""
    enqueue(delivery.lost())


@shared_task(ignore_result=True)
def send_digests_task() -> None:
    """Beat, daily at PORTAL_MESSAGING_DIGEST_HOUR: each channel's digest, per language."""
    enqueue(delivery.make_digests())


def enqueue(delivery_ids: list[int]) -> None:
    """Queue one task per delivery. A broker out of reach loses nothing: the deliveries
    wait in their rows, and the sweep queues them again."""
    for delivery_id in delivery_ids:
        try:
            deliver_task.apply_async(args=[delivery_id])
        except BrokerUnreachable:
            logger.warning("Broker out of reach: chat deliveries wait for the sweep")
            return
