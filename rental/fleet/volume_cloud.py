"""The cloud side of data volumes: the task bodies behind rental.jobs' volume jobs.

As with instances, no provider call is made inside a transaction: a call claims the row
(a conditional update, so a duplicate delivery finds nothing to do), calls the driver,
then records the answer in a short transaction. The driver's idempotency key (a tag and
EC2's ClientToken) makes a retried create find the first volume instead of a second.
"""

import logging
from datetime import datetime, timedelta

from django.conf import settings
from django.db import transaction
from django.db.models import Q
from django.utils import timezone
from django.utils.translation import gettext_noop

from portal import audit
from portal.notifications import notify
from portal.phrases import Phrase, Text, bounded
from rental.catalog import storage
from rental.fleet.cloud import LaunchRetry
from rental.models import DataVolume, Instance
from rental.providers.base import (
    TAG_INSTALLATION,
    TAG_PROJECT,
    ProviderError,
    VolumeSpec,
)
from rental.providers.registry import get_provider

logger = logging.getLogger(__name__)
VState = DataVolume.State


def _provider(volume: DataVolume):
    return get_provider(volume.account.config())


def _claim(volume_id: int, state: str, now: datetime) -> bool:
    stale = now - timedelta(seconds=settings.PORTAL_LAUNCH_STALE_SECONDS)
    return bool(
        DataVolume.objects.filter(pk=volume_id, state=state)
        .filter(Q(claimed_at__isnull=True) | Q(claimed_at__lt=stale))
        .update(claimed_at=now)
    )


def _release(volume_id: int, error: ProviderError) -> None:
    DataVolume.objects.filter(pk=volume_id).update(claimed_at=None, last_error=error.message[:500])


def volume_spec(volume: DataVolume) -> VolumeSpec:
    """What the cloud is asked to make for a data volume: its place, size, tags and name
    (the volume's project loaded)."""
    return VolumeSpec(
        region=volume.region,
        zone=volume.zone,
        size_gb=volume.size_gb,
        tags=tuple(
            sorted(
                {
                    TAG_INSTALLATION: settings.PORTAL_INSTALLATION_ID,
                    TAG_PROJECT: volume.project.slug,
                }.items()
            )
        ),
        name=f"gpu-portal {volume.project.slug} {volume.name}",
    )


def create_in_cloud(volume_id: int, *, now: datetime | None = None) -> None:
    """Create the volume, exactly once however often this is delivered."""
    now = now or timezone.now()
    if not DataVolume.objects.filter(pk=volume_id, volume_id="").exists():
        return
    if not _claim(volume_id, VState.CREATING, now):
        return
    volume = DataVolume.objects.select_related("account", "project").get(pk=volume_id)
    try:
        cloud = _provider(volume).create_volume(
            volume_spec(volume), idempotency_key=volume.idempotency_key
        )
    except ProviderError as error:
        if error.retryable:
            _release(volume_id, error)
            raise LaunchRetry(error.message) from error
        _fail(volume_id, error.message, now=now)
        return
    _record_created(volume_id, cloud.volume_id, now=now)


@transaction.atomic
def _record_created(volume_id: int, cloud_id: str, *, now: datetime) -> None:
    volume = DataVolume.objects.select_for_update().get(pk=volume_id)
    if volume.volume_id:
        return
    volume.volume_id = cloud_id
    volume.state = VState.AVAILABLE
    volume.claimed_at = None
    volume.last_error = ""
    volume.save(update_fields=["volume_id", "state", "claimed_at", "last_error"])
    storage.open_volume(volume, at=now)  # billed from now on (B8)
    audit.record(
        actor=None,
        verb="volume.available",
        obj=volume,
        project=volume.project_id,
        source="worker",
        at=now,
        after={"volume_id": cloud_id},
    )


@transaction.atomic
def _fail(volume_id: int, message: str, *, now: datetime) -> None:
    volume = DataVolume.objects.select_for_update().get(pk=volume_id)
    if volume.state != VState.CREATING:
        return
    volume.state = VState.FAILED
    volume.claimed_at = None
    volume.last_error = message[:500]
    volume.save(update_fields=["state", "claimed_at", "last_error"])
    audit.record(
        actor=None,
        verb="volume.failed",
        obj=volume,
        project=volume.project_id,
        source="worker",
        at=now,
        after={"message": message},
    )
    if volume.created_by is not None:
        notify(
            [volume.created_by],
            subject=Phrase(gettext_noop("Could not create the volume %(name)s"), name=volume.name),
            body=message,
        )


def attach_in_cloud(volume_id: int, *, now: datetime | None = None) -> None:
    """Attach the volume to the instance it was given to; a duplicate finds it attached."""
    now = now or timezone.now()
    if not _claim(volume_id, VState.ATTACHING, now):
        return
    volume = DataVolume.objects.select_related("account", "attached_instance").get(pk=volume_id)
    instance = volume.attached_instance
    if instance is None or instance.state != Instance.State.RUNNING or not instance.external_id:
        _record_attach(
            volume_id,
            ok=False,
            message=Phrase(gettext_noop("The instance is not running.")),
            now=now,
        )
        return
    try:
        _provider(volume).attach_volume(
            volume.volume_id,
            instance_id=instance.external_id,
            device=volume.device,
            region=volume.region,
        )
    except ProviderError as error:
        if error.retryable or error.message.startswith("IncorrectState"):
            _release(volume_id, error)
            raise LaunchRetry(error.message) from error
        _record_attach(volume_id, ok=False, message=error.message, now=now)
        return
    _record_attach(volume_id, ok=True, message="", now=now)


@transaction.atomic
def _record_attach(volume_id: int, *, ok: bool, message: Text, now: datetime) -> None:
    volume = DataVolume.objects.select_for_update().get(pk=volume_id)
    if volume.state != VState.ATTACHING:
        return
    instance_id = volume.attached_instance_id
    if ok:
        volume.state = VState.IN_USE
    else:
        volume.state, volume.attached_instance, volume.device = VState.AVAILABLE, None, ""
    volume.claimed_at = None
    volume.last_error = bounded(message, 500)
    volume.save(update_fields=["state", "attached_instance", "device", "claimed_at", "last_error"])
    audit.record(
        actor=None,
        verb="volume.attached" if ok else "volume.attach_failed",
        obj=volume,
        project=volume.project_id,
        source="worker",
        at=now,
        after={"instance": instance_id, "message": message},
    )
    if not ok:
        lease = volume.leases.exclude(status__in=("ended", "failed")).order_by("-pk").first()
        if lease is not None:
            notify(
                [lease.requester],
                subject=Phrase(
                    gettext_noop("The volume %(name)s could not be attached"), name=volume.name
                ),
                body=message,
                link=lease.get_absolute_url(),
            )


def detach_before_terminate(instance: Instance, provider) -> None:
    """Called by the terminate task before TerminateInstances: detach the instance's
    volumes cleanly. A failure is only logged: the termination detaches them anyway, and
    a volume attached with AttachVolume is never deleted with the instance."""
    if not instance.external_id:
        return
    for volume in DataVolume.objects.filter(attached_instance=instance).exclude(volume_id=""):
        try:
            provider.detach_volume(
                volume.volume_id, instance_id=instance.external_id, region=volume.region
            )
        except ProviderError as error:
            logger.warning("detaching volume %s failed: %s", volume.pk, error.kind)


def delete_in_cloud(volume_id: int, *, now: datetime | None = None) -> None:
    """Delete a volume a person asked to delete; a duplicate finds it deleted."""
    now = now or timezone.now()
    if not _claim(volume_id, VState.DELETING, now):
        return
    volume = DataVolume.objects.select_related("account").get(pk=volume_id)
    try:
        if volume.volume_id:
            _provider(volume).delete_volume(volume.volume_id, region=volume.region)
    except ProviderError as error:
        _release(volume_id, error)
        if error.retryable:
            raise LaunchRetry(error.message) from error
        return
    with transaction.atomic():
        locked = DataVolume.objects.select_for_update().get(pk=volume_id)
        if locked.state != VState.DELETING:
            return
        locked.state, locked.deleted_at, locked.claimed_at = VState.DELETED, now, None
        locked.save(update_fields=["state", "deleted_at", "claimed_at"])
        storage.close_volume(locked, at=now)
        audit.record(
            actor=None,
            verb="volume.gone",
            obj=locked,
            project=locked.project_id,
            source="worker",
            at=now,
        )
