"""L5: the requester is warned before the lease ends (portal and mail, with a link to
extend), once per end; at the end second the instances are terminated and usage closes
at that second."""

from datetime import timedelta

import pytest
from django.core import mail

from rental.fleet import instances, sync, termination
from rental.loans import admission, expiry
from rental.models import Instance, Reservation, TerminationReason, UsageRecord
from tests.notices import told

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
