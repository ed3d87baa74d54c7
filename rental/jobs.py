"""The one door from services to Celery: work is sent by task name, through an outbox.

Services call these functions and never import ``rental.tasks``; tasks import services.
Each message is first a row (``OutboxMessage``) written in the caller's transaction: a
rolled-back change sends nothing, a committed one loses nothing. After the commit the
pending rows are published, oldest first (at once when there is no transaction). While
the broker cannot be reached the rows stay, and the outbox sweep (beat) publishes them
once it can, in the order they were written. Functions named ``*_on_commit`` say so:
their message leaves only if the transaction commits.

A row is published inside the transaction that marks it sent, holding its row lock
(``SKIP LOCKED``): two senders never publish the same row, and a sender that dies before
its commit leaves the row pending, to be published again. A message can therefore reach
the broker twice, never zero times; every task claims its rows with a conditional
update, so a second delivery does nothing.
"""

from collections.abc import Iterable
from datetime import datetime, timedelta

from django.conf import settings
from django.db import transaction
from django.utils import timezone
from kombu.exceptions import OperationalError as BrokerUnreachable

from portal.celery import app
from portal.outages import Outage
from rental.models import OutboxMessage

# Rows a sender publishes in one transaction: after a commit (the web's or a task's), and
# per round of the sweep, which goes on until nothing is left.
AFTER_COMMIT_BATCH = 50
SWEEP_BATCH = 500
CONSEQUENCE = "work for Celery waits in the outbox (rental_outboxmessage) for the sweep"

broker = Outage("The Celery broker")


def _message(
    name: str, *args: object, countdown: float | None = None, eta: datetime | None = None
) -> OutboxMessage:
    if eta is None and countdown:
        eta = timezone.now() + timedelta(seconds=countdown)
    return OutboxMessage(task=f"rental.tasks.{name}", args=list(args), not_before=eta)


def _keep(messages: list[OutboxMessage]) -> None:
    """Write the messages in the caller's transaction; publish after it commits."""
    if not messages:
        return
    OutboxMessage.objects.bulk_create(messages)
    # Robust: the change has committed whatever the broker says; a failure here is
    # logged and the rows wait for the sweep.
    transaction.on_commit(_send_after_commit, robust=True)


def _send_after_commit() -> None:
    send_pending(limit=AFTER_COMMIT_BATCH)


def _send(
    name: str, *args: object, countdown: float | None = None, eta: datetime | None = None
) -> None:
    _keep([_message(name, *args, countdown=countdown, eta=eta)])


def send_pending(*, limit: int = SWEEP_BATCH) -> int:
    """Publish up to ``limit`` pending messages, oldest first, and mark them sent in the
    same transaction; rows another sender holds are left to it. Stops at the first the
    broker refuses (the rest keep their places). Returns how many were published."""
    if broker.skip():
        return 0
    with transaction.atomic():
        batch = list(
            OutboxMessage.objects.filter(sent_at__isnull=True)
            .order_by("pk")
            .select_for_update(skip_locked=True)[:limit]
        )
        published: list[int] = []
        for message in batch:
            try:
                app.send_task(message.task, args=message.args, eta=message.not_before)
            except BrokerUnreachable as error:
                broker.failed(error, consequence=CONSEQUENCE)
                break
            published.append(message.pk)
        if published:
            broker.answered()
            OutboxMessage.objects.filter(pk__in=published, sent_at__isnull=True).update(
                sent_at=timezone.now()
            )
    return len(published)


def send_all_pending() -> int:
    """The sweep: publish every pending message, oldest first, until none is left or the
    broker refuses one. Returns how many were published."""
    total = 0
    while sent := send_pending(limit=SWEEP_BATCH):
        total += sent
    return total


def prune_sent(*, now: datetime | None = None) -> int:
    """Delete sent messages older than PORTAL_OUTBOX_RETENTION_HOURS; pending ones stay."""
    now = now or timezone.now()
    cutoff = now - timedelta(hours=settings.PORTAL_OUTBOX_RETENTION_HOURS)
    deleted, _ = OutboxMessage.objects.filter(sent_at__lt=cutoff).delete()
    return deleted


# -- the messages ------------------------------------------------------------------------


def provision_on_commit(instance_ids: Iterable[int]) -> None:
    _keep([_message("provision_instance_task", pk) for pk in instance_ids])


def provision_now(instance_ids: Iterable[int]) -> None:
    """Outside a transaction: send launches again (lost tasks; a duplicate claims nothing)."""
    _keep([_message("provision_instance_task", pk) for pk in instance_ids])


def terminate_on_commit(instance_id: int, *, eta: datetime | None = None) -> None:
    """``eta``: not before then (a spot instance keeps its two minutes' notice)."""
    _send("terminate_instance_task", instance_id, eta=eta)


def stop_on_commit(instance_ids: Iterable[int]) -> None:
    _send("stop_instances_task", list(instance_ids))


def start_on_commit(instance_ids: Iterable[int]) -> None:
    _send("start_instances_task", list(instance_ids))


def terminate_now(instance_ids: Iterable[int]) -> None:
    """Outside a transaction: send terminations (a duplicate finds nothing to stop)."""
    _keep([_message("terminate_instance_task", pk) for pk in instance_ids])


def save_image_on_commit(image_id: int) -> None:
    """Save a lease's instance as an image (CreateImage, then poll until it settles)."""
    _send("save_image_task", image_id)


def sync_soon(account_id: int | None = None, region: str = "") -> None:
    """A sync shortly: of one account and region when named, else the whole fan-out."""
    if account_id is not None and region:
        _send("sync_region_task", account_id, region, countdown=2)
    else:
        _send("sync_instances_task", countdown=2)


def sync_regions(pairs: Iterable[tuple[int, str]]) -> None:
    """Each account and region's periodic sync, a task of its own (the beat's sync fans
    out); the last argument, ``periodic``, makes each claim its region's period."""
    _keep([_message("sync_region_task", account_id, region, True) for account_id, region in pairs])


def sweep_launches_now() -> None:
    _send("sweep_launches_task")


def admit_queued_on_commit(gpu_model_id: int) -> None:
    _send("admit_queued_task", gpu_model_id)


def process_due_at(due: datetime) -> None:
    """A nudge at a due time (a notice ending, a reservation starting). The due times are
    rows; the periodic sweep finds them even if this message is lost or a worker restarts."""
    _send("process_due_task", eta=due)


# -- data volumes (rental.fleet.volume_cloud) ----------------------------------------


def create_volume_on_commit(volume_id: int) -> None:
    _send("create_volume_task", volume_id)


def attach_volume_on_commit(volume_id: int) -> None:
    _send("attach_volume_task", volume_id)


def delete_volume_on_commit(volume_id: int) -> None:
    _send("delete_volume_task", volume_id)
