"""The demo's data: seeded once however often ``manage.py demo`` runs, and within the rules."""

from collections import defaultdict
from datetime import datetime
from io import StringIO

import pytest
from django.contrib.auth import get_user_model
from django.contrib.auth.models import Group
from django.core.management import call_command
from django.core.management.base import OutputWrapper
from django.db import models
from django.utils import timezone

from billing.models import Budget
from billing.reports import idle_waste
from portal.models import FINANCE_GROUP, AuditEvent, Membership, Project
from rental.catalog.volumes import volume_zones
from rental.demo import DEMO_LIVE_LEASES, restore_volumes, start_live_leases
from rental.fleet.cloud import provider_for
from rental.loans.quotas import check_quota
from rental.management.commands.seed_demo import DEMO_ACCOUNT
from rental.models import (
    DataVolume,
    Image,
    Instance,
    Offering,
    Pool,
    Quota,
    Reservation,
    SshKey,
    Tier,
    UsageRecord,
    UtilizationRollup,
)
from tests import factories

COUNTED = (
    get_user_model(),
    Group,
    Project,
    Membership,
    Pool,
    Quota,
    Image,
    SshKey,
    Reservation,
    Instance,
    UsageRecord,
    UtilizationRollup,
    Budget,
    AuditEvent,
)


@pytest.fixture
def demo_account(db):
    # Seeding makes no cloud call, so the endpoint need not answer.
    return factories.account(name=DEMO_ACCOUNT)


def seed() -> None:
    call_command("load_catalog", "--account", DEMO_ACCOUNT, stdout=StringIO())
    call_command("seed_demo", stdout=StringIO(), stderr=StringIO())
    call_command("seed_demo_billing", stdout=StringIO())


def counts() -> dict[str, int]:
    return {model._meta.label: model.objects.count() for model in COUNTED}


def peak(intervals: list[tuple[datetime, datetime, int]]) -> int:
    events = sorted(
        [(start, gpus) for start, _end, gpus in intervals]
        + [(end, -gpus) for _start, end, gpus in intervals]
    )
    current = highest = 0
    for _at, change in events:
        current += change
        highest = max(highest, current)
    return highest


def test_it_seeds_everything_once(demo_account):
    seed()
    first = counts()
    seed()

    assert counts() == first
    users = get_user_model().objects
    assert set(users.values_list("username", flat=True)) == {
        "admin",
        "maria",
        "li.wei",
        "erik",
        "amira",
        "chen",
        "fiona",
    }
    assert users.get(username="admin").is_staff
    assert users.get(username="fiona").groups.filter(name=FINANCE_GROUP).exists()
    assert users.get(username="erik").check_password("demo-erik")
    assert dict(
        Membership.objects.filter(user__username="maria").values_list("project__slug", "role")
    ) == {"vision": "manager", "speech": "engineer"}
    assert set(Project.objects.values_list("slug", flat=True)) == {"vision", "nlp", "speech"}
    assert not Project.objects.filter(cost_center="").exists()
    assert first["auth.User"] == 7
    assert first["billing.Budget"] == 3
    assert first["rental.Image"] == 3
    for project in Project.objects.all():
        assert 15 <= project.reservations.count() <= 30


def test_it_keeps_every_quota_within_q1(demo_account):
    seed()

    pools = Pool.objects.select_related("gpu_model")
    assert pools.filter(committed_gpus__gt=0).exists()
    for pool in pools:
        quotas = list(Quota.objects.filter(gpu_model=pool.gpu_model))
        assert quotas, pool
        assert sum(quota.guaranteed for quota in quotas) <= pool.guarantee_bound
        for quota in quotas:
            assert quota.guaranteed <= quota.ceiling
            check_quota(
                pool=pool,
                project=quota.project_id,
                guaranteed=quota.guaranteed,
                ceiling=quota.ceiling,
                weight=quota.weight,
            )


def test_it_closes_every_history_usage_record(demo_account):
    seed()

    records = UsageRecord.objects.select_related("instance__offering")
    assert records.count() > 40
    assert not records.filter(end__isnull=True).exists()
    now = timezone.now()
    for record in records:
        assert record.start <= record.end <= now
        assert record.start == record.instance.running_at
        assert record.end == record.instance.terminated_at
        assert record.rate == record.instance.offering.rate_per_gpu_hour(record.market)
    assert not Instance.objects.exclude(
        state__in=(Instance.State.TERMINATED, Instance.State.FAILED)
    ).exists()
    assert not Reservation.objects.exclude(status__in=Reservation.FINAL).exists()
    assert Reservation.objects.filter(status=Reservation.Status.PREEMPTED).exists()
    assert Reservation.objects.filter(end_reason="user").exists()


def test_it_keeps_history_within_capacity_guarantees_and_ceilings(demo_account):
    seed()

    pools = {pool.gpu_model_id: pool for pool in Pool.objects.all()}
    quotas = {(q.project_id, q.gpu_model_id): q for q in Quota.objects.all()}
    per_pool = defaultdict(list)
    guaranteed = defaultdict(list)
    non_spot = defaultdict(list)
    for record in UsageRecord.objects.all():
        interval = (record.start, record.end, record.gpu_count)
        key = (record.project_id, record.gpu_model_id)
        per_pool[record.gpu_model_id].append(interval)
        if record.tier == Tier.GUARANTEED:
            guaranteed[key].append(interval)
        if record.tier != Tier.SPOT:
            non_spot[key].append(interval)

    for model_id, intervals in per_pool.items():
        assert peak(intervals) <= pools[model_id].capacity
    for key, intervals in guaranteed.items():
        assert peak(intervals) <= quotas[key].guaranteed
    for key, intervals in non_spot.items():
        assert peak(intervals) <= quotas[key].ceiling


def test_it_gives_the_offerings_zones_so_data_volumes_can_be_made(demo_account):
    call_command("load_catalog", "--account", DEMO_ACCOUNT, stdout=StringIO())
    kept = Offering.objects.filter(account=demo_account).first()
    kept.zones = ["us-east-1f"]  # an admin's choice
    kept.save()
    seed()

    offerings = Offering.objects.filter(account=demo_account)
    assert not offerings.filter(zones=[]).exists()
    assert offerings.get(pk=kept.pk).zones == ["us-east-1f"]
    assert {zone.zone for zone in volume_zones()} >= {"us-east-1a", "us-east-1b", "us-east-1c"}


def test_it_seeds_the_history_utilization_the_idle_waste_report_reads(demo_account):
    seed()

    rollups = UtilizationRollup.objects.all()
    assert rollups.exists()
    assert not rollups.filter(idle_samples__gt=models.F("samples")).exists()
    reaped = Reservation.objects.filter(end_reason="idle").first()
    assert reaped is not None
    last = UtilizationRollup.objects.filter(instance__reservation=reaped).order_by("hour").last()
    assert last.idle_samples > 0  # the idle stretch that reaped it
    for project in Project.objects.all():
        waste = idle_waste(project_id=project.pk, now=timezone.now())
        assert sum(row.idle_gpu_seconds for row in waste) > 0, project.slug


def test_it_starts_a_training_run_and_a_notebook_through_the_service(demo_account):
    seed()
    out = StringIO()

    assert start_live_leases(OutputWrapper(out)) == 3  # and amira's, for the own servers

    live = Reservation.objects.exclude(status__in=Reservation.FINAL).order_by("pk")
    leases = {lease.requester.username: lease for lease in live}
    assert leases["chen"].image.name.startswith("Deep Learning Base")
    assert "TensorBoard" in leases["chen"].image.frameworks
    assert leases["erik"].image.name.startswith("Jupyter Lab")  # the one that goes idle
    assert [lease.purpose for lease in leases.values()] == [s.purpose for s in DEMO_LIVE_LEASES]
    assert {lease.status for lease in leases.values()} == {"provisioning"}
    Quota.objects.filter(project__slug="vision").update(guaranteed=0, ceiling=0)
    assert start_live_leases(OutputWrapper(out)) == 2
    assert "erik's lease was not started" in out.getvalue()


def test_it_puts_the_last_runs_volumes_back_in_a_new_empty_cloud(cloud, db):
    account = factories.account(name=DEMO_ACCOUNT, endpoint_url=cloud.url)
    project = factories.project("vision")
    kept = DataVolume.objects.create(
        project=project,
        account=account,
        name="datasets",
        region="us-east-1",
        zone="us-east-1b",
        size_gb=50,
        volume_id="vol-0fromthelastrun",
        state=DataVolume.State.IN_USE,
        device="/dev/sdf",
    )
    DataVolume.objects.create(
        project=project,
        account=account,
        name="gone",
        zone="us-east-1a",
        size_gb=5,
        volume_id="vol-0deleted",
        state=DataVolume.State.DELETED,
    )

    assert restore_volumes(account) == 1

    kept.refresh_from_db()
    assert (kept.state, kept.device, kept.attached_instance) == ("available", "", None)
    found = provider_for(Instance(account=account)).describe_volumes(
        [kept.volume_id], region="us-east-1"
    )
    assert [(v.zone, v.size_gb, v.state) for v in found] == [("us-east-1b", 50, "available")]
    assert restore_volumes(account) == 1  # each start: the same volume, not a second one
    assert cloud.count("CreateVolume") == 1
