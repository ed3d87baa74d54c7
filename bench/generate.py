"""Deterministic bench data: many ended leases with their usage, and a few live ones.

Call ``generate()`` after Django is set up (``bench/run.py`` does). Each project
gets a manager and three engineers, a quota per GPU model, one running lease (a
running instance, an open usage record), one lease waiting for approval, and
``leases_per_project - 2`` ended leases: terminated instances and closed usage
records spread over the previous and the current month. The same seed and the
same ``now`` give the same rows.
"""

import random
from dataclasses import dataclass
from datetime import datetime, timedelta
from decimal import Decimal

from django.contrib.auth import get_user_model
from django.contrib.auth.hashers import make_password
from django.contrib.auth.models import AbstractBaseUser
from django.db import transaction
from django.utils import timezone

from billing.selectors import period_start
from portal.models import Membership, Project
from rental.models import (
    GpuModel,
    Image,
    Instance,
    Market,
    Offering,
    Pool,
    Priority,
    ProviderAccount,
    Quota,
    Reservation,
    TerminationReason,
    Tier,
    UsageRecord,
)

PASSWORD = "bench-password-not-secret"
ENGINEERS_PER_PROJECT = 3
# Per project: one running lease and one waiting for approval, whatever the size.
LIVE_PER_PROJECT = 2
BATCH = 2000


@dataclass(frozen=True)
class Generated:
    projects: list[Project]
    manager: AbstractBaseUser  # manages projects[0]
    engineer: AbstractBaseUser  # engineer in projects[0]
    admin: AbstractBaseUser  # staff: sees every project
    now: datetime
    leases: int
    usage_records: int


def _catalog() -> tuple[list[GpuModel], list[Offering], Image]:
    a100, h100 = (
        GpuModel.objects.create(
            name=name,
            vendor=GpuModel.Vendor.NVIDIA,
            memory_gb=80,
            memory_bandwidth_gbps=bandwidth,
            bf16_tflops=Decimal(tflops),
            fp16_tflops=Decimal(tflops),
            interconnect=GpuModel.Interconnect.NVLINK,
        )
        for name, bandwidth, tflops in (("A100 80GB", 2039, "312"), ("H100 80GB", 3350, "989"))
    )
    account = ProviderAccount(
        name="Bench cloud", driver="aws", regions=["us-east-1"], endpoint_url="http://127.0.0.1:9"
    )
    account.set_credentials(access_key_id="AKIDBENCH0000001", secret_access_key="bench-secret")
    account.save()
    offerings = [
        Offering.objects.create(
            account=account,
            region="us-east-1",
            instance_type=instance_type,
            gpu_model=model,
            gpus_per_instance=gpus,
            vcpus=12 * gpus,
            memory_gib=117 * gpus,
            on_demand_price_per_hour=Decimal(on_demand),
            spot_price_per_hour=Decimal(spot),
        )
        for instance_type, model, gpus, on_demand, spot in (
            ("bench.a100x1", a100, 1, "2.500000", "1.000000"),
            ("bench.a100x8", a100, 8, "19.200000", "7.680000"),
            ("bench.h100x8", h100, 8, "39.330000", "15.700000"),
        )
    ]
    image = Image.objects.create(
        name="Deep Learning Base",
        account=account,
        region="us-east-1",
        image_id="ami-0bench000000001",
        os="Ubuntu 22.04",
        cuda_version="12.4",
        frameworks="PyTorch 2.5",
    )
    return [a100, h100], offerings, image


def _people(projects: int) -> tuple[list[Project], dict[int, list], AbstractBaseUser]:
    """Projects, their members (manager first) and one admin; one password hash for all."""
    user_model = get_user_model()
    password = make_password(PASSWORD)
    created = Project.objects.bulk_create(
        Project(slug=f"bench-{index:03d}", name=f"Bench project {index:03d}")
        for index in range(projects)
    )
    users = user_model.objects.bulk_create(
        user_model(
            username=f"bench-{index:03d}-{role}",
            email=f"bench-{index:03d}-{role}@example.com",
            password=password,
        )
        for index in range(projects)
        for role in ["manager", *(f"eng{n}" for n in range(ENGINEERS_PER_PROJECT))]
    )
    per_project = 1 + ENGINEERS_PER_PROJECT
    members = {
        project.pk: users[index * per_project : (index + 1) * per_project]
        for index, project in enumerate(created)
    }
    Membership.objects.bulk_create(
        Membership(
            user=person,
            project_id=project_id,
            role=Membership.Role.MANAGER if position == 0 else Membership.Role.ENGINEER,
        )
        for project_id, people in members.items()
        for position, person in enumerate(people)
    )
    admin = user_model.objects.create(
        username="bench-admin", email="bench-admin@example.com", password=password, is_staff=True
    )
    return created, members, admin


def _ended_window(
    rng: random.Random, now: datetime, current_share: float
) -> tuple[datetime, datetime]:
    """A run's (start, end) inside the previous or the current month, ended before ``now``."""
    this_month = period_start(now)
    previous_month = period_start(this_month - timedelta(days=1))
    latest = now - timedelta(minutes=2)
    if rng.random() < current_share and latest - this_month > timedelta(minutes=10):
        low, high = this_month, latest
    else:
        low, high = previous_month, this_month
    start = low + (high - low) * rng.random()
    if rng.random() < 0.05:  # short runs that owe the minimum (B1)
        length = timedelta(seconds=rng.randint(5, 59))
    else:
        length = timedelta(minutes=rng.randint(10, 12 * 60))
    end = min(start + length, latest)
    if end <= start:
        start = end - timedelta(seconds=30)
    return start.replace(microsecond=0), end.replace(microsecond=0)


def generate(
    *,
    projects: int = 20,
    leases_per_project: int = 50,
    seed: int = 1,
    now: datetime | None = None,
    current_share: float = 0.5,
) -> Generated:
    """Create the bench rows in an empty database; ``projects * leases_per_project`` leases.

    ``current_share`` of the ended leases fall in the current month (as far as
    ``now`` allows), the rest in the previous one; some runs cross the boundary.
    """
    if projects < 1 or leases_per_project < LIVE_PER_PROJECT:
        raise ValueError(f"need at least 1 project and {LIVE_PER_PROJECT} leases per project")
    rng = random.Random(seed)
    now = (now or timezone.now()).replace(microsecond=0)
    with transaction.atomic():
        gpu_models, offerings, image = _catalog()
        for model in gpu_models:
            Pool.objects.create(gpu_model=model, capacity=16 * projects)
        created, members, admin = _people(projects)
        Quota.objects.bulk_create(
            Quota(project=project, gpu_model=model, guaranteed=8, ceiling=16)
            for project in created
            for model in gpu_models
        )

        leases: list[Reservation] = []
        # Per lease: (offering, market, instance count, end reason) for its instances.
        runs: list[tuple[Offering, str, int, str]] = []
        for project in created:
            people = members[project.pk]
            manager = people[0]
            for _ in range(leases_per_project - LIVE_PER_PROJECT):
                offering = rng.choices(offerings, weights=(6, 3, 1))[0]
                market = Market.SPOT if rng.random() < 0.2 else Market.ON_DEMAND
                count = rng.choice((1, 1, 1, 2))
                start, end = _ended_window(rng, now, current_share)
                if market == Market.SPOT and rng.random() < 0.3:
                    reason = TerminationReason.SPOT_INTERRUPTED
                elif rng.random() < 0.03:
                    reason = TerminationReason.PREEMPTED
                else:
                    reason = rng.choice((TerminationReason.LEASE_END, TerminationReason.USER))
                planned_hours = max(1, int((end - start).total_seconds() // 3600) + 1)
                leases.append(
                    Reservation(
                        project=project,
                        requester=rng.choice(people),
                        gpu_model=offering.gpu_model,
                        gpu_count=count * offering.gpus_per_instance,
                        offering=offering,
                        instance_count=count,
                        market=market,
                        priority=rng.choice(list(Priority)),
                        image=image,
                        purpose="bench",
                        start=start,
                        end=start + timedelta(hours=planned_hours),
                        tier=Tier.SPOT
                        if market == Market.SPOT
                        else rng.choice((Tier.GUARANTEED, Tier.GUARANTEED, Tier.BURST)),
                        status=Reservation.Status.PREEMPTED
                        if reason == TerminationReason.PREEMPTED
                        else Reservation.Status.ENDED,
                        submitted_at=start - timedelta(minutes=rng.randint(1, 120)),
                        approved_by=manager,
                        approved_at=start - timedelta(minutes=1),
                        ended_at=end,
                        end_reason=reason,
                    )
                )
                runs.append((offering, market, count, reason))
            leases.append(
                Reservation(
                    project=project,
                    requester=people[1],
                    gpu_model=offerings[0].gpu_model,
                    gpu_count=1,
                    offering=offerings[0],
                    market=Market.ON_DEMAND,
                    image=image,
                    purpose="bench: running",
                    start=now - timedelta(hours=2),
                    end=now + timedelta(hours=6),
                    tier=Tier.GUARANTEED,
                    status=Reservation.Status.ACTIVE,
                    submitted_at=now - timedelta(hours=2, minutes=5),
                    approved_by=manager,
                    approved_at=now - timedelta(hours=2, minutes=1),
                )
            )
            runs.append((offerings[0], Market.ON_DEMAND, 1, ""))
            leases.append(
                Reservation(
                    project=project,
                    requester=people[-1],
                    gpu_model=offerings[1].gpu_model,
                    gpu_count=8,
                    offering=offerings[1],
                    market=Market.ON_DEMAND,
                    image=image,
                    purpose="bench: waiting for approval",
                    start=now + timedelta(hours=1),
                    end=now + timedelta(hours=9),
                    tier=Tier.BURST,
                    status=Reservation.Status.PENDING_APPROVAL,
                    submitted_at=now - timedelta(minutes=10),
                )
            )
            runs.append((offerings[1], Market.ON_DEMAND, 0, ""))
        Reservation.objects.bulk_create(leases, batch_size=BATCH)

        instances: list[Instance] = []
        for lease, (offering, market, count, reason) in zip(leases, runs, strict=True):
            live = lease.status == Reservation.Status.ACTIVE
            for _ in range(count):
                number = len(instances) + 1
                instances.append(
                    Instance(
                        reservation=lease,
                        account_id=offering.account_id,
                        offering=offering,
                        region=offering.region,
                        zone="us-east-1a",
                        external_id=f"i-bench{number:010d}",
                        idempotency_key=f"bench-{seed}-{number}",
                        state=Instance.State.RUNNING if live else Instance.State.TERMINATED,
                        market=market,
                        gpu_count=offering.gpus_per_instance,
                        rate_per_hour=offering.price_per_hour(market),
                        launch_attempts=1,
                        launched_at=lease.start,
                        running_at=lease.start,
                        terminated_at=None if live else lease.ended_at,
                        public_address=f"203.0.113.{number % 250 + 1}" if live else "",
                        ssh_user="ubuntu",
                        health=Instance.Health.HEALTHY if live else Instance.Health.UNKNOWN,
                        termination_reason=reason,
                    )
                )
        Instance.objects.bulk_create(instances, batch_size=BATCH)

        usage = [
            UsageRecord(
                instance=instance,
                project_id=instance.reservation.project_id,
                gpu_model_id=instance.offering.gpu_model_id,
                tier=instance.reservation.tier,
                market=instance.market,
                gpu_count=instance.gpu_count,
                start=instance.running_at,
                end=instance.terminated_at,
                rate=instance.offering.rate_per_gpu_hour(instance.market),
                end_reason=instance.termination_reason,
            )
            for instance in instances
        ]
        UsageRecord.objects.bulk_create(usage, batch_size=BATCH)

    first = members[created[0].pk]
    return Generated(
        projects=created,
        manager=first[0],
        engineer=first[1],
        admin=admin,
        now=now,
        leases=len(leases),
        usage_records=len(usage),
    )
