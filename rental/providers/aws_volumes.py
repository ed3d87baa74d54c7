"""The AWS driver's data volumes (EBS): CreateVolume, AttachVolume, DetachVolume,
DescribeVolumes and DeleteVolume, each idempotent, each failure a ``ProviderError``.

A mixin of ``AwsProvider``: it uses the provider's per-region clients and its error
translation (``_client`` and ``_errors``)."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from rental.providers.base import (
    TAG_IDEMPOTENCY_KEY,
    CloudVolume,
    ProviderError,
    ProviderErrorKind,
    VolumeSpec,
)

CLIENT_TOKEN_MAX_LENGTH = 64
VOLUME_TYPE = "gp3"


class AwsVolumes:
    """Volume calls of ``AwsProvider`` (see rental.providers.aws)."""

    _client: Any
    _errors: Any

    def create_volume(self, spec: VolumeSpec, *, idempotency_key: str) -> CloudVolume:
        """Create exactly one gp3 volume for ``idempotency_key``: a volume already carrying
        the key's tag is returned and nothing is created; otherwise CreateVolume is sent
        with the key as ``ClientToken`` (a retry after a lost answer creates nothing more
        on EC2). The volume carries ``spec.tags``, the key's tag and ``Name``."""
        if not idempotency_key:
            raise ProviderError(ProviderErrorKind.INVALID, "An idempotency key is required.")
        existing = self._volumes_with_key(spec.region, idempotency_key)
        if existing:
            return existing[0]
        tags = dict(spec.tags)
        tags[TAG_IDEMPOTENCY_KEY] = idempotency_key
        if spec.name:
            tags["Name"] = spec.name
        with self._errors():
            raw = self._client(spec.region).create_volume(
                AvailabilityZone=spec.zone,
                Size=spec.size_gb,
                VolumeType=VOLUME_TYPE,
                ClientToken=idempotency_key[:CLIENT_TOKEN_MAX_LENGTH],
                TagSpecifications=[
                    {
                        "ResourceType": "volume",
                        "Tags": [{"Key": key, "Value": value} for key, value in tags.items()],
                    }
                ],
            )
        return _to_cloud_volume(raw, spec.region)

    def attach_volume(
        self, volume_id: str, *, instance_id: str, device: str, region: str
    ) -> CloudVolume:
        """Attach ``volume_id`` to ``instance_id`` as ``device``. Idempotent: a volume
        already attached to that instance is returned as it is. Attached this way, EC2
        keeps the volume when the instance terminates (DeleteOnTermination is false)."""
        [current] = self._describe_or_not_found(volume_id, region)
        if current.attached_to == instance_id:
            return current
        with self._errors():
            self._client(region).attach_volume(
                VolumeId=volume_id, InstanceId=instance_id, Device=device
            )
        [after] = self._describe_or_not_found(volume_id, region)
        return after

    def detach_volume(self, volume_id: str, *, instance_id: str, region: str) -> None:
        """Detach ``volume_id`` from ``instance_id``. Idempotent: a volume not attached to
        it, or unknown to the cloud, is left alone. Never deletes the volume."""
        found = self.describe_volumes([volume_id], region=region)
        if not found or found[0].attached_to != instance_id:
            return
        try:
            with self._errors():
                self._client(region).detach_volume(VolumeId=volume_id, InstanceId=instance_id)
        except ProviderError as error:
            if error.kind != ProviderErrorKind.NOT_FOUND and not _already_detached(error):
                raise

    def describe_volumes(self, volume_ids: list[str], *, region: str) -> list[CloudVolume]:
        """The volumes among ``volume_ids`` the cloud knows (a ``volume-id`` filter, so an
        unknown id is simply missing from the answer). Read-only."""
        ids = list(dict.fromkeys(volume_ids))
        if not ids:
            return []
        return self._describe_volumes(region, {"volume-id": ids})

    def delete_volume(self, volume_id: str, *, region: str) -> None:
        """Delete a detached volume. Idempotent: an unknown volume is already deleted."""
        try:
            with self._errors():
                self._client(region).delete_volume(VolumeId=volume_id)
        except ProviderError as error:
            if error.kind != ProviderErrorKind.NOT_FOUND:
                raise

    # -- internals --------------------------------------------------------------------

    def _describe_or_not_found(self, volume_id: str, region: str) -> list[CloudVolume]:
        found = self.describe_volumes([volume_id], region=region)
        if not found:
            raise ProviderError(
                ProviderErrorKind.NOT_FOUND, f"The cloud does not know volume {volume_id}."
            )
        return found[:1]

    def _volumes_with_key(self, region: str, key: str) -> list[CloudVolume]:
        found = self._describe_volumes(region, {f"tag:{TAG_IDEMPOTENCY_KEY}": [key]})
        return [volume for volume in found if volume.state not in ("deleting", "deleted")]

    def _describe_volumes(self, region: str, filters: Mapping[str, list[str]]) -> list[CloudVolume]:
        result: list[CloudVolume] = []
        with self._errors():
            paginator = self._client(region).get_paginator("describe_volumes")
            pages = paginator.paginate(
                Filters=[{"Name": name, "Values": values} for name, values in filters.items()]
            )
            for page in pages:
                result.extend(_to_cloud_volume(raw, region) for raw in page.get("Volumes", []))
        return result


def _already_detached(error: ProviderError) -> bool:
    return error.message.startswith(("IncorrectState", "InvalidAttachment.NotFound"))


def _to_cloud_volume(raw: Mapping[str, Any], region: str) -> CloudVolume:
    attachments = [
        attachment
        for attachment in raw.get("Attachments") or []
        if attachment.get("State") in ("attaching", "attached", None)
    ]
    first = attachments[0] if attachments else {}
    return CloudVolume(
        volume_id=raw["VolumeId"],
        state=str(raw.get("State") or "creating"),
        region=region,
        zone=str(raw.get("AvailabilityZone") or ""),
        size_gb=int(raw.get("Size") or 0),
        attached_to=str(first.get("InstanceId") or ""),
        device=str(first.get("Device") or ""),
        tags=tuple(
            sorted((tag.get("Key", ""), tag.get("Value", "")) for tag in raw.get("Tags") or [])
        ),
    )
