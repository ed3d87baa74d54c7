"""Stop and resume (L9) against the local EC2 endpoint: billing stops, the disk is kept,
the GPUs leave the pool; resuming is a new admission and starts the same instance."""

from datetime import timedelta

import pytest

from portal.errors import InvalidTransition, NotPermitted, QuotaExceeded
from rental import selectors
from rental.fleet import instances, stop, sync, termination
from rental.fleet.cloud import provider_for
from rental.loans import admission
from rental.models import Instance, Reservation, UsageRecord
from rental.providers.base import CloudState
from tests import factories
from tests.notices import told


@pytest.fixture
def f0c(db, cloud):
    return factories.fixture_f0(endpoint_url=cloud.url)


def active(f0c, t0, *, gpus=2, market="on_demand", who=None, project=None):
    lease = admission.submit_reservation(
        actor=who or f0c.alice,
        project=project or f0c.alpha,
        gpu_model=f0c.model,
        gpu_count=gpus,
        duration_hours=4,
        priority="experiment",
        market=market,
        now=t0,
    )
    for instance in lease.instances.all():
        instances.provision_instance(instance_id=instance.pk, now=t0)
    sync.sync_instances(now=t0 + timedelta(seconds=30))
    lease.refresh_from_db()
    assert lease.status == Reservation.Status.ACTIVE
    return lease


def cloud_state(instance):
    [found] = [
        c
        for c in provider_for(instance).describe(region="us-east-1", tag_filter={})
        if c.external_id == instance.external_id
    ]
    return found.state


def test_it_stops_and_resumes_the_same_instance(f0c, t0):
    lease = active(f0c, t0, gpus=1)
    [instance] = lease.instances.all()
    stopped_at = t0 + timedelta(hours=1)

    stop.stop_lease(actor=f0c.alice, reservation=lease, now=stopped_at)
    stop.cloud_stop([instance.pk])

    lease.refresh_from_db()
    instance.refresh_from_db()
    assert lease.status == Reservation.Status.STOPPED
    assert (instance.state, instance.stopped_at) == (Instance.State.STOPPED, stopped_at)
    assert UsageRecord.objects.get(instance=instance).end == stopped_at  # GPU billing stops
    assert selectors.pool_running_gpus(f0c.model) == 0  # its GPUs leave the pool
    assert cloud_state(instance) in (CloudState.STOPPING, CloudState.STOPPED)
    sync.sync_instances(now=stopped_at + timedelta(seconds=30))
    assert Instance.objects.get(pk=instance.pk).state == Instance.State.STOPPED

    resumed_at = stopped_at + timedelta(hours=1)
    stop.resume_lease(actor=f0c.alice, reservation=lease, now=resumed_at)
    stop.cloud_start([instance.pk])
    sync.sync_instances(now=resumed_at + timedelta(seconds=30))

    lease.refresh_from_db()
    instance.refresh_from_db()
    assert lease.status == Reservation.Status.ACTIVE
    assert instance.state == Instance.State.RUNNING
    assert cloud_state(instance) == CloudState.RUNNING  # the same instance, the same disk
    runs = list(UsageRecord.objects.filter(instance=instance).order_by("start"))
    assert [(r.start, r.end) for r in runs] == [
        (t0 + timedelta(seconds=30), stopped_at),
        (resumed_at + timedelta(seconds=30), None),
    ]


def test_it_refuses_to_resume_without_room_and_stays_stopped(f0c, t0):
    lease = active(f0c, t0, gpus=2)
    stop.stop_lease(actor=f0c.alice, reservation=lease, now=t0 + timedelta(minutes=5))
    # beta fills the pool (C = 8) while alpha's lease is stopped.
    active(f0c, t0 + timedelta(minutes=6), gpus=8, who=f0c.bob, project=f0c.beta)

    with pytest.raises(QuotaExceeded):
        stop.resume_lease(actor=f0c.alice, reservation=lease, now=t0 + timedelta(minutes=10))

    lease.refresh_from_db()
    assert lease.status == Reservation.Status.STOPPED


def test_it_stops_only_active_on_demand_leases_of_ones_project(f0c, t0):
    spot = active(f0c, t0, gpus=1, market="spot")
    with pytest.raises(InvalidTransition):
        stop.stop_lease(actor=f0c.alice, reservation=spot, now=t0)
    lease = active(f0c, t0, gpus=1)
    with pytest.raises(NotPermitted):
        stop.stop_lease(actor=f0c.outsider, reservation=lease, now=t0)
    with pytest.raises(InvalidTransition):
        stop.resume_lease(actor=f0c.alice, reservation=lease, now=t0)


def test_it_warns_three_days_before_and_ends_a_lease_stopped_for_fifteen(f0c, t0, settings):

    settings.PORTAL_STOPPED_RETENTION_DAYS = 15
    settings.PORTAL_STOPPED_WARNING_DAYS = 3
    lease = active(f0c, t0, gpus=1)
    [instance] = lease.instances.all()
    stopped = t0 + timedelta(hours=1)
    stop.stop_lease(actor=f0c.alice, reservation=lease, now=stopped)

    assert stop.expire_stopped_leases(now=stopped + timedelta(days=11, hours=23)) == (0, 0)
    assert stop.expire_stopped_leases(now=stopped + timedelta(days=12)) == (1, 0)
    assert stop.expire_stopped_leases(now=stopped + timedelta(days=13)) == (0, 0)  # warned once
    assert len(told(has="deleted soon")) == 1
    assert stop.expire_stopped_leases(now=stopped + timedelta(days=15)) == (0, 1)

    lease.refresh_from_db()
    assert (lease.status, lease.end_reason) == (Reservation.Status.ENDING, "lease_end")
    termination.terminate_instance(instance_id=instance.pk, now=stopped + timedelta(days=15))
    lease.refresh_from_db()
    assert lease.status == Reservation.Status.ENDED
    # The GPU usage closed at the stop; nothing more was billed.
    assert UsageRecord.objects.get(instance=instance).end == stopped


def test_it_stops_and_resumes_from_the_lease_page(client, f0c):
    from django.urls import reverse
    from django.utils import timezone

    lease = active(f0c, timezone.now() - timedelta(minutes=5), gpus=1)
    client.login(username="alice", password=factories.PASSWORD)
    assert 'id="stop-lease"' in client.get(lease.get_absolute_url()).content.decode()

    page = client.post(reverse("rental:lease_stop", args=[lease.pk]), follow=True)
    assert "GPU billing has stopped" in page.content.decode()
    assert 'id="resume-lease"' in page.content.decode()
    page = client.post(reverse("rental:lease_resume", args=[lease.pk]), follow=True)
    assert "Resuming on the kept disk." in page.content.decode()
    assert Reservation.objects.get(pk=lease.pk).status == Reservation.Status.PROVISIONING

    client.login(username="olga", password=factories.PASSWORD)
    assert client.post(reverse("rental:lease_stop", args=[lease.pk])).status_code == 404
