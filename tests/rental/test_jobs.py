"""The outbox (rental.jobs): work for Celery is a row of the transaction that asks for it,
published after the commit, kept while the broker is down and sent once it is back,
oldest first; two senders never publish the same row; sent rows are pruned."""

import threading
from datetime import timedelta

import pytest
from django.db import connection, transaction
from django.utils import timezone

from rental import jobs, tasks
from rental.models import OutboxMessage
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
