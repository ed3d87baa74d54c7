"""The whole journey of issue #2 point 5 with a real Celery worker and beat on Redis,
against the local EC2 endpoint: submit → launch → running → usage → end → terminated,
and a short lease reaped by beat at its end."""

import time
from collections.abc import Callable
from datetime import timedelta
from decimal import Decimal

import pytest

from billing.selectors import draft_statement
from rental import tasks
from rental.fleet.cloud import provider_for
from rental.loans import admission, ending
from rental.models import Instance, Reservation, TerminationReason, UsageRecord
from rental.providers.base import TAG_INSTALLATION, TAG_PROJECT, CloudState
from tests import factories

pytestmark = [pytest.mark.integration, pytest.mark.django_db(transaction=True)]
Status = Reservation.Status


def wait_for(check: Callable[[], bool], *, timeout: float = 60, what: str = "") -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if check():
            return
        time.sleep(0.5)
    raise AssertionError(f"timed out waiting for {what}")


def status_of(lease: Reservation) -> str:
    return Reservation.objects.get(pk=lease.pk).status


def test_it_runs_the_whole_journey_on_a_real_worker(cloud, worker, tmp_path):
    f0 = factories.fixture_f0(endpoint_url=cloud.url)
    lease = admission.submit_reservation(
        actor=f0.alice,
        project=f0.alpha,
        gpu_model=f0.model,
        gpu_count=2,
        duration_hours=4,
        priority="experiment",
        market="on_demand",
        source="web",
    )
    assert lease.status == Status.PROVISIONING

    wait_for(lambda: status_of(lease) == Status.ACTIVE, what="the lease to become active")

    instances = list(Instance.objects.filter(reservation=lease))
    assert len(instances) == 2  # two 1-GPU instances
    assert all(i.state == Instance.State.RUNNING and i.public_address for i in instances)
    cloud_view = provider_for(instances[0]).describe(
        region="us-east-1", tag_filter={TAG_INSTALLATION: "test"}
    )
    assert sorted(c.external_id for c in cloud_view) == sorted(i.external_id for i in instances)
    assert {c.tag(TAG_PROJECT) for c in cloud_view} == {"alpha"}
    assert UsageRecord.objects.filter(instance__reservation=lease, end__isnull=True).count() == 2

    # A duplicate delivery of a launch task creates nothing (checked once the worker says
    # it has run it, however long the machine makes that take).
    duplicate = tasks.provision_instance_task.delay(instances[0].pk)
    done = f"provision_instance_task[{duplicate.id}] succeeded"
    wait_for(lambda: done in (tmp_path / "worker.log").read_text(), what="the duplicate to run")
    assert cloud.count("RunInstances") == 2

    ending.end_reservation(actor=f0.alice, reservation=lease)
    wait_for(lambda: status_of(lease) == Status.ENDED, what="the lease to end")

    ids = {i.external_id for i in instances}
    states = {
        c.external_id: c.state
        for c in provider_for(instances[0]).describe(
            region="us-east-1", tag_filter={TAG_INSTALLATION: "test"}
        )
    }
    assert {states[i] for i in ids} == {CloudState.TERMINATED}
    records = UsageRecord.objects.filter(instance__reservation=lease)
    assert all(r.end is not None and r.end_reason == TerminationReason.USER for r in records)

    statement = draft_statement(project_id=f0.alpha.pk)
    [line] = statement.lines
    assert line.gpu_seconds == sum(
        r.gpu_count * max(60, int((r.end - r.start).total_seconds())) for r in records
    )
    assert line.unit_price == Decimal("2.500000")


def test_it_terminates_a_lease_at_its_end_through_beat(cloud, worker):
    f0 = factories.fixture_f0(endpoint_url=cloud.url)
    lease = admission.submit_reservation(
        actor=f0.bob,
        project=f0.beta,
        gpu_model=f0.model,
        gpu_count=1,
        duration_hours=Decimal("0.01"),
        priority="learning",
        market="on_demand",
    )  # 36 seconds
    wait_for(lambda: status_of(lease) == Status.ENDED, timeout=90, what="beat to end the lease")
    lease.refresh_from_db()
    assert lease.end_reason == TerminationReason.LEASE_END
    record = UsageRecord.objects.get(instance__reservation=lease)
    assert record.end == lease.end
    assert record.end_reason == TerminationReason.LEASE_END
    assert lease.end - lease.start == timedelta(seconds=36)
