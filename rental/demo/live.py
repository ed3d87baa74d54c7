"""What the demo has running when it starts: two leases asked for through the portal's own
service, and the data volumes of earlier runs put back in the new local cloud.

The local cloud and the server room's own servers start empty at every run of
``manage.py demo``; the leases of the last run are found gone by the sync and closed. So
at every start three engineers ask again: chen a training run (its simulated agent
reports GPUs that rise and fall); amira four L4 GPUs, which the L4 pool places on its
own servers first (two instances of two GPUs, one on each server); then erik a notebook
on the JupyterLab image, which finds the own servers full and bursts to the demo cloud
(busy for two minutes, then idle, so the idle warning of L6 comes after about five
minutes and the reaping after twelve, unless he answers "I'm still using it"). They are
admitted, launched and billed like any other lease.
"""

from __future__ import annotations

from dataclasses import dataclass

from django.contrib.auth import get_user_model
from django.core.management.base import OutputWrapper
from django.db.models import Q

from portal.errors import DomainError
from portal.models import Project
from rental.demo.capacity import DEMO_ZONES
from rental.fleet.volume_cloud import volume_spec
from rental.loans.lease_request import submit_lease
from rental.models import DataVolume, GpuModel, Image, Market, Priority, ProviderAccount
from rental.providers.base import (
    ProviderError,
)
from rental.providers.registry import get_provider


@dataclass(frozen=True)
class LiveLease:
    username: str
    project: str
    gpu_model: str
    image: str  # the start of the image's name
    purpose: str
    hours: int = 8
    priority: str = Priority.EXPERIMENT
    gpus: int = 1


DEMO_LIVE_LEASES: tuple[LiveLease, ...] = (
    LiveLease(
        "chen",
        "speech",
        "A10G 24GB",
        "Deep Learning Base",
        "Whisper fine-tune on accented English",
    ),
    LiveLease(
        "amira",
        "nlp",
        "L4 24GB",
        "Deep Learning Base",
        "Distil the support-ticket classifier on the server room",
        gpus=4,
    ),
    LiveLease(
        "erik",
        "vision",
        "L4 24GB",
        "Jupyter Lab",
        "Look through the new defect labels in a notebook",
        hours=4,
    ),
)


def start_live_leases(stdout: OutputWrapper) -> int:
    """Ask for the demo's running leases, each through ``submit_lease`` as its engineer
    (admission, launch and billing as for anyone). A refusal (an admin changed the
    quotas) is said and skipped. Returns the leases asked for."""
    asked = 0
    for spec in DEMO_LIVE_LEASES:
        user = get_user_model().objects.filter(username=spec.username).first()
        project = Project.objects.filter(slug=spec.project).first()
        model = GpuModel.objects.filter(name=spec.gpu_model).first()
        image = Image.objects.filter(
            name__startswith=spec.image, project__isnull=True, is_active=True
        ).first()
        if None in (user, project, model, image):
            continue
        try:
            lease = submit_lease(
                actor=user,
                project=project,
                gpu_model=model,
                gpu_count=spec.gpus,
                duration_hours=spec.hours,
                priority=spec.priority,
                market=Market.ON_DEMAND,
                image=image,
                purpose=spec.purpose,
                source="command",
            )
        except DomainError as error:
            stdout.write(f"  {spec.username}'s lease was not started: {error.message}")
            continue
        asked += 1
        stdout.write(f"  {spec.username}: lease #{lease.pk} ({spec.purpose}), {lease.status}")
    return asked


def restore_volumes(account: ProviderAccount) -> int:
    """Put the data volumes an earlier run created back in the new local cloud, empty, so
    they can be attached again: each is created anew in its zone and its row points at
    the new volume, detached. A demo-only repair (a real cloud keeps its volumes).
    Returns the volumes put back."""
    provider = get_provider(account.config())
    restored = 0
    volumes = DataVolume.objects.filter(
        account=account, state__in=DataVolume.EXISTING, region__in=list(DEMO_ZONES)
    ).exclude(Q(volume_id="") | Q(state=DataVolume.State.DELETING))
    for volume in volumes.select_related("project"):
        try:
            cloud = provider.create_volume(
                volume_spec(volume), idempotency_key=volume.idempotency_key
            )
        except ProviderError:
            continue
        DataVolume.objects.filter(pk=volume.pk).update(
            volume_id=cloud.volume_id,
            state=DataVolume.State.AVAILABLE,
            attached_instance=None,
            device="",
        )
        restored += 1
    return restored
