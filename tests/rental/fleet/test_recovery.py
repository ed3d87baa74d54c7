"""L1 recovery and L3 fan-out: a launch whose worker died is sent again by the sweep from
its row; each attempt's ClientToken (a new one per place, the same one for the same call
repeated); one claimed task per account and region."""

from datetime import UTC, datetime, timedelta

import pytest
from django.db.models import Max

from rental.fleet import instances, recovery, sync
from rental.fleet.failover import Attempt, Place, attempt_number, client_token
from rental.loans import admission
from rental.models import Instance, OutboxMessage, ProviderAccount, RegionSync, Reservation
from rental.providers.base import ProviderErrorKind as Kind
from tests.rental.fleet.conftest import cloud_instances

pytestmark = pytest.mark.django_db
State = Instance.State
T0 = datetime(2026, 4, 6, 10, 0, tzinfo=UTC)
A = Place(1, 10, "us-east-1", "p4de", "a")
B = Place(1, 10, "us-east-1", "p4de", "b")


def at(place, kind, seconds=0):
    return Attempt(place, kind, T0 + timedelta(seconds=seconds))


# Tokens: pure ----------------------------------------------------------------------------


def test_it_numbers_a_new_place_anew_and_the_same_call_repeated_alike():
    assert attempt_number(attempts=[], place=A) == 0
    # Refused at A (nothing created): B is a new call with a new number.
    assert attempt_number(attempts=[at(A, Kind.CAPACITY)], place=B) == 1
    # No answer at A: the call at A again is the same call (the cloud may have created it).
    assert attempt_number(attempts=[at(A, Kind.TRANSIENT)], place=A) == 0
    # Even after a throttled try in between, A keeps the number of its unanswered call.
    history = [at(A, Kind.TRANSIENT), at(A, Kind.THROTTLED, 5)]
    assert attempt_number(attempts=history, place=A) == 0
    # A full round later, A after a refusal there only: a new number.
    history = [at(A, Kind.CAPACITY), at(B, Kind.CAPACITY, 1)]
    assert attempt_number(attempts=history, place=A) == 2


def test_it_derives_a_distinct_token_per_number_the_same_on_every_worker():
    tokens = {client_token("demo-abc", n) for n in range(5)}
    assert len(tokens) == 5
    assert client_token("demo-abc", 1) == client_token("demo-abc", 1)
    assert client_token("demo-abc", 1) != client_token("demo-abd", 1)
    assert all(len(token) <= 64 for token in tokens)


# Tokens: through the local endpoint ------------------------------------------------------


def submit(f0c, now=T0):
    return admission.submit_reservation(
        actor=f0c.alice,
        project=f0c.alpha,
        gpu_model=f0c.model,
        gpu_count=1,
        duration_hours=2,
        priority="experiment",
        market="on_demand",
        now=now,
    )


@pytest.mark.parametrize("recorded", ["nothing", "no answer"])
def test_it_reuses_the_token_of_an_unanswered_call_so_the_cloud_creates_one(f0c, cloud, recorded):
    """RunInstances created the instance but the worker died before recording anything
    (or recorded only that no answer came), and describe does not list it yet: the next
    try finds it only through the same ClientToken."""
    from rental.fleet import launching
    from rental.fleet.cloud import provider_for
    from rental.fleet.instances import launch_spec

    cloud.hide_new_instances(120)
    instance = submit(f0c).instances.get()
    place = launching.launch_places(instance)[0]
    if recorded == "no answer":
        launching.record_attempt(instance, place, kind="transient", message="timeout", at=T0)
    provider_for(instance).launch(
        launch_spec(instance),
        idempotency_key=instance.idempotency_key,
        client_token=client_token(instance.idempotency_key, 0),
    )

    instances.provision_instance(instance_id=instance.pk, now=T0 + timedelta(seconds=10))

    cloud.clear_faults()
    created = [c.external_id for c in cloud_instances(f0c.account)]
    instance.refresh_from_db()
    assert len(created) == 1
    assert instance.external_id == created[0]
    assert cloud.count("RunInstances") == 2  # the second answered with the first instance


# The sweep ------------------------------------------------------------------------------


class Sent:
    """The work for Celery asked for since the last ``clear()``: the outbox's rows
    (rental.jobs), as (task name, *args)."""

    def __init__(self) -> None:
        self.after = 0

    def calls(self) -> list[tuple]:
        rows = OutboxMessage.objects.filter(pk__gt=self.after).order_by("pk")
        return [(row.task.removeprefix("rental.tasks."), *row.args) for row in rows]

    def clear(self) -> None:
        self.after = OutboxMessage.objects.aggregate(last=Max("pk"))["last"] or 0


@pytest.fixture
def sent(db) -> Sent:
    return Sent()


def test_it_sends_again_a_launch_whose_worker_died_after_its_claim(f0c, sent, settings):
    settings.PORTAL_LAUNCH_STALE_SECONDS = 25
    instance = submit(f0c).instances.get()
    Instance.objects.filter(pk=instance.pk).update(state=State.LAUNCHING, claimed_at=T0)
    sent.clear()  # the submission's own launch

    assert recovery.sweep_launches(now=T0 + timedelta(seconds=24)) == []
    assert recovery.sweep_launches(now=T0 + timedelta(seconds=26)) == [instance.pk]

    instance.refresh_from_db()
    assert (instance.state, instance.claimed_at) == (State.REQUESTED, None)
    assert sent.calls() == [("provision_instance_task", instance.pk)]
    # Sent once per stale-claim time, not on every sweep while it waits in the queue.
    sent.clear()
    assert recovery.sweep_launches(now=T0 + timedelta(seconds=31)) == []
    assert recovery.sweep_launches(now=T0 + timedelta(seconds=52)) == [instance.pk]


def test_it_leaves_a_live_claim_and_a_recorded_launch_alone(f0c, sent):
    first, second = (submit(f0c).instances.get() for _ in range(2))
    Instance.objects.filter(pk=first.pk).update(
        state=State.LAUNCHING, claimed_at=T0 + timedelta(seconds=20)
    )
    Instance.objects.filter(pk=second.pk).update(
        state=State.LAUNCHING, claimed_at=T0, external_id="i-0123456789abcdef0"
    )
    sent.clear()  # the submissions' own launches
    assert recovery.sweep_launches(now=T0 + timedelta(seconds=30)) == []
    assert sent.calls() == []


def test_it_sends_again_a_launch_nobody_claimed_after_its_admission(f0c, sent, settings):
    settings.PORTAL_LAUNCH_STALE_SECONDS = 25
    instance = submit(f0c).instances.get()  # its message taken by a worker that died
    assert recovery.sweep_launches(now=T0 + timedelta(seconds=20)) == []
    assert recovery.sweep_launches(now=T0 + timedelta(seconds=30)) == [instance.pk]


def test_it_sweeps_in_a_fixed_number_of_queries(f0c, sent, django_assert_max_num_queries):
    base = submit(f0c).instances.get()
    for count in (2, 12):
        for _ in range(count - Instance.objects.count()):
            base.pk, base.idempotency_key = None, ""
            base.save()
        Instance.objects.update(state=State.LAUNCHING, claimed_at=T0)
        with django_assert_max_num_queries(5):
            assert len(recovery.sweep_launches(now=T0 + timedelta(minutes=5))) == count


# The fan-out ----------------------------------------------------------------------------


def test_it_fans_out_one_task_per_account_and_region(f0c, sent):
    f0c.account.regions = ["us-east-1", "us-west-2"]
    f0c.account.save()
    pairs = sync.start_sync(now=T0)
    assert pairs == [(f0c.account.pk, "us-east-1"), (f0c.account.pk, "us-west-2")]
    assert [call for call in sent.calls() if call[0] == "sync_region_task"] == [
        ("sync_region_task", f0c.account.pk, "us-east-1", T0.isoformat()),
        ("sync_region_task", f0c.account.pk, "us-west-2", T0.isoformat()),
    ]


def test_it_runs_a_region_once_when_its_task_is_delivered_twice(f0c, cloud):
    now = datetime.now(UTC)
    sync.sync_plan()
    held = RegionSync.objects.get(account=f0c.account, region="us-east-1")
    RegionSync.objects.filter(pk=held.pk).update(claimed_until=now + timedelta(seconds=60))
    cloud.clear_requests()

    duplicate = sync.sync_account_region(account_id=f0c.account.pk, region="us-east-1", now=now)

    assert duplicate is None
    assert cloud.count("DescribeInstances") == 0
    # Once the claim has run out (a worker died mid-sync), the next delivery runs it.
    later = now + timedelta(seconds=61)
    assert sync.sync_account_region(account_id=f0c.account.pk, region="us-east-1", now=later) == 0
    assert cloud.count("DescribeInstances") == 1
    assert RegionSync.objects.get(pk=held.pk).claimed_until is None


def test_a_region_is_synced_once_a_period_however_many_beats_ask(f0c, cloud, settings):
    """Two beats (one on each worker host) each send the periodic sync every period: one
    beat's tick syncs the region, the other's, less than three quarters of a period
    later, finds the period taken. The tick's time counts, not the task's: a task the
    queue held back does not make the next tick look early. A sync asked for after a
    launch is not the schedule's and runs all the same."""
    settings.CELERY_BEAT_SCHEDULE = {
        **settings.CELERY_BEAT_SCHEDULE,
        "sync-instances": {"task": "rental.tasks.sync_instances_task", "schedule": 30.0},
    }
    sync.sync_plan()
    region = {"account_id": f0c.account.pk, "region": "us-east-1"}
    cloud.clear_requests()

    def beat(tick: float, *, run_at: float | None = None) -> int | None:
        return sync.sync_account_region(
            **region,
            now=T0 + timedelta(seconds=tick if run_at is None else run_at),
            tick=T0 + timedelta(seconds=tick),
        )

    # The first tick, run 20 s late by a busy queue.
    assert beat(0, run_at=20) == 0
    # The other beat's tick (its phase: 20 s later), and the same tick delivered twice.
    assert beat(20) is None
    assert beat(0, run_at=21) is None
    assert cloud.count("DescribeInstances") == 1
    # A sync after a launch is not the schedule's: it runs, and claims no period.
    assert sync.sync_account_region(**region, now=T0 + timedelta(seconds=21)) == 0
    # The first beat's next tick, 10 s after its late task: still its own period.
    assert beat(30) == 0
    assert beat(50) is None
    assert cloud.count("DescribeInstances") == 3
    row = RegionSync.objects.get(account=f0c.account, region="us-east-1")
    assert row.period_started_at == T0 + timedelta(seconds=30)


def test_it_keeps_a_failing_region_to_itself(f0c, cloud):
    f0c.account.regions = ["us-east-1", "us-west-2"]
    f0c.account.save()
    sync.sync_plan()
    cloud.inject("DescribeInstances", "InternalError", times=9, where={"X-Region": "us-west-2"})
    account = f0c.account.pk
    sync.sync_account_region(account_id=account, region="us-west-2", now=T0)
    sync.sync_account_region(account_id=account, region="us-east-1", now=T0)

    east, west = RegionSync.objects.filter(account_id=account).order_by("region")
    assert (east.synced_at, east.sync_error) == (T0, "")
    assert west.synced_at is None and west.sync_error.startswith("transient: InternalError")
    shown = ProviderAccount.objects.get(pk=account)
    assert shown.synced_at is None
    assert shown.sync_error.startswith("us-west-2: transient: InternalError")
    assert Reservation.objects.count() == 0


# Terminations --------------------------------------------------------------------------


def stopping(f0c, now=T0):
    """A lease ended while running: billing stopped, its termination sent on commit."""
    instance = submit(f0c, now=now).instances.get()
    Instance.objects.filter(pk=instance.pk).update(
        state=State.STOPPING, external_id="i-0123456789abcdef0", claimed_at=None
    )
    return instance


@pytest.mark.parametrize("stale", [25, 40])
def test_it_sends_again_a_termination_whose_worker_died(f0c, sent, settings, stale):
    settings.PORTAL_LAUNCH_STALE_SECONDS = stale
    instance = stopping(f0c)
    sent.clear()  # the submission's own launch
    # The first sweep after the row became stopping notes it: its termination was just sent.
    assert recovery.sweep_terminations(now=T0) == []
    assert recovery.sweep_terminations(now=T0 + timedelta(seconds=stale)) == []
    assert recovery.sweep_terminations(now=T0 + timedelta(seconds=stale + 1)) == [instance.pk]
    assert sent.calls() == [("terminate_instance_task", instance.pk)]
    # Once per stale-claim time while it waits, never on every sweep.
    sent.clear()
    assert recovery.sweep_terminations(now=T0 + timedelta(seconds=stale + 6)) == []
    assert recovery.sweep_terminations(now=T0 + timedelta(seconds=2 * stale + 2)) == [instance.pk]


def test_it_leaves_a_termination_being_worked_on_alone(f0c, sent, settings):
    settings.PORTAL_LAUNCH_STALE_SECONDS = 25
    instance = stopping(f0c)
    Instance.objects.filter(pk=instance.pk).update(terminate_sent_at=T0 + timedelta(seconds=20))
    sent.clear()  # the submission's own launch
    assert recovery.sweep_terminations(now=T0 + timedelta(seconds=40)) == []
    assert sent.calls() == []


def test_it_never_sends_a_spot_termination_before_its_notice_ends(f0c, sent, settings):
    settings.PORTAL_LAUNCH_STALE_SECONDS = 25
    instance = stopping(f0c)
    notice_end = T0 + timedelta(seconds=120)
    Instance.objects.filter(pk=instance.pk).update(terminate_sent_at=notice_end)
    for seconds in (0, 30, 60, 120, 145):
        assert recovery.sweep_terminations(now=T0 + timedelta(seconds=seconds)) == [], seconds
    assert recovery.sweep_terminations(now=notice_end + timedelta(seconds=26)) == [instance.pk]


def test_it_sweeps_terminations_in_a_fixed_number_of_queries(
    f0c, sent, django_assert_max_num_queries
):
    base = stopping(f0c)
    for count in (2, 12):
        for n in range(count - Instance.objects.count()):
            base.pk, base.idempotency_key = None, ""
            base.external_id = f"i-{count:04x}{n:013x}"
            base.save()
        Instance.objects.update(state=State.STOPPING, terminate_sent_at=T0)
        with django_assert_max_num_queries(6):  # 5, and one insert of the messages (outbox)
            assert len(recovery.sweep_terminations(now=T0 + timedelta(minutes=5))) == count
