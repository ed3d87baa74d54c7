"""L4: instances carrying this installation's tag that no live row stands for are
recorded by the sync, shown to admins and handled by policy; a termination that keeps
failing ends in words to admins that the instance may still be billing."""

from datetime import timedelta
from decimal import Decimal

import pytest
from django.urls import reverse

from rental.fleet import instances, sync, termination
from rental.fleet.cloud import LaunchRetry, provider_for
from rental.loans import admission, ending
from rental.models import Instance, Orphan, Reservation, UsageRecord
from rental.providers.base import (
    TAG_INSTALLATION,
    TAG_PROJECT,
    TAG_REQUESTER,
    CloudState,
    LaunchSpec,
)
from tests.notices import told
from tests.rental.fleet.conftest import cloud_instances

pytestmark = pytest.mark.django_db
State = Instance.State
Status = Reservation.Status


def stray(f0c, *, project="alpha", key="stray-1"):
    """An instance with this installation's tags that the database does not know."""
    spec = LaunchSpec(
        region="us-east-1",
        instance_type=f0c.offering.instance_type,
        image_id=f0c.image.image_id,
        market="on_demand",
        tags=((TAG_INSTALLATION, "test"), (TAG_PROJECT, project), (TAG_REQUESTER, "alice")),
    )
    return provider_for(Instance(account=f0c.account)).launch(spec, idempotency_key=key)


def state_of(f0c, external_id):
    return {c.external_id: c.state for c in cloud_instances(f0c.account)}[external_id]


def admin_notes(f0c):
    return [(notice.subject, notice.body) for notice in told(f0c.admin)]


def test_it_records_an_unknown_instance_and_reports_it_on_the_next_sync(f0c, cloud, t0):
    orphan = stray(f0c)
    sync.sync_instances(now=t0)

    [row] = Orphan.objects.all()
    assert (row.external_id, row.status) == (orphan.external_id, Orphan.Status.OPEN)
    assert row.tags[TAG_PROJECT] == "alpha"
    assert row.hourly_cost == Decimal("2.500000")
    assert row.reported_at is None and admin_notes(f0c) == []

    sync.sync_instances(now=t0 + timedelta(seconds=30))
    [(subject, body)] = admin_notes(f0c)
    assert subject == "1 orphan instance(s) in Test cloud"
    assert orphan.external_id in body and "about 2.500000 an hour" in body
    sync.sync_instances(now=t0 + timedelta(seconds=60))
    assert len(admin_notes(f0c)) == 1  # told once
    assert state_of(f0c, orphan.external_id) == CloudState.RUNNING  # report only


def test_it_terminates_orphans_when_the_policy_says_so(f0c, cloud, t0, settings):
    settings.PORTAL_ORPHAN_POLICY = "terminate"
    orphan = stray(f0c)
    sync.sync_instances(now=t0)
    assert state_of(f0c, orphan.external_id) == CloudState.RUNNING  # seen once: recorded
    sync.sync_instances(now=t0 + timedelta(seconds=30))

    assert state_of(f0c, orphan.external_id) != CloudState.RUNNING
    assert Orphan.objects.get().status == Orphan.Status.TERMINATING
    sync.sync_instances(now=t0 + timedelta(seconds=60))
    assert Orphan.objects.get().status == Orphan.Status.TERMINATED


def test_it_finds_a_running_instance_whose_row_says_terminated(f0c, cloud, t0, settings):
    settings.PORTAL_ORPHAN_POLICY = "terminate"
    lease = admission.submit_reservation(
        actor=f0c.alice,
        project=f0c.alpha,
        gpu_model=f0c.model,
        gpu_count=1,
        duration_hours=1,
        priority="experiment",
        market="on_demand",
        now=t0,
    )
    instance = lease.instances.get()
    instances.provision_instance(instance_id=instance.pk, now=t0)
    # What the old race left behind: the row ended, the cloud instance still running.
    Instance.objects.filter(pk=instance.pk).update(state=State.TERMINATED)
    instance.refresh_from_db()

    sync.sync_instances(now=t0 + timedelta(seconds=30))
    sync.sync_instances(now=t0 + timedelta(seconds=60))

    row = Orphan.objects.get()
    assert row.known_instance_id == instance.pk
    assert state_of(f0c, instance.external_id) != CloudState.RUNNING


def test_it_adopts_an_orphan_into_a_lease_of_the_project_in_its_tags(f0c, cloud, t0, settings):
    settings.PORTAL_ORPHAN_POLICY = "adopt"
    orphan = stray(f0c)
    sync.sync_instances(now=t0)
    adopted_at = t0 + timedelta(seconds=30)
    sync.sync_instances(now=adopted_at)

    row = Orphan.objects.get()
    assert row.status == Orphan.Status.ADOPTED
    lease = row.adopted_into
    assert (lease.project, lease.requester, lease.status) == (f0c.alpha, f0c.alice, Status.ACTIVE)
    instance = lease.instances.get()
    assert (instance.external_id, instance.state) == (orphan.external_id, State.RUNNING)
    usage = UsageRecord.objects.get()
    assert (usage.start, usage.end, usage.rate) == (adopted_at, None, Decimal("2.500000"))
    assert state_of(f0c, orphan.external_id) == CloudState.RUNNING
    sync.sync_instances(now=adopted_at + timedelta(seconds=30))
    assert Orphan.objects.count() == 1  # a live row stands for it now


def test_it_reports_an_orphan_it_cannot_adopt(f0c, cloud, t0, settings):
    settings.PORTAL_ORPHAN_POLICY = "adopt"
    stray(f0c, project="nobody")
    sync.sync_instances(now=t0)
    sync.sync_instances(now=t0 + timedelta(seconds=30))
    assert Orphan.objects.get().status == Orphan.Status.OPEN
    assert len(admin_notes(f0c)) == 1
    assert not Reservation.objects.exists()


def test_it_tells_admins_when_a_termination_keeps_failing(f0c, cloud, t0, settings):
    settings.PORTAL_TERMINATE_MAX_ATTEMPTS = 3
    lease = admission.submit_reservation(
        actor=f0c.alice,
        project=f0c.alpha,
        gpu_model=f0c.model,
        gpu_count=1,
        duration_hours=1,
        priority="experiment",
        market="on_demand",
        now=t0,
    )
    instance = lease.instances.get()
    instances.provision_instance(instance_id=instance.pk, now=t0)
    ending.end_reservation(actor=f0c.alice, reservation=lease, now=t0 + timedelta(minutes=5))
    cloud.inject("TerminateInstances", "InternalError", times=99)

    for _ in range(4):
        with pytest.raises(LaunchRetry):
            termination.terminate_instance(instance_id=instance.pk)

    instance.refresh_from_db()
    assert (instance.state, instance.terminate_failures) == (State.STOPPING, 4)
    [(subject, body)] = admin_notes(f0c)
    assert subject == f"Could not terminate {instance.external_id}: it may still be billing"
    assert "in account Test cloud (us-east-1)" in body and "after 3 tries" in body
    cloud.clear_faults()
    termination.terminate_instance(instance_id=instance.pk)
    assert Instance.objects.get(pk=instance.pk).state == State.TERMINATED


def test_it_marks_an_orphan_stuck_when_its_termination_keeps_failing(f0c, cloud, t0, settings):
    settings.PORTAL_ORPHAN_POLICY = "terminate"
    settings.PORTAL_TERMINATE_MAX_ATTEMPTS = 2
    orphan = stray(f0c)
    cloud.inject("TerminateInstances", "UnauthorizedOperation", times=99)
    for n in range(4):
        sync.sync_instances(now=t0 + timedelta(seconds=30 * n))
    row = Orphan.objects.get()
    assert (row.status, row.terminate_failures) == (Orphan.Status.STUCK, 3)
    subjects = [subject for subject, _ in admin_notes(f0c)]
    assert f"Could not terminate {orphan.external_id}: it may still be billing" in subjects


def test_it_shows_orphans_to_admins_only(f0c, cloud, t0, client):
    stray(f0c)
    sync.sync_instances(now=t0)
    url = reverse("admin:rental_orphan_changelist")
    client.force_login(f0c.alice)
    assert client.get(url).status_code == 302  # not staff: sent to the admin login
    f0c.admin.is_superuser = True  # the site admin holds every permission
    f0c.admin.save()
    client.force_login(f0c.admin)
    page = client.get(url).content.decode()
    assert Orphan.objects.get().external_id in page
    assert "gpu-portal:project=alpha" in page
