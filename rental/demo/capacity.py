"""The demo's capacity: pools with their quotas, and machine images."""

from __future__ import annotations

from dataclasses import dataclass, field
from decimal import Decimal
from typing import Any

from django.core.management.base import OutputWrapper

from portal import audit
from portal.errors import InvalidInput
from portal.models import Project
from rental.catalog.image_rules import parse_frameworks
from rental.loans import quotas
from rental.models import GpuModel, Image, Offering, Pool, ProviderAccount, Quota


@dataclass(frozen=True)
class PoolSpec:
    gpu_model: str
    capacity: int
    committed_gpus: int = 0
    committed_monthly_cost: Decimal = Decimal("0")
    # project slug → (G, L, auto-approve max hours, auto-approve max GPUs)
    quotas: dict[str, tuple[int, int, int | None, int | None]] = field(default_factory=dict)


# Q1 holds for each: Σ G ≤ C (≤ K where K > 0), and G ≤ L. The demo cloud sells A100 80GB
# in 8-GPU instances only, so its guarantees come in eights.
DEMO_POOLS: tuple[PoolSpec, ...] = (
    PoolSpec(
        "T4 16GB",
        8,
        quotas={"vision": (2, 4, 24, 4), "nlp": (0, 4, 12, 2), "speech": (2, 6, 24, 4)},
    ),
    PoolSpec(
        "A10G 24GB",
        16,
        quotas={"vision": (4, 8, 24, 8), "nlp": (4, 8, 24, 8), "speech": (2, 8, 24, 4)},
    ),
    PoolSpec(
        "L4 24GB",
        8,
        quotas={"vision": (2, 4, 24, 4), "nlp": (0, 4, 12, 4), "speech": (2, 4, 24, 4)},
    ),
    PoolSpec("L40S 48GB", 8, quotas={"vision": (2, 8, 24, 8), "nlp": (2, 4, 24, 4)}),
    PoolSpec(
        "A100 80GB",
        16,
        committed_gpus=8,
        committed_monthly_cost=Decimal("12000.00"),
        # One prepaid 8-GPU node (p4de.24xlarge), guaranteed to nlp.
        quotas={"vision": (0, 8, 24, 8), "nlp": (8, 16, 48, 16), "speech": (0, 8, 12, 8)},
    ),
    PoolSpec("H100 80GB", 16, quotas={"vision": (0, 8, 12, 8), "nlp": (8, 16, 48, 8)}),
)

# The zones of the demo cloud's region where its offerings run: a data volume is created
# in one of them, and a lease with that volume starts there (issue 8.9).
DEMO_ZONES: dict[str, list[str]] = {"us-east-1": ["us-east-1a", "us-east-1b", "us-east-1c"]}

# name, AMI id, OS, driver, CUDA, frameworks
DEMO_IMAGES: tuple[tuple[str, str, str, str, str, str], ...] = (
    (
        "Deep Learning Base — Ubuntu 22.04, CUDA 12.4, PyTorch 2.5",
        "ami-0d5e1c3f8a9b2c401",
        "Ubuntu 22.04",
        "550.127",
        "12.4",
        "PyTorch 2.5, TensorBoard 2.18",
    ),
    (
        "PaddlePaddle 2.6 — Ubuntu 22.04, CUDA 12.0",
        "ami-0f3b7a9c2d6e8a102",
        "Ubuntu 22.04",
        "535.183",
        "12.0",
        "PaddlePaddle 2.6",
    ),
    (
        "Jupyter Lab — Ubuntu 22.04",
        "ami-0a9c4e2b7d1f6c303",
        "Ubuntu 22.04",
        "550.127",
        "12.4",
        "JupyterLab 4, PyTorch 2.5",
    ),
)


def seed_pools_and_quotas(admin: Any, projects: dict[str, Project], stderr: OutputWrapper) -> None:
    """A pool per sold GPU model, with its quotas; existing ones are kept as they are."""
    for spec in DEMO_POOLS:
        model = GpuModel.objects.filter(name=spec.gpu_model).first()
        if model is None or not model.offerings.filter(is_available=True).exists():
            stderr.write(f"  no offering sells {spec.gpu_model}; no pool for it")
            continue
        pool, created = Pool.objects.get_or_create(
            gpu_model=model,
            defaults={
                "capacity": spec.capacity,
                "committed_gpus": spec.committed_gpus,
                "committed_monthly_cost": spec.committed_monthly_cost,
            },
        )
        if created:
            audit.record(
                actor=admin,
                verb="pool.created",
                obj=pool,
                source="command",
                after={"capacity": pool.capacity, "committed_gpus": pool.committed_gpus},
            )
        for slug, (guaranteed, ceiling, max_hours, max_gpus) in spec.quotas.items():
            if Quota.objects.filter(project=projects[slug], gpu_model=model).exists():
                continue
            try:
                quotas.set_quota(
                    actor=admin,
                    project=projects[slug],
                    gpu_model=model,
                    guaranteed=guaranteed,
                    ceiling=ceiling,
                    max_hours_per_lease=max_hours,
                    max_gpus_per_lease=max_gpus,
                    source="command",
                )
            except InvalidInput as exc:  # an admin changed the pool since: keep theirs
                stderr.write(f"  quota {slug} · {model} skipped: {exc.message}")


def seed_images(account: ProviderAccount) -> list[Image]:
    """The demo machine images in the account's default region."""
    images = []
    for name, image_id, os_name, driver, cuda, frameworks in DEMO_IMAGES:
        image, _created = Image.objects.get_or_create(
            account=account,
            region=account.default_region,
            image_id=image_id,
            defaults={
                "name": name,
                "os": os_name,
                "driver_version": driver,
                "cuda_version": cuda,
                "frameworks": frameworks,
                "framework_versions": parse_frameworks(frameworks),
                "ssh_user": "ubuntu",
            },
        )
        images.append(image)
    return images


def seed_offering_zones(account: ProviderAccount) -> int:
    """The demo cloud's zones on each of the account's offerings that lists none (one an
    admin gave zones keeps them); returns how many offerings were given zones."""
    changed = 0
    for region, zones in DEMO_ZONES.items():
        changed += Offering.objects.filter(account=account, region=region, zones=[]).update(
            zones=zones
        )
    return changed
