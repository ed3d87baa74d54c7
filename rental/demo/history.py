"""The demo's history: about three weeks of ended leases per project, within the rules.

The history is ended leases only, so nothing in it is expected to run in the local cloud;
at every instant it stays within each pool's capacity and each project's guarantee and
ceiling.
"""

from __future__ import annotations

import random
from dataclasses import dataclass
from datetime import datetime, timedelta
from decimal import Decimal
from typing import Any

from django.utils import timezone
from django.utils.translation import gettext_noop

from portal import audit
from portal.models import Membership, Project
from portal.phrases import Phrase, duration, plural_noop
from rental import selectors
from rental.demo.people import ENGINEER, MANAGER
from rental.models import (
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
from rental.providers.base import (
    TAG_IDEMPOTENCY_KEY,
    TAG_INSTALLATION,
    TAG_PROJECT,
    TAG_REQUESTER,
    TAG_RESERVATION,
)

HISTORY_DAYS = 21
HISTORY_KEY_PREFIX = "demo-history"

PURPOSES: dict[str, tuple[str, ...]] = {
    "vision": (
        "Fine-tune the warehouse detector on new labels",
        "ViT-L pretraining ablation",
        "Segmentation model evaluation",
        "Augmentation sweep for the defect classifier",
        "SAM fine-tuning on surface defects",
        "Retrain YOLO with the March labels",
    ),
    "nlp": (
        "LoRA fine-tune of the 7B assistant",
        "Tokenizer experiments",
        "Evaluation harness run",
        "Distillation to a 1B student",
        "Refresh RAG embeddings",
        "vLLM inference benchmark",
    ),
    "speech": (
        "Whisper fine-tune on accented English",
        "TTS vocoder training",
        "ASR evaluation on the call-center set",
        "Diarization experiments",
    ),
}

DURATIONS_HOURS = (1, 1, 2, 2, 3, 4, 4, 6, 8, 10, 12)
COUNT_WEIGHTS = {1: 6, 2: 4, 4: 3, 8: 2, 16: 1}
PRIORITY_WEIGHTS = {Priority.PRODUCTION: 2, Priority.EXPERIMENT: 5, Priority.LEARNING: 3}


@dataclass(frozen=True)
class Run:
    """A stretch of GPUs held in a pool, for keeping the history within its limits."""

    project_id: int
    gpu_model_id: int
    tier: str
    gpus: int
    start: datetime
    end: datetime


def peak(runs: list[Run], start: datetime, end: datetime) -> int:
    """The most GPUs ``runs`` hold at once within [start, end); ends before starts."""
    events: list[tuple[datetime, int]] = []
    for run in runs:
        if run.start < end and run.end > start:
            events.append((max(run.start, start), run.gpus))
            events.append((min(run.end, end), -run.gpus))
    events.sort()
    current = highest = 0
    for _at, change in events:
        current += change
        highest = max(highest, current)
    return highest


def seed_history(project: Project, *, account: ProviderAccount, images: list[Image]) -> int:
    """About three weeks of ended leases for one project, once."""
    key_prefix = f"{HISTORY_KEY_PREFIX}-{project.slug}-"
    if Instance.objects.filter(idempotency_key__startswith=key_prefix).exists():
        return 0
    history = HistoryWriter(project=project, account=account, images=images)
    return history.write(key_prefix)


class HistoryWriter:
    """Generates one project's ended leases with a fixed random seed and writes them."""

    def __init__(self, *, project: Project, account: ProviderAccount, images: list[Image]):
        self.project = project
        self.account = account
        self.images = images
        self.rng = random.Random(f"gpu-portal-demo:{project.slug}")
        self.now = timezone.now().replace(microsecond=0)
        self.window_start = (self.now - timedelta(days=HISTORY_DAYS)).replace(minute=0, second=0)
        self.quotas = {
            quota.gpu_model_id: quota
            for quota in Quota.objects.filter(project=project, ceiling__gt=0).select_related(
                "gpu_model__pool"
            )
            if hasattr(quota.gpu_model, "pool")
        }
        memberships = Membership.objects.filter(project=project).select_related("user")
        self.engineers = [m.user for m in memberships if m.role == ENGINEER]
        self.managers = [m.user for m in memberships if m.role == MANAGER]
        # Everything already held in these pools in the window (other projects' history).
        self.runs = [
            Run(r.project_id, r.gpu_model_id, r.tier, r.gpu_count, r.start, r.end)
            for r in UsageRecord.objects.filter(
                gpu_model_id__in=list(self.quotas),
                end__gt=self.window_start,
                end__isnull=False,
            )
        ]

    def write(self, key_prefix: str) -> int:
        if not self.quotas or not self.engineers:
            return 0
        wanted = self.rng.randint(15, 30)
        plans: list[dict[str, Any]] = []
        failures = 0
        for _attempt in range(wanted * 20):
            if len(plans) >= wanted:
                break
            plan = self.plan_lease(allow_failure=failures < 2)
            if plan is None:
                continue
            failures += plan["outcome"] == "failed"
            plans.append(plan)
        plans.sort(key=lambda p: p["submitted_at"])
        leases = Reservation.objects.bulk_create([plan["lease"] for plan in plans])
        instances: list[Instance] = []
        for plan, lease in zip(plans, leases, strict=True):
            for index, instance in enumerate(plan["instances"]):
                instance.reservation = lease
                instance.idempotency_key = f"{key_prefix}{lease.pk}-{index}"
                instance.tags = {
                    TAG_INSTALLATION: "demo",
                    TAG_PROJECT: self.project.slug,
                    TAG_RESERVATION: str(lease.pk),
                    TAG_REQUESTER: lease.requester.get_username(),
                    TAG_IDEMPOTENCY_KEY: instance.idempotency_key,
                }
                instances.append(instance)
        Instance.objects.bulk_create(instances)
        UsageRecord.objects.bulk_create(
            UsageRecord(
                instance=instance,
                project=self.project,
                gpu_model_id=instance.reservation.gpu_model_id,
                tier=instance.reservation.tier,
                market=instance.market,
                gpu_count=instance.gpu_count,
                start=instance.running_at,
                end=instance.terminated_at,
                rate=(instance.rate_per_hour / instance.gpu_count).quantize(Decimal("0.000001")),
                end_reason=instance.termination_reason,
            )
            for instance in instances
            if instance.running_at is not None
        )
        for plan, lease in zip(plans, leases, strict=True):
            self.record_audit(lease, plan)
        return len(leases)

    # Planning ----------------------------------------------------------------------------

    def plan_lease(self, *, allow_failure: bool) -> dict[str, Any] | None:
        rng = self.rng
        quota = rng.choices(
            list(self.quotas.values()), weights=[q.ceiling for q in self.quotas.values()]
        )[0]
        model = quota.gpu_model
        pool: Pool = model.pool
        market = Market.SPOT if rng.random() < 0.25 else Market.ON_DEMAND
        priority = rng.choices(list(PRIORITY_WEIGHTS), weights=list(PRIORITY_WEIGHTS.values()))[0]
        counts = [
            count
            for count in COUNT_WEIGHTS
            if count <= quota.ceiling
            and selectors.fitting_offerings(gpu_model=model, gpu_count=count, market=market)
        ]
        if not counts:
            return None
        gpu_count = rng.choices(counts, weights=[COUNT_WEIGHTS[c] for c in counts])[0]
        offering: Offering = selectors.fitting_offerings(
            gpu_model=model, gpu_count=gpu_count, market=market
        )[0]
        hours = rng.choice(DURATIONS_HOURS)
        submitted_at = self.window_start + timedelta(
            days=rng.randrange(HISTORY_DAYS),
            hours=rng.randint(6, 19),
            minutes=rng.randrange(60),
            seconds=rng.randrange(60),
        )
        requester = rng.choice(self.engineers)
        approved_by, approved_at = None, None
        needs_approval = (
            quota.max_gpus_per_lease is not None and gpu_count > quota.max_gpus_per_lease
        ) or (quota.max_hours_per_lease is not None and hours > quota.max_hours_per_lease)
        start = submitted_at
        if needs_approval:
            if not self.managers:
                return None
            approved_by = rng.choice(self.managers)
            approved_at = start = submitted_at + timedelta(minutes=rng.randint(8, 90))
        end = start + timedelta(hours=hours)
        if end > self.now - timedelta(minutes=30):
            return None

        outcome = self.choose_outcome(market, priority, allow_failure)
        tier = self.choose_tier(
            quota=quota,
            pool=pool,
            market=market,
            priority=priority,
            n=gpu_count,
            start=start,
            end=end,
            holds=outcome != "failed",
        )
        if tier is None:
            return None

        lease = Reservation(
            project=self.project,
            requester=requester,
            gpu_model=model,
            gpu_count=gpu_count,
            offering=offering,
            instance_count=gpu_count // offering.gpus_per_instance,
            market=market,
            priority=priority,
            image=rng.choice(self.images),
            purpose=rng.choice(PURPOSES.get(self.project.slug, ("Training run",))),
            start=start,
            end=end,
            tier=tier,
            submitted_at=submitted_at,
            approved_by=approved_by,
            approved_at=approved_at,
            requeue_on_preemption=market == Market.SPOT and rng.random() < 0.5,
        )
        instances = self.plan_instances(lease, offering, outcome)
        if outcome != "failed":
            self.runs.append(
                Run(self.project.pk, model.pk, tier, gpu_count, start, lease.ended_at or end)
            )
        return {
            "lease": lease,
            "instances": instances,
            "outcome": outcome,
            "submitted_at": submitted_at,
        }

    def choose_outcome(self, market: str, priority: str, allow_failure: bool) -> str:
        roll = self.rng.random()
        if allow_failure and roll < 0.05:
            return "failed"
        if market == Market.SPOT and roll < 0.4:
            return TerminationReason.SPOT_INTERRUPTED
        if priority == Priority.LEARNING and roll < 0.25:
            return TerminationReason.IDLE
        if roll > 0.78:
            return TerminationReason.USER
        return TerminationReason.LEASE_END

    def choose_tier(
        self,
        *,
        quota: Quota,
        pool: Pool,
        market: str,
        priority: str,
        n: int,
        start: datetime,
        end: datetime,
        holds: bool,
    ) -> str | None:
        """The tier admission (Q2, Q4) would have given at every instant of [start, end),
        or None when the lease would not have fit."""
        same_pool = [run for run in self.runs if run.gpu_model_id == quota.gpu_model_id]
        if holds and peak(same_pool, start, end) + n > pool.capacity:
            return None
        if market == Market.SPOT:
            return Tier.SPOT
        mine = [run for run in same_pool if run.project_id == self.project.pk]
        guaranteed = [run for run in mine if run.tier == Tier.GUARANTEED]
        if peak(guaranteed, start, end) + n <= quota.guaranteed:
            return Tier.GUARANTEED
        non_spot = [run for run in mine if run.tier != Tier.SPOT]
        if priority != Priority.PRODUCTION and peak(non_spot, start, end) + n <= quota.ceiling:
            return Tier.BURST
        return None

    def plan_instances(
        self, lease: Reservation, offering: Offering, outcome: str
    ) -> list[Instance]:
        """The lease's instances, and its final status, as the lifecycle would leave them."""
        rng = self.rng
        rate = offering.rate_per_gpu_hour(lease.market) or Decimal("0")
        zone = f"{offering.region}{rng.choice('abcdf')}"
        length = lease.end - lease.start
        # What every instance of the lease has, however it ended.
        common: dict[str, Any] = {
            "account": offering.account,
            "offering": offering,
            "region": offering.region,
            "zone": zone,
            "market": lease.market,
            "gpu_count": offering.gpus_per_instance,
            "rate_per_hour": rate * offering.gpus_per_instance,
            "claimed_at": lease.start,
            "ssh_user": lease.image.ssh_user,
        }
        if outcome == "failed":
            failed_at = lease.start + timedelta(
                minutes=rng.randint(6, 9), seconds=rng.randrange(60)
            )
            # As the launch would say it (rental.fleet.launching.failure_message).
            message = Phrase(
                gettext_noop("%(tried)s; %(suggestion)s"),
                tried=Phrase(
                    gettext_noop(
                        "No %(model)s capacity in %(zones)s and %(types)s after %(tries)s "
                        "over %(elapsed)s"
                    ),
                    model=lease.gpu_model.name,
                    zones=Phrase(plural_noop("%(n)s zone", "%(n)s zones"), n=3),
                    types=Phrase(plural_noop("%(n)s instance type", "%(n)s instance types"), n=1),
                    tries=Phrase(plural_noop("%(n)s try", "%(n)s tries"), n=6),
                    elapsed=duration((failed_at - lease.start).total_seconds()),
                ),
                suggestion=Phrase(gettext_noop("try fewer GPUs or a later start.")),
            )
            lease.status = Reservation.Status.FAILED
            lease.status_code = "launch_failed"
            lease.status_message = message
            lease.end_reason = TerminationReason.FAILED
            lease.ended_at = failed_at
            return [
                Instance(
                    **common,
                    state=Instance.State.FAILED,
                    launch_attempts=6,
                    last_error=message,
                    terminated_at=failed_at,
                    termination_reason=TerminationReason.FAILED,
                )
                for _index in range(lease.instance_count)
            ]

        if outcome == TerminationReason.LEASE_END:
            stopped_at = lease.end
        else:
            stopped_at = lease.start + length * rng.uniform(0.25, 0.9)
            stopped_at = stopped_at.replace(microsecond=0)
        lease.ended_at = stopped_at
        lease.end_reason = outcome
        lease.status = {
            TerminationReason.SPOT_INTERRUPTED: Reservation.Status.PREEMPTED,
            TerminationReason.IDLE: Reservation.Status.REAPED,
        }.get(outcome, Reservation.Status.ENDED)
        if outcome == TerminationReason.SPOT_INTERRUPTED:
            lease.status_message = Phrase(gettext_noop("The cloud reclaimed the spot capacity."))
        elif outcome == TerminationReason.IDLE:
            lease.status_message = Phrase(
                gettext_noop("Ended after %(count)s idle samples in a row."), count=30
            )
        instances = []
        for _index in range(lease.instance_count):
            launched_at = lease.start + timedelta(seconds=rng.randint(4, 25))
            running_at = launched_at + timedelta(seconds=rng.randint(40, 150))
            instances.append(
                Instance(
                    **common,
                    external_id=f"i-0{rng.getrandbits(64):016x}",
                    state=Instance.State.TERMINATED,
                    launch_attempts=1,
                    launched_at=launched_at,
                    running_at=running_at,
                    terminated_at=max(stopped_at, running_at),
                    public_address=(
                        f"3.{rng.randint(80, 239)}.{rng.randrange(256)}.{rng.randint(1, 254)}"
                    ),
                    private_address=f"10.0.{rng.randrange(64)}.{rng.randint(4, 250)}",
                    health=Instance.Health.HEALTHY,
                    termination_reason=outcome,
                    last_heartbeat_at=max(stopped_at - timedelta(seconds=30), running_at),
                )
            )
        return instances

    # Audit -------------------------------------------------------------------------------

    def record_audit(self, lease: Reservation, plan: dict[str, Any]) -> None:
        project = self.project
        audit.record(
            actor=lease.requester,
            verb="lease.submitted",
            obj=lease,
            project=project,
            source="web",
            at=lease.submitted_at,
            after={
                "status": Reservation.Status.PENDING_APPROVAL
                if lease.approved_by
                else Reservation.Status.PROVISIONING,
                "tier": lease.tier,
                "gpus": lease.gpu_count,
            },
        )
        if lease.approved_by:
            audit.record(
                actor=lease.approved_by,
                verb="lease.approved",
                obj=lease,
                project=project,
                source="web",
                at=lease.approved_at,
                before={"status": Reservation.Status.PENDING_APPROVAL},
                after={"status": Reservation.Status.PROVISIONING, "tier": lease.tier},
            )
        instances: list[Instance] = plan["instances"]
        if plan["outcome"] == "failed":
            for instance in instances:
                self.record_worker(
                    "instance.failed", instance, instance.terminated_at, message=instance.last_error
                )
            return
        for instance in instances:
            self.record_worker(
                "instance.running", instance, instance.running_at, address=instance.public_address
            )
        if lease.end_reason in (
            TerminationReason.LEASE_END,
            TerminationReason.USER,
            TerminationReason.IDLE,
        ):
            by_user = lease.end_reason == TerminationReason.USER
            audit.record(
                actor=lease.requester if by_user else None,
                verb="lease.ended",
                obj=lease,
                project=project,
                source="web" if by_user else "worker",
                at=lease.ended_at,
                before={"status": Reservation.Status.ACTIVE},
                after={"status": Reservation.Status.ENDING, "reason": lease.end_reason},
            )
        for instance in instances:
            self.record_worker(
                "instance.terminated",
                instance,
                instance.terminated_at,
                reason=instance.termination_reason,
            )

    def record_worker(
        self, verb: str, instance: Instance, at: datetime | None, **after: Any
    ) -> None:
        """An instance event as the worker records it."""
        audit.record(
            actor=None,
            verb=verb,
            obj=instance,
            project=self.project,
            source="worker",
            at=at,
            after=after,
        )
