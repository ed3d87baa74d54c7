"""Scenario 13 (Q8) against the local EC2 endpoint: a running spot lease preempted for a
guaranteed request is told at T, its usage closes at exactly T + 120 s, with no minimum,
and the guaranteed lease starts then. The notice survives a restart: it is a row."""

from decimal import Decimal

import pytest

from rental.fleet import instances, sync, termination
from rental.loans import admission, due
from rental.models import Instance, Reservation, TerminationReason, UsageRecord
from tests import factories
from tests.rental.loans.conftest import at

Status = Reservation.Status


@pytest.fixture
def f0c(db, cloud):
    return factories.fixture_f0(endpoint_url=cloud.url)


def running(f0c, project, gpus, when, *, market="on_demand"):
    lease = admission.submit_reservation(
        actor=f0c.engineer_of(project),
        project=project,
        gpu_model=f0c.model,
        gpu_count=gpus,
        duration_hours=8,
        priority="experiment",
        market=market,
        now=when,
    )
    for instance in lease.instances.all():
        instances.provision_instance(instance_id=instance.pk, now=when)
    sync.sync_instances(now=when)
    return Reservation.objects.get(pk=lease.pk)


def test_scenario_13_spot_preempted_at_t_plus_notice(f0c):
    spot = running(f0c, f0c.gamma, 4, at("09:00:00"), market="spot")
    running(f0c, f0c.beta, 4, at("09:00:00"))
    assert spot.status == Status.ACTIVE

    alpha = admission.submit_reservation(
        actor=f0c.alice,
        project=f0c.alpha,
        gpu_model=f0c.model,
        gpu_count=2,
        duration_hours=4,
        priority="experiment",
        market="on_demand",
        now=at("10:00:00"),
    )
    assert alpha.status == Status.QUEUED
    assert Reservation.objects.get(pk=spot.pk).notice_due_at == at("10:02:00")

    # A sweep that runs late still ends the victim at its due second, not when it ran.
    due.process_due(now=at("10:02:07"))
    victim = Reservation.objects.get(pk=spot.pk)
    assert victim.ended_at == at("10:02:00")
    usage = list(UsageRecord.objects.filter(instance__reservation=spot))
    assert {(u.start, u.end, u.end_reason) for u in usage} == {
        (at("09:00:00"), at("10:02:00"), TerminationReason.PREEMPTED)
    }
    gpu_seconds = sum(u.gpu_count * (u.end - u.start).total_seconds() for u in usage)
    assert gpu_seconds == 4 * 3720
    # B1/B2: platform-ended, so no minimum: 4 × 3,720 s × $1.00 / 3600.
    assert (Decimal(gpu_seconds) * Decimal("1.00") / 3600).quantize(Decimal("0.01")) == Decimal(
        "4.13"
    )
    started = Reservation.objects.get(pk=alpha.pk)
    assert (started.status, started.start) == (Status.PROVISIONING, at("10:02:00"))
    assert set(Instance.objects.filter(reservation=spot).values_list("state", flat=True)) == {
        Instance.State.STOPPING
    }
    for instance in Instance.objects.filter(reservation=spot):
        termination.terminate_instance(instance_id=instance.pk, now=at("10:02:08"))
    assert Reservation.objects.get(pk=spot.pk).status == Status.PREEMPTED


def test_a_notice_is_a_row_that_any_later_sweep_acts_on(f0, lease):
    lease(f0.beta, 4, at("09:00"))
    spot = lease(f0.gamma, 4, at("09:00"), market="spot")
    want = lease(f0.alpha, 2, at("10:00"))
    # Nothing runs between: no process, no countdown. A sweep hours later acts as of 10:02.
    due.process_due(now=at("13:00"))
    assert Reservation.objects.get(pk=spot.pk).ended_at == at("10:02:00")
    assert Reservation.objects.get(pk=want.pk).start == at("10:02:00")
    assert due.process_due(now=at("13:00:05")) == 0  # done once
