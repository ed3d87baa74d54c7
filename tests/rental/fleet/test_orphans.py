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
from tests import factories
from tests.notices import told
from tests.rental.fleet.conftest import cloud_instances

pytestmark = pytest.mark.django_db
State = Instance.State
Status = Reservation.Status


@pytest.fixture(autouse=True)
def _grace(settings):
    """Syncs 30 s apart, as in production; the grace has tests of its own below."""
    settings.PORTAL_ORPHAN_GRACE_SECONDS = 30


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


def running_lease(f0c, t0):
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
    instance.refresh_from_db()
    return instance


@pytest.mark.parametrize("grace", [90, 150])
def test_it_acts_on_an_orphan_only_after_two_syncs_a_grace_period_apart(
    f0c, cloud, t0, settings, grace
):
    settings.PORTAL_ORPHAN_POLICY = "terminate"
    settings.PORTAL_ORPHAN_GRACE_SECONDS = grace
    orphan = stray(f0c)
    for seconds in range(0, grace, 30):
        sync.sync_instances(now=t0 + timedelta(seconds=seconds))
        assert state_of(f0c, orphan.external_id) == CloudState.RUNNING, seconds
    assert Orphan.objects.get().status == Orphan.Status.OPEN
    assert admin_notes(f0c) == []  # not even reported before the grace

    sync.sync_instances(now=t0 + timedelta(seconds=grace))
    assert Orphan.objects.get().status == Orphan.Status.TERMINATING
    assert state_of(f0c, orphan.external_id) != CloudState.RUNNING


def test_it_never_takes_an_instance_being_terminated_for_an_orphan(f0c, cloud, t0, settings):
    """A describe taken before a termination reached the cloud still lists the instance
    running while its row has just ended: that is no orphan, until the grace is over."""
    settings.PORTAL_ORPHAN_POLICY = "terminate"
    settings.PORTAL_ORPHAN_GRACE_SECONDS = 120
    instance = running_lease(f0c, t0)
    ended = t0 + timedelta(minutes=5)
    Instance.objects.filter(pk=instance.pk).update(state=State.TERMINATED, terminated_at=ended)

    for seconds in (0, 30, 60, 119):
        sync.sync_instances(now=ended + timedelta(seconds=seconds))
    assert not Orphan.objects.exists()
    assert state_of(f0c, instance.external_id) == CloudState.RUNNING

    # Still running two minutes after its row ended: a real one, found and handled.
    sync.sync_instances(now=ended + timedelta(seconds=120))
    row = Orphan.objects.get()
    assert (row.known_instance_id, row.status) == (instance.pk, Orphan.Status.OPEN)
    sync.sync_instances(now=ended + timedelta(seconds=240))
    assert state_of(f0c, instance.external_id) != CloudState.RUNNING


def test_it_never_takes_another_accounts_instance_for_an_orphan(f0c, cloud, t0, settings):
    """Two provider accounts reaching one cloud account: each describe lists the other's
    instances. None is an orphan, and admins are told once of the two accounts."""
    settings.PORTAL_ORPHAN_POLICY = "terminate"
    second = factories.account(
        endpoint_url=cloud.url, name="Second door", access_key_id="AKIDTESTGOOD0002"
    )
    instance = running_lease(f0c, t0)
    for seconds in (0, 30, 60, 90, 300):
        sync.sync_instances(now=t0 + timedelta(seconds=seconds))

    assert not Orphan.objects.exists()
    assert state_of(f0c, instance.external_id) == CloudState.RUNNING
    f0c.account.refresh_from_db()
    second.refresh_from_db()
    assert f0c.account.cloud_account_id == second.cloud_account_id != ""
    [(subject, body)] = admin_notes(f0c)
    assert subject in (
        "Accounts Test cloud and Second door reach the same cloud account",
        "Accounts Second door and Test cloud reach the same cloud account",
    )
    assert f"cloud account {second.cloud_account_id}" in body


def test_it_shows_admins_which_accounts_share_a_cloud_account(f0c, cloud, t0, client):
    second = factories.account(
        endpoint_url=cloud.url, name="Second door", access_key_id="AKIDTESTGOOD0002"
    )
    running_lease(f0c, t0)
    sync.sync_instances(now=t0)
    f0c.admin.is_superuser = True
    f0c.admin.save()
    client.force_login(f0c.admin)
    page = client.get(reverse("admin:rental_provideraccount_change", args=[second.pk]))
    second.refresh_from_db()
    assert f"{second.cloud_account_id}, also reached by Test cloud" in page.content.decode()
