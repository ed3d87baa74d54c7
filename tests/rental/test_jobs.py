"""The outbox (rental.jobs): work for Celery is a row of the transaction that asks for it,
published after the commit, kept while the broker is down and sent once it is back,
oldest first; two senders never publish the same row; sent rows are pruned. Tasks send
through it too: the lease check's nudges and every retry."""

import threading
from datetime import timedelta

import pytest
from celery.exceptions import Retry
from django.db import DatabaseError, connection, transaction
from django.utils import timezone

from portal.celery import app
from rental import jobs, tasks
from rental.models import OutboxMessage, Reservation
from tests.api.leases_world import running_lease
from tests.fixtures_outages import queued

pytestmark = pytest.mark.django_db
PROVISION = "rental.tasks.provision_instance_task"
TERMINATE = "rental.tasks.terminate_instance_task"


def kept() -> list[tuple[str, list, bool]]:
    return [(m.task, m.args, m.sent_at is not None) for m in OutboxMessage.objects.order_by("pk")]


def test_it_keeps_a_message_only_if_its_transaction_commits(
    broker, t0, django_capture_on_commit_callbacks
):
    with pytest.raises(RuntimeError), transaction.atomic():
        jobs.provision_on_commit([11])
        raise RuntimeError("the change is rolled back")
    assert not OutboxMessage.objects.exists()

    notice = t0 + timedelta(minutes=2)
    with django_capture_on_commit_callbacks() as after_commit:
        jobs.provision_on_commit([11, 12])
        jobs.terminate_on_commit(13, eta=notice)
        before = timezone.now()
        jobs.sync_soon()
    assert kept() == [
        (PROVISION, [11], False),
        (PROVISION, [12], False),
        (TERMINATE, [13], False),
        ("rental.tasks.sync_instances_task", [], False),
    ]
    terminate, sync = OutboxMessage.objects.order_by("pk")[2:]
    assert terminate.not_before == notice  # the eta is kept
    assert before + timedelta(seconds=2) <= sync.not_before <= timezone.now() + timedelta(seconds=2)
    assert queued() == []  # nothing leaves before the commit

    for callback in after_commit:
        callback()
    assert [(q.task, q.args) for q in queued()] == [
        (PROVISION, [11]),
        (PROVISION, [12]),
        (TERMINATE, [13]),
        ("rental.tasks.sync_instances_task", []),
    ]
    assert queued()[2].eta == notice.isoformat()
    assert not OutboxMessage.objects.filter(sent_at__isnull=True).exists()


def test_it_keeps_messages_while_the_broker_is_down_and_sends_each_once_when_it_is_back(
    broker, caplog, monkeypatch, django_capture_on_commit_callbacks
):
    broker.down()
    for pk in (21, 22, 23):
        with django_capture_on_commit_callbacks(execute=True):
            jobs.provision_on_commit([pk])
    with django_capture_on_commit_callbacks(execute=True):
        jobs.stop_on_commit([24, 25])
    assert kept() == [
        (PROVISION, [21], False),
        (PROVISION, [22], False),
        (PROVISION, [23], False),
        ("rental.tasks.stop_instances_task", [[24, 25]], False),
    ]
    down = [r.getMessage() for r in caplog.records if "broker cannot be reached" in r.getMessage()]
    assert len(down) == 1, down  # one line for the outage, not one per message
    assert "waits in the outbox" in down[0]

    broker.back()
    monkeypatch.setattr(jobs, "SWEEP_BATCH", 3)  # the sweep goes on past one batch
    tasks.send_outbox_task()
    assert [(q.task, q.args) for q in queued()] == [
        (PROVISION, [21]),
        (PROVISION, [22]),
        (PROVISION, [23]),
        ("rental.tasks.stop_instances_task", [[24, 25]]),
    ]
    assert all(sent for _task, _args, sent in kept())
    tasks.send_outbox_task()  # a second sweep sends nothing again
    assert len(queued()) == 4
    assert any("broker answers again" in r.getMessage() for r in caplog.records)


@pytest.mark.django_db(transaction=True)
def test_it_never_publishes_a_message_twice_when_two_senders_run_at_once(broker, monkeypatch):
    broker.down()
    for pk in range(1, 7):
        jobs.provision_now([pk])  # no transaction: tried at once, and kept
    assert [args for _task, args, sent in kept() if not sent] == [[n] for n in range(1, 7)]
    broker.back()

    publish = jobs.app.send_task
    second: list[int] = []

    def send_task(*args, **kwargs):
        # The first sender holds its rows (1-3) while a second sender runs in full.
        if not second:
            second.append(-1)
            thread = threading.Thread(target=lambda: second.append(other_sender()))
            thread.start()
            thread.join()
        return publish(*args, **kwargs)

    def other_sender() -> int:
        try:
            return jobs.send_pending()
        finally:
            connection.close()  # the thread's own connection

    monkeypatch.setattr(jobs.app, "send_task", send_task)
    assert jobs.send_pending(limit=3) == 3
    assert second == [-1, 3]  # it skipped the rows the first held and sent the others
    assert [q.args for q in queued()] == [[4], [5], [6], [1], [2], [3]]  # each once
    assert jobs.send_pending() == 0
    assert all(sent for _task, _args, sent in kept())


def test_it_prunes_sent_messages_after_their_retention_and_keeps_pending_ones(settings, t0):
    settings.PORTAL_OUTBOX_RETENTION_HOURS = 24
    old = OutboxMessage.objects.create(task=PROVISION, args=[1], sent_at=t0 - timedelta(hours=25))
    recent = OutboxMessage.objects.create(
        task=PROVISION, args=[2], sent_at=t0 - timedelta(hours=23)
    )
    pending = OutboxMessage.objects.create(task=PROVISION, args=[3], created=t0 - timedelta(days=9))

    assert jobs.prune_sent(now=t0) == 1

    assert set(OutboxMessage.objects.values_list("pk", flat=True)) == {recent.pk, pending.pk}
    assert not OutboxMessage.objects.filter(pk=old.pk).exists()


def test_the_lease_check_sends_its_end_of_lease_nudges_through_the_outbox(f0, broker):
    lease = running_lease(f0)
    end = timezone.now().replace(microsecond=0) + timedelta(seconds=10)
    Reservation.objects.filter(pk=lease.pk).update(end=end)
    broker.down()

    tasks.end_expired_leases_task()  # sent straight to the broker, this raised

    [nudge] = OutboxMessage.objects.filter(task="rental.tasks.end_lease_task")
    assert (nudge.args, nudge.not_before, nudge.sent_at) == ([lease.pk], end, None)
    broker.back()
    tasks.send_outbox_task()
    assert ("rental.tasks.end_lease_task", [lease.pk], end.isoformat()) in [
        (q.task, q.args, q.eta) for q in queued()
    ]


def retry(task, args: list, *, retries: int, countdown: int) -> None:
    """The task's retry as a worker runs it: Celery retries only a task it delivered, and
    says so by raising Retry."""
    task.push_request(id="delivered", args=args, kwargs={}, retries=retries, called_directly=False)
    try:
        with pytest.raises(Retry):
            task.retry(countdown=countdown)
    finally:
        task.pop_request()


def test_a_retry_is_kept_in_the_outbox_while_the_broker_is_down(broker):
    broker.down()
    before = timezone.now()

    retry(tasks.stop_instances_task, [[7, 8]], retries=2, countdown=30)

    [kept] = OutboxMessage.objects.all()
    assert (kept.task, kept.args, kept.retries, kept.sent_at) == (
        "rental.tasks.stop_instances_task",
        [[7, 8]],
        3,
        None,
    )
    assert (
        before + timedelta(seconds=30) <= kept.not_before <= timezone.now() + timedelta(seconds=30)
    )
    broker.back()
    tasks.send_outbox_task()
    [sent] = queued()
    assert (sent.task, sent.args, sent.retries) == ("rental.tasks.stop_instances_task", [[7, 8]], 3)
    assert sent.eta == kept.not_before.isoformat()


def test_a_retry_the_database_cannot_keep_goes_straight_to_the_broker(broker, monkeypatch):
    def restarting(*args, **kwargs):
        raise DatabaseError("the database system is shutting down")

    monkeypatch.setattr(OutboxMessage.objects, "bulk_create", restarting)

    retry(tasks.save_image_task, [5], retries=0, countdown=15)

    assert [(q.task, q.args, q.retries) for q in queued()] == [
        ("rental.tasks.save_image_task", [5], 1)
    ]


def test_every_rental_task_retries_through_the_outbox():
    rental = {name: task for name, task in app.tasks.items() if name.startswith("rental.tasks.")}
    assert len(rental) >= 17
    assert all(isinstance(task, jobs.OutboxTask) for task in rental.values())
