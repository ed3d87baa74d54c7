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

Tasks send through here too: the lease check's end-of-lease nudges, and every retry
(``OutboxTask``, the base of rental's tasks). Beat alone publishes directly: its tasks
are periodic, and one it cannot send runs again at its next time.
"""

from collections.abc import Iterable
from datetime import datetime, timedelta

from celery import Task
from django.conf import settings
from django.db import DatabaseError, transaction
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


def _not_before(countdown: float | None, eta: datetime | None) -> datetime | None:
    if eta is None and countdown:
        return timezone.now() + timedelta(seconds=countdown)
    return eta


def _message(
    name: str, *args: object, countdown: float | None = None, eta: datetime | None = None
) -> OutboxMessage:
    return OutboxMessage(
        task=f"rental.tasks.{name}", args=list(args), not_before=_not_before(countdown, eta)
    )


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
                app.send_task(
                    message.task,
                    args=message.args,
                    eta=message.not_before,
                    retries=message.retries,
                )
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


class OutboxTask(Task):
    """The base of rental's tasks: a retry is a message of the outbox like any other.

    Celery's own retry publishes straight to the broker, and when the broker cannot take
    it (Redis restarting while the task ran) Celery rejects the message being run without
    putting it back: the retry is lost once that reaches Redis. Launches and terminations
    would be sent again by their sweeps, which work from rows, but a stop, a start, an
    image's polling or a volume would never happen. Here Celery decides whether and when
    to retry, as before, and the retry is written as a row (with its count of tries) and
    published like every message; only if the database cannot take the row either is it
    published directly, as before. Like every message of the outbox, it carries
    positional arguments only."""

    def retry(self, *args, **options):
        return super().retry(*args, through_outbox=True, **options)

    def apply_async(self, args=None, kwargs=None, *, through_outbox=False, **options):
        if through_outbox:
            try:
                _keep([_retry_message(self.name, args or (), **options)])
            except DatabaseError:
                pass  # the database cannot keep it either: Celery's own way, below
            else:
                return None
        return super().apply_async(args, kwargs, **options)


def _retry_message(
    task: str,
    args: Iterable[object],
    *,
    retries: int,
    countdown: float | None = None,
    eta: datetime | None = None,
    **_options: object,
) -> OutboxMessage:
    """The retry Celery asked for, as a row; its other options (the task id, the
    delivery's routing) are the broker's business."""
    return OutboxMessage(
        task=task, args=list(args), not_before=_not_before(countdown, eta), retries=retries
    )


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


def sync_regions(pairs: Iterable[tuple[int, str]], *, tick: datetime) -> None:
    """Each account and region's periodic sync, a task of its own (the beat's sync fans
    out); ``tick``, when the beat's tick fired, makes each claim its region's period."""
    _keep(
        [
            _message("sync_region_task", account_id, region, tick.isoformat())
            for account_id, region in pairs
        ]
    )


def sweep_launches_now() -> None:
    _send("sweep_launches_task")


def admit_queued_on_commit(gpu_model_id: int) -> None:
    _send("admit_queued_task", gpu_model_id)


def end_leases_at(ends: Iterable[tuple[int, datetime]]) -> None:
    """A lease ended at its end second, for each (lease, end); the lease check ends them
    anyway at its next run if a nudge is late or lost."""
    _keep([_message("end_lease_task", pk, eta=end) for pk, end in ends])


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
