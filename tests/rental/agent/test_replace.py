"""Replacing an unhealthy instance (L8) against the local EC2 endpoint: a new instance for
the same lease; the old one's usage closes as a platform failure; the lease stays."""

from datetime import timedelta

import pytest
from django.urls import reverse

from portal.errors import InvalidTransition
from rental.fleet import instances, sync, termination
from rental.fleet.cloud import LaunchRetry
from rental.fleet.replace import replace_instance
from rental.loans import admission
from rental.models import Instance, Reservation, UsageRecord
from tests import factories


@pytest.fixture
def f0c(db, cloud):
    return factories.fixture_f0(endpoint_url=cloud.url)


def active_lease(f0c, t0):
    lease = admission.submit_reservation(
        actor=f0c.alice,
        project=f0c.alpha,
        gpu_model=f0c.model,
        gpu_count=1,
        duration_hours=4,
        priority="experiment",
        market="on_demand",
        now=t0,
    )
    instance = lease.instances.get()
    instances.provision_instance(instance_id=instance.pk, now=t0)
    sync.sync_instances(now=t0 + timedelta(seconds=30))
    lease.refresh_from_db()
    assert lease.status == Reservation.Status.ACTIVE
    return lease, Instance.objects.get(pk=instance.pk)


def test_it_replaces_an_unhealthy_instance_and_keeps_the_lease(f0c, t0):
    lease, old = active_lease(f0c, t0)
    Instance.objects.filter(pk=old.pk).update(
        health="unhealthy", health_message="The card is NVIDIA L4, not A100 80GB."
    )
    at = t0 + timedelta(minutes=10)

    new = replace_instance(actor=f0c.alice, instance=old, now=at)

    old.refresh_from_db()
    assert (old.state, old.termination_reason) == (Instance.State.STOPPING, "failed")
    closed = UsageRecord.objects.get(instance=old)
    assert (closed.end, closed.end_reason) == (at, "failed")
    assert closed.platform_ended  # no 60-second minimum for the engineer (B1)
    termination.terminate_instance(instance_id=old.pk, now=at + timedelta(seconds=5))
    instances.provision_instance(instance_id=new.pk, now=at)
    sync.sync_instances(now=at + timedelta(seconds=40))

    lease.refresh_from_db()
    new.refresh_from_db()
    assert Instance.objects.get(pk=old.pk).state == Instance.State.TERMINATED
    assert lease.status == Reservation.Status.ACTIVE
    assert lease.ended_at is None
    assert new.state == Instance.State.RUNNING and new.external_id != old.external_id
    assert new.rate_per_hour == old.rate_per_hour
    assert UsageRecord.objects.get(instance=new).start == at + timedelta(seconds=40)


def test_it_refuses_to_replace_a_healthy_instance_or_for_an_outsider(client, f0c, t0):
    lease, old = active_lease(f0c, t0)
    with pytest.raises(InvalidTransition):
        replace_instance(actor=f0c.alice, instance=old, now=t0)
    Instance.objects.filter(pk=old.pk).update(health="unhealthy", health_message="slow")
    url = reverse("rental:replace_instance", args=[lease.pk, old.pk])
    client.login(username="olga", password=factories.PASSWORD)
    assert client.post(url).status_code == 404
    client.login(username="bob", password=factories.PASSWORD)
    assert client.post(url).status_code == 404
    assert Instance.objects.filter(reservation=lease).count() == 1


def test_it_offers_the_button_on_the_lease_page(client, f0c, t0):
    lease, old = active_lease(f0c, t0)
    Instance.objects.filter(pk=old.pk).update(health="unhealthy", health_message="slow")
    client.login(username="alice", password=factories.PASSWORD)
    page = client.get(lease.get_absolute_url()).content.decode()
    assert f'id="replace-{old.pk}"' in page
    response = client.post(reverse("rental:replace_instance", args=[lease.pk, old.pk]), follow=True)
    assert "A new instance is starting" in response.content.decode()
    assert Instance.objects.filter(reservation=lease).count() == 2


def test_it_times_the_replacement_from_the_replacement_not_the_lease(f0c, t0, cloud, settings):
    """The launch's clock (L2: retries, then the provisioning timeout) starts when the
    replacement began: a lease that started long ago still gives its new instance the
    whole timeout before it fails."""
    _lease, old = active_lease(f0c, t0)
    Instance.objects.filter(pk=old.pk).update(health="unhealthy", health_message="slow card")
    timeout = timedelta(seconds=settings.PORTAL_PROVISIONING_TIMEOUT_SECONDS)
    at = t0 + 2 * timeout
    new = replace_instance(actor=f0c.alice, instance=old, now=at)
    cloud.inject("RunInstances", "InsufficientInstanceCapacity", times=100)

    with pytest.raises(LaunchRetry):
        instances.provision_instance(instance_id=new.pk, now=at + timedelta(seconds=30))
    new.refresh_from_db()
    assert new.state == Instance.State.REQUESTED  # tried again later, not given up

    instances.provision_instance(instance_id=new.pk, now=at + timeout + timedelta(seconds=1))
    new.refresh_from_db()
    assert new.state == Instance.State.FAILED
