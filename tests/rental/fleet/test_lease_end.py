"""L5: the requester is warned before the lease ends (portal and mail, with a link to
extend), once per end; at the end second the instances are terminated and usage closes
at that second."""

import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from datetime import timedelta

import psycopg
import pytest
from django.core import mail
from django.db import connection

from portal.models import AuditEvent
from rental.fleet import instances, sync, termination
from rental.loans import admission, expiry
from rental.models import Instance, Reservation, TerminationReason, UsageRecord
from tests.notices import told
from tests.rental.fleet.conftest import in_thread

pytestmark = pytest.mark.django_db
Status = Reservation.Status


@pytest.fixture
def running(f0c, cloud, t0):
    lease = admission.submit_reservation(
        actor=f0c.alice,
        project=f0c.alpha,
        gpu_model=f0c.model,
        gpu_count=1,
        duration_hours=2,
        priority="experiment",
        market="on_demand",
        now=t0,
    )
    instances.provision_instance(instance_id=lease.instances.get().pk, now=t0)
    sync.sync_instances(now=t0 + timedelta(seconds=20))
    return Reservation.objects.get(pk=lease.pk)


def warnings_of(user):
    return [(notice.subject, notice.link) for notice in told(user, starts="Ends in")]


def test_it_warns_fifteen_minutes_before_the_end_in_the_portal_and_by_mail(
    f0c, running, django_capture_on_commit_callbacks
):
    end = running.end
    assert expiry.warn_ending_leases(now=end - timedelta(minutes=15, seconds=1)) == 0
    with django_capture_on_commit_callbacks(execute=True):
        assert expiry.warn_ending_leases(now=end - timedelta(minutes=15)) == 1

    [(subject, link)] = warnings_of(f0c.alice)
    assert subject == f"Ends in 15 minutes: {running}"
    assert link == f"/leases/{running.pk}/#extend-form"
    [message] = mail.outbox
    assert message.to == ["alice@example.com"]
    assert f"ends at {end:%Y-%m-%d %H:%M}" in message.body
    assert f"http://localhost:8000/leases/{running.pk}/#extend-form" in message.body

    assert expiry.warn_ending_leases(now=end - timedelta(minutes=5)) == 0  # once


def test_it_warns_again_when_the_lease_was_extended(f0c, running, settings):
    settings.PORTAL_END_WARNING_MINUTES = 10
    expiry.warn_ending_leases(now=running.end - timedelta(minutes=10))
    later = running.end + timedelta(hours=1)
    Reservation.objects.filter(pk=running.pk).update(end=later)  # what an extension does
    assert expiry.warn_ending_leases(now=later - timedelta(minutes=11)) == 0
    assert expiry.warn_ending_leases(now=later - timedelta(minutes=7)) == 1
    assert sorted(subject for subject, _link in warnings_of(f0c.alice)) == [
        f"Ends in 10 minutes: {running}",
        f"Ends in 7 minutes: {running}",
    ]


def test_it_ends_the_lease_at_its_end_second(f0c, running):
    end = running.end
    assert expiry.leases_ending_before(until=end, now=end - timedelta(seconds=30)) == [
        (running.pk, end)
    ]
    assert not expiry.end_lease_at_its_end(
        reservation_id=running.pk, now=end - timedelta(seconds=1)
    )
    assert expiry.end_lease_at_its_end(reservation_id=running.pk, now=end)
    assert not expiry.end_lease_at_its_end(reservation_id=running.pk, now=end)  # once

    usage = UsageRecord.objects.get()
    assert (usage.end, usage.end_reason) == (end, TerminationReason.LEASE_END)
    instance = running.instances.get()
    assert instance.state == Instance.State.STOPPING
    termination.terminate_instance(instance_id=instance.pk, now=end)
    lease = Reservation.objects.get(pk=running.pk)
    assert (lease.status, lease.end_reason) == (Status.ENDED, TerminationReason.LEASE_END)
    assert UsageRecord.objects.get().end == end


# Two beats (one on each worker host, docs/operations.md "More than one machine") run the
# lease check, and schedule the end task, twice. Each step below is held inside its
# transaction, after its claim, while the other reads the same lease: only the claim
# stands between them and a second warning or a second end.


def lock_waiters() -> int:
    """Backends of this database waiting for a lock (a fresh look, inside a transaction)."""
    with connection.cursor() as cursor:
        cursor.execute("SELECT pg_stat_clear_snapshot()")
        cursor.execute(
            "SELECT count(*) FROM pg_stat_activity "
            "WHERE datname = current_database() AND wait_event_type = 'Lock'"
        )
        return cursor.fetchone()[0]


def wait_for_waiters(count: int) -> None:
    deadline = time.monotonic() + 30
    while lock_waiters() < count:
        assert time.monotonic() < deadline, f"{count} steps never waited for a lock"
        time.sleep(0.05)


@contextmanager
def writes_held(table: str) -> Iterator[Callable[[], None]]:
    """Writes to ``table`` wait, from another connection's lock, until the function this
    yields is called: a step that writes the table waits there, inside its transaction,
    holding the rows it has claimed."""
    db = connection.settings_dict
    holder = psycopg.connect(
        host=db["HOST"],
        port=db["PORT"],
        dbname=db["NAME"],
        user=db["USER"],
        password=db["PASSWORD"] or None,
    )
    try:
        holder.execute(f"LOCK TABLE {table} IN EXCLUSIVE MODE")  # until its commit
        yield holder.commit
    finally:
        holder.close()


def race(table: str, step: Callable[[], object]) -> list[BaseException]:
    """``step`` twice at once: the first holds what it claimed while it waits to write
    ``table``; the second starts then and runs into the first's claim; the first may
    write once both wait. Returns what they raised."""
    with writes_held(table) as release, in_thread(step) as first:
        wait_for_waiters(1)
        with in_thread(step) as second:
            wait_for_waiters(2)
            release()
    return [*first, *second]


@pytest.mark.django_db(transaction=True)
def test_two_lease_checks_at_once_warn_once(f0c, running):
    """The first check has claimed the warning and waits to write the notification; the
    second read the lease before that claim committed."""
    now = running.end - timedelta(minutes=10)
    assert race("portal_notification", lambda: expiry.warn_ending_leases(now=now)) == []
    assert len(warnings_of(f0c.alice)) == 1
    assert AuditEvent.objects.filter(verb="lease.end_warned").count() == 1


@pytest.mark.django_db(transaction=True)
def test_two_end_tasks_at_the_end_second_end_the_lease_once(f0c, running):
    """Each beat scheduled the lease's end task at its end second: the first has ended
    the lease and waits to write its audit event; the second read the lease as active."""

    def end_task() -> bool:
        return expiry.end_lease_at_its_end(reservation_id=running.pk, now=running.end)

    assert race("portal_auditevent", end_task) == []
    assert AuditEvent.objects.filter(verb="lease.ended").count() == 1
    usage = UsageRecord.objects.get()
    assert (usage.end, usage.end_reason) == (running.end, TerminationReason.LEASE_END)
