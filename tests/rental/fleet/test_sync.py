"""L3: the sync against the local EC2 endpoint: a grace period and a describe by id
before a row is marked gone, the cloud's own termination time, one describe per account
and region, and one failing account that never blocks the others."""

from datetime import timedelta

import pytest
from django.db import connection
from django.test.utils import CaptureQueriesContext

from rental.fleet import instances, sync, termination
from rental.fleet.cloud import provider_for
from rental.loans import admission, ending
from rental.models import Instance, ProviderAccount, Reservation, TerminationReason, UsageRecord
from tests import factories
from tests.rental.fleet.conftest import leaked

pytestmark = pytest.mark.django_db
State = Instance.State
Status = Reservation.Status


def launch(f0c, now, *, gpus=1):
    lease = admission.submit_reservation(
        actor=f0c.alice,
        project=f0c.alpha,
        gpu_model=f0c.model,
        gpu_count=gpus,
        duration_hours=2,
        priority="experiment",
        market="on_demand",
        now=now,
    )
    for instance in lease.instances.all():
        instances.provision_instance(instance_id=instance.pk, now=now)
    return lease


def test_it_waits_out_the_grace_period_for_an_instance_describe_lists_late(
    f0c, cloud, t0, settings
):
    """Hidden from describe for 40 s after its launch, with a 60 s grace: never marked
    gone, and billed whole from the sync that first sees it running."""
    settings.PORTAL_SYNC_GRACE_SECONDS = 60
    clock = [t0]
    cloud.hide_new_instances(40, clock=lambda: clock[0])
    lease = launch(f0c, t0)
    instance = lease.instances.get()

    for seconds in (10, 30):
        clock[0] = t0 + timedelta(seconds=seconds)
        sync.sync_instances(now=clock[0])
        instance.refresh_from_db()
        assert instance.state == State.LAUNCHING
        assert instance.missing_since == t0 + timedelta(seconds=10)

    clock[0] = t0 + timedelta(seconds=45)
    sync.sync_instances(now=clock[0])
    instance.refresh_from_db()
    assert (instance.state, instance.missing_since) == (State.RUNNING, None)
    usage = UsageRecord.objects.get()
    assert (usage.start, usage.end) == (t0 + timedelta(seconds=45), None)

    ending.end_reservation(
        actor=f0c.alice, reservation=lease, now=t0 + timedelta(seconds=45 + 3600)
    )
    assert UsageRecord.objects.get().end - usage.start == timedelta(hours=1)


def test_it_marks_gone_only_after_the_grace_and_a_describe_by_id(f0c, cloud, t0, settings):
    settings.PORTAL_SYNC_GRACE_SECONDS = 60
    lease = launch(f0c, t0)
    sync.sync_instances(now=t0 + timedelta(seconds=20))  # running from 10:00:20
    instance = lease.instances.get()
    cloud.forget([instance.external_id])  # the cloud no longer lists it at all

    first_missed = t0 + timedelta(minutes=10)
    sync.sync_instances(now=first_missed)
    sync.sync_instances(now=first_missed + timedelta(seconds=59))
    instance.refresh_from_db()
    assert instance.state == State.RUNNING
    cloud.clear_requests()

    sync.sync_instances(now=first_missed + timedelta(seconds=60))
    assert cloud.count("DescribeInstances") == 2  # the describe and one by id
    instance.refresh_from_db()
    assert instance.state == State.TERMINATED
    assert instance.termination_reason == TerminationReason.PROVIDER
    usage = UsageRecord.objects.get()
    assert usage.end == first_missed  # when it was first seen missing, not a minute later
    assert Reservation.objects.get(pk=lease.pk).status == Status.ENDED


def test_it_keeps_a_row_that_the_describe_by_id_still_finds(f0c, cloud, t0, settings):
    settings.PORTAL_SYNC_GRACE_SECONDS = 60
    lease = launch(f0c, t0)
    sync.sync_instances(now=t0 + timedelta(seconds=20))
    instance = lease.instances.get()
    cloud.forget([instance.external_id], times=2)  # two describes miss it; then it is back

    sync.sync_instances(now=t0 + timedelta(minutes=1))
    sync.sync_instances(now=t0 + timedelta(minutes=3))  # overdue: asked by id

    instance.refresh_from_db()
    assert (instance.state, instance.missing_since) == (State.RUNNING, None)
    assert UsageRecord.objects.get().end is None
    assert leaked(f0c.account) == []


def test_it_closes_usage_at_the_clouds_own_termination_time(f0c, cloud, t0):
    lease = launch(f0c, t0)
    sync.sync_instances(now=t0 + timedelta(seconds=20))
    instance = lease.instances.get()
    provider_for(instance).terminate([instance.external_id], region="us-east-1")
    [cloud_view] = provider_for(instance).describe_ids([instance.external_id], region="us-east-1")
    assert cloud_view.state_changed_at is not None

    sync.sync_instances(now=cloud_view.state_changed_at + timedelta(hours=1))

    usage = UsageRecord.objects.get()
    assert usage.end == max(cloud_view.state_changed_at, usage.start)
    assert usage.end_reason == TerminationReason.PROVIDER


def test_it_isolates_an_account_whose_sync_fails(f0c, cloud, t0):
    lease = launch(f0c, t0)
    broken = factories.account(
        endpoint_url=cloud.url, name="Broken", access_key_id="AKIDREVOKED00001"
    )
    Instance.objects.create(
        reservation=lease,
        account=broken,
        offering=f0c.offering,
        region="us-east-1",
        market="on_demand",
        gpu_count=1,
        rate_per_hour=f0c.offering.on_demand_price_per_hour,
        state=State.RUNNING,
        external_id="i-0123456789abcdef0",
        running_at=t0,
    )
    cloud.require_access_keys({"AKIDTESTGOOD0001"})

    later = t0 + timedelta(seconds=30)
    sync.sync_instances(now=later)

    good = ProviderAccount.objects.get(pk=f0c.account.pk)
    assert (good.synced_at, good.sync_error) == (later, "")
    assert lease.instances.get(account=f0c.account).state == State.RUNNING
    broken.refresh_from_db()
    assert broken.synced_at is None
    assert broken.sync_failed_at == later
    assert "auth" in broken.sync_error and "AuthFailure" in broken.sync_error
    assert lease.instances.get(account=broken).state == State.RUNNING  # unknown, not gone


def test_it_makes_one_describe_and_no_writes_for_a_quiet_region(f0c, cloud, t0):
    for _ in range(3):
        launch(f0c, t0, gpus=2)
    sync.sync_instances(now=t0 + timedelta(seconds=20))
    assert Instance.objects.filter(state=State.RUNNING).count() == 6
    cloud.clear_requests()

    with CaptureQueriesContext(connection) as queries:
        sync.sync_instances(now=t0 + timedelta(seconds=50))

    assert cloud.count("DescribeInstances") == 1
    writes = [q["sql"] for q in queries if q["sql"].startswith(("UPDATE", "INSERT"))]
    # The region's row if missing (one INSERT … ON CONFLICT DO NOTHING), its claim, its
    # result with the claim's release, the account's last good sync.
    assert [w.split('"')[1] for w in writes] == [
        "rental_regionsync",
        "rental_regionsync",
        "rental_regionsync",
        "rental_provideraccount",
    ]
    reads = [q for q in queries if not q["sql"].startswith(("SAVEPOINT", "RELEASE"))]
    # The same for 6 instances or 10,000 (see bench/); one of them locks the leases first,
    # one is the termination sweep's look at the rows stopping (none here).
    assert len(reads) == 19


def test_a_quiet_tick_sends_the_same_statements_for_many_instances_as_for_one(f0c, cloud, t0):
    """The fleet's size changes no statement: the rows' ids go as one array parameter, so
    a region with 5 instances sends the very statements (and as many parameters) as one
    with 1 (``bench/sync.py`` measures the same at 10,000)."""

    def tick_statements(seconds: int) -> list[tuple[str, int]]:
        sent: list[tuple[str, int]] = []

        def note(execute, sql, params, many, context):
            if not sql.startswith(("SAVEPOINT", "RELEASE")):
                sent.append((sql, len(params or ())))
            return execute(sql, params, many, context)

        with connection.execute_wrapper(note):
            sync.sync_instances(now=t0 + timedelta(seconds=seconds))
        return sent

    launch(f0c, t0)
    sync.sync_instances(now=t0 + timedelta(seconds=20))
    small = tick_statements(50)
    for _ in range(2):  # the project's ceiling is 6 GPUs
        launch(f0c, t0 + timedelta(seconds=60), gpus=2)
    sync.sync_instances(now=t0 + timedelta(seconds=80))
    assert Instance.objects.filter(state=State.RUNNING).count() == 5
    large = tick_statements(110)

    assert len(small) == 19
    assert large == small


def test_it_terminates_a_launch_that_never_runs_within_the_provisioning_timeout(
    f0c, cloud, t0, settings
):
    settings.PORTAL_PROVISIONING_TIMEOUT_SECONDS = 120
    settings.PORTAL_SYNC_GRACE_SECONDS = 600
    clock = [t0]
    cloud.hide_new_instances(3600, clock=lambda: clock[0])  # never seen running
    lease = launch(f0c, t0)
    instance = lease.instances.get()
    for seconds in (30, 90):
        clock[0] = t0 + timedelta(seconds=seconds)
        sync.sync_instances(now=clock[0])
    assert Reservation.objects.get(pk=lease.pk).status == Status.PROVISIONING

    clock[0] = t0 + timedelta(seconds=150)
    sync.sync_instances(now=clock[0])
    instance.refresh_from_db()
    assert instance.state == State.STOPPING
    termination.terminate_instance(instance_id=instance.pk, now=clock[0])

    lease.refresh_from_db()
    assert (lease.status, lease.status_code) == (Status.FAILED, "provisioning_timeout")
    assert "Not running 2 minutes after the launch began" in str(lease.status_message)
    cloud.clear_faults()
    assert [
        c.state.value
        for c in provider_for(instance).describe_ids([instance.external_id], region="us-east-1")
    ] == ["terminated"]
    assert not UsageRecord.objects.exists()


def test_it_keeps_an_accounts_error_when_only_one_of_its_regions_fails(f0c, cloud, t0):
    f0c.account.regions = ["us-east-1", "us-west-2"]
    f0c.account.save()
    cloud.inject("DescribeInstances", "RequestLimitExceeded", where={"X-Region": "us-west-2"})
    sync.sync_instances(now=t0)
    account = ProviderAccount.objects.get(pk=f0c.account.pk)
    assert account.synced_at is None
    assert account.sync_error.startswith("us-west-2: throttled: RequestLimitExceeded")
    sync.sync_instances(now=t0 + timedelta(seconds=30))
    account.refresh_from_db()
    assert (account.synced_at, account.sync_error) == (t0 + timedelta(seconds=30), "")
