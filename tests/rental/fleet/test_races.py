"""Races between the steps that drive one instance: the two of issue 7 that left an
instance running after the database said it ended, each reproduced by holding a request
at the local EC2 endpoint while the other step runs (L1, L3; scenario 8), and the launch
sweep against the sync (issue 23)."""

import threading
import time
from datetime import timedelta

import pytest
from django.conf import settings
from django.db import connection, transaction
from django.utils import timezone

from rental.fleet import instances, recovery, termination
from rental.fleet import sync as sync_services
from rental.fleet.cloud import provider_for
from rental.loans import admission, ending
from rental.models import Instance, Reservation, TerminationReason, UsageRecord
from tests.rental.fleet.conftest import cloud_instances, in_thread, leaked

pytestmark = pytest.mark.django_db(transaction=True)
State = Instance.State
Status = Reservation.Status


def submit(f0c):
    return admission.submit_reservation(
        actor=f0c.alice,
        project=f0c.alpha,
        gpu_model=f0c.model,
        gpu_count=1,
        duration_hours=2,
        priority="experiment",
        market="on_demand",
    )


def test_it_never_ends_a_row_whose_cloud_id_was_recorded_after_the_sync_read(f0c, cloud):
    """The sync reads a launching row, its describe snapshot is taken before RunInstances
    and answered after the launch was recorded: the row is not marked terminated."""
    lease = submit(f0c)
    instance = lease.instances.get()
    cloud.delay("RunInstances", 2)  # the launch has claimed its row and waits for the cloud
    with in_thread(lambda: instances.provision_instance(instance_id=instance.pk)) as launch:
        assert cloud.wait_until_held("RunInstances")
        cloud.delay("DescribeInstances", 3, when="after")  # snapshot now, answer in 3 s
        with in_thread(lambda: sync_services.sync_instances()) as sync:
            assert cloud.wait_until_held("DescribeInstances")
            assert cloud.count("RunInstances") == 0  # the snapshot predates the launch
    assert not launch and not sync

    instance.refresh_from_db()
    assert instance.external_id
    assert instance.state == State.LAUNCHING  # not "ended by the provider"
    assert Reservation.objects.get(pk=lease.pk).status == Status.PROVISIONING
    sync_services.sync_instances()
    instance.refresh_from_db()
    assert instance.state == State.RUNNING
    assert leaked(f0c.account) == []


def test_it_terminates_a_launch_that_answers_after_its_lease_ended(f0c, cloud):
    """The lease ends while RunInstances is held: the terminate finds nothing by key yet
    and must not close the row; the late answer is terminated at once."""
    lease = submit(f0c)
    instance = lease.instances.get()
    cloud.delay("RunInstances", 2)
    with in_thread(lambda: instances.provision_instance(instance_id=instance.pk)) as launch:
        assert cloud.wait_until_held("RunInstances")
        ending.end_reservation(actor=f0c.alice, reservation=lease)
        termination.terminate_instance(instance_id=instance.pk)  # the worker's terminate task
        instance.refresh_from_db()
        assert instance.state == State.STOPPING  # the launch's answer may still come
    assert not launch

    instance.refresh_from_db()
    assert instance.external_id  # the late answer is on the row, not lost
    assert instance.state == State.STOPPING
    termination.terminate_instance(instance_id=instance.pk)  # the one record_launch enqueued

    instance.refresh_from_db()
    assert instance.state == State.TERMINATED
    assert instance.termination_reason == TerminationReason.USER
    assert Reservation.objects.get(pk=lease.pk).status == Status.ENDED
    assert leaked(f0c.account) == []
    assert [item.state.value for item in cloud_instances(f0c.account)] == ["terminated"]
    assert not UsageRecord.objects.exists()  # it never ran for the user: nothing billed


def test_it_ends_at_once_a_lease_whose_launch_the_cloud_refused(f0c, cloud):
    lease = submit(f0c)
    instance = lease.instances.get()
    cloud.delay("RunInstances", 2)
    cloud.inject("RunInstances", "InsufficientInstanceCapacity")
    with in_thread(lambda: instances.provision_instance(instance_id=instance.pk)) as launch:
        assert cloud.wait_until_held("RunInstances")
        ending.end_reservation(actor=f0c.alice, reservation=lease)
        termination.terminate_instance(instance_id=instance.pk)
    assert [type(error).__name__ for error in launch] == ["LaunchRetry"]

    termination.terminate_instance(instance_id=instance.pk, now=timezone.now())
    instance.refresh_from_db()
    assert instance.state == State.TERMINATED
    assert Reservation.objects.get(pk=lease.pk).status == Status.ENDED
    assert cloud_instances(f0c.account) == []


def _waiting_on_a_lock() -> bool:
    with connection.cursor() as cursor:
        cursor.execute(
            "SELECT count(*) FROM pg_stat_activity WHERE datname = current_database()"
            " AND wait_event_type = 'Lock'"
        )
        return cursor.fetchone()[0] > 0


def test_a_sweep_never_puts_back_a_launch_the_sync_has_just_found_running(f0c, cloud):
    """Issue 23's stuck lease: the launch sweep read a stale claim (launching, no cloud id)
    while the sync, in its transaction, found the instance by its key and marked it
    running. The sweep's update, waiting for the sync's row lock, must check the row
    again once it gets it: the row stays running, not 'requested' while billing."""
    lease = submit(f0c)
    instance = lease.instances.get()
    stale = timezone.now() - timedelta(seconds=settings.PORTAL_LAUNCH_STALE_SECONDS + 60)
    Instance.objects.filter(pk=instance.pk).update(state=State.LAUNCHING, claimed_at=stale)
    # What the dead worker's RunInstances created: in the cloud, carrying the row's key.
    provider_for(instance).launch(
        instances.launch_spec(instance), idempotency_key=instance.idempotency_key
    )
    [found] = cloud_instances(f0c.account)
    marked, release = threading.Event(), threading.Event()

    def sync_holding_its_commit() -> None:
        with transaction.atomic():
            sync_services.apply_sync(
                rows=[sync_services.SyncRow(instance.pk, "")], cloud=[found], now=timezone.now()
            )
            marked.set()
            assert release.wait(30)

    with in_thread(sync_holding_its_commit) as syncing:
        assert marked.wait(30)
        with in_thread(lambda: recovery.sweep_launches()) as sweeping:
            deadline = time.monotonic() + 30
            while not _waiting_on_a_lock():  # the sweep's update waits for the sync's row
                assert time.monotonic() < deadline, "the sweep never waited for the row"
                time.sleep(0.05)
            release.set()
    assert not syncing and not sweeping

    instance.refresh_from_db()
    assert (instance.state, instance.external_id) == (State.RUNNING, found.external_id)
    assert UsageRecord.objects.filter(instance=instance, end__isnull=True).count() == 1
    assert leaked(f0c.account) == []


def test_ending_a_lease_never_deadlocks_with_the_sync_of_its_instance(f0c, cloud):
    """The chaos test's deadlock: "End" locks the lease, then its instances; the sync
    locked the instance first (and its lease through the join) and waited for the lease,
    so PostgreSQL failed one of them. Both now take the lease first."""
    lease = submit(f0c)
    instance = lease.instances.get()
    instances.provision_instance(instance_id=instance.pk)
    sync_services.sync_instances()
    instance.refresh_from_db()
    assert instance.state == State.RUNNING
    [found] = cloud_instances(f0c.account)
    holding, release = threading.Event(), threading.Event()

    def end_holding_the_lease() -> None:  # end_reservation, paused after its first lock
        with transaction.atomic():
            locked = Reservation.objects.select_for_update().get(pk=lease.pk)
            holding.set()
            assert release.wait(30)
            ending.end_locked(locked, reason=TerminationReason.USER, at=timezone.now())

    row = sync_services.SyncRow(instance.pk, instance.external_id)
    with in_thread(end_holding_the_lease) as person:
        assert holding.wait(30)
        with in_thread(
            lambda: sync_services.apply_sync(rows=[row], cloud=[found], now=timezone.now())
        ) as sync:
            deadline = time.monotonic() + 30
            while not _waiting_on_a_lock():  # the sync waits for the lease the person holds
                assert time.monotonic() < deadline, "the sync never waited for the lease"
                time.sleep(0.05)
            release.set()
    assert person == [] and sync == []
    assert Reservation.objects.get(pk=lease.pk).status == Status.ENDING
    assert Instance.objects.get(pk=instance.pk).state == State.STOPPING
