"""The provider driver contract: plain data in, frozen dataclasses out.

Every driver implements ``Provider`` and raises ``ProviderError`` (never an SDK exception)
for every failure, so callers decide about retries from ``kind`` and ``retryable`` alone.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from datetime import datetime
from decimal import Decimal
from enum import StrEnum
from typing import Any, Protocol, runtime_checkable


class ProviderErrorKind(StrEnum):
    """Why a provider call failed, in terms a caller can act on."""

    CAPACITY = "capacity"
    QUOTA = "quota"
    THROTTLED = "throttled"
    AUTH = "auth"
    INVALID = "invalid"
    NOT_FOUND = "not_found"
    TRANSIENT = "transient"


_RETRYABLE_BY_DEFAULT = frozenset(
    {
        ProviderErrorKind.CAPACITY,
        ProviderErrorKind.QUOTA,
        ProviderErrorKind.THROTTLED,
        ProviderErrorKind.TRANSIENT,
    }
)


class ProviderError(Exception):
    """A failed provider call.

    ``kind`` is a ``ProviderErrorKind`` value; ``retryable`` defaults by kind (capacity,
    quota, throttled and transient are worth retrying; auth, invalid and not_found are
    not). ``str()`` is the message, which never contains credentials.
    """

    def __init__(self, kind: str, message: str, *, retryable: bool | None = None) -> None:
        super().__init__(message)
        self.kind: ProviderErrorKind = ProviderErrorKind(kind)
        self.message: str = message
        self.retryable: bool = (
            self.kind in _RETRYABLE_BY_DEFAULT if retryable is None else retryable
        )

    def __str__(self) -> str:
        return self.message

    def __repr__(self) -> str:
        return (
            f"ProviderError(kind={self.kind.value!r}, message={self.message!r}, "
            f"retryable={self.retryable!r})"
        )


class CloudState(StrEnum):
    """An instance's state as the cloud reports it (EC2's vocabulary)."""

    PENDING = "pending"
    RUNNING = "running"
    STOPPING = "stopping"
    STOPPED = "stopped"
    SHUTTING_DOWN = "shutting-down"
    TERMINATED = "terminated"


TAG_PREFIX = "gpu-portal:"
TAG_INSTALLATION = "gpu-portal:installation"
TAG_PROJECT = "gpu-portal:project"
TAG_RESERVATION = "gpu-portal:reservation"
TAG_REQUESTER = "gpu-portal:requester"
TAG_IDEMPOTENCY_KEY = "gpu-portal:idempotency-key"

MARKET_ON_DEMAND = "on_demand"
MARKET_SPOT = "spot"


@dataclass(frozen=True)
class Credentials:
    """An access key pair; ``repr()`` shows the key id only, never the secrets."""

    access_key_id: str
    secret_access_key: str = field(repr=False)
    session_token: str = field(default="", repr=False)

    def scrub(self, message: str) -> str:
        """``message`` (an SDK's error text) with every part of these credentials that an
        SDK might echo replaced by ``***``; parts shorter than 6 characters are left, since
        they would blank ordinary words."""
        for secret in (self.secret_access_key, self.session_token, self.access_key_id):
            if len(secret) >= 6:
                message = message.replace(secret, "***")
        return message


@dataclass(frozen=True)
class HostConfig:
    """One of the company's own GPU servers, as the ``ssh`` driver reaches it: an account
    on it (``username``) that may run commands as root through sudo, or root itself.
    ``host_key`` is the server's known_hosts line ("" until first contact pins it);
    ``repr()`` never shows the private key."""

    name: str
    address: str
    port: int
    username: str
    private_key: str = field(repr=False)
    host_key: str = ""


@dataclass(frozen=True)
class AccountConfig:
    """Everything a driver needs to reach one cloud account (or, for the ``ssh`` driver,
    one site of the company's own servers: ``hosts``)."""

    driver: str
    credentials: Credentials
    endpoint_url: str = ""
    default_region: str = "us-east-1"
    hosts: tuple[HostConfig, ...] = ()
    # The account's driver options (registry: each driver's ``account_options``), frozen:
    # (name, value) pairs sorted by name, a JSON object's value likewise pairs. No secrets.
    options: tuple[tuple[str, Any], ...] = ()

    def option(self, name: str, default: Any = None) -> Any:
        """The value of option ``name`` (an object's as (key, value) pairs), or ``default``."""
        return dict(self.options).get(name, default)


@dataclass(frozen=True)
class HostGpu:
    """One GPU of an own server as ``nvidia-smi`` reports it; ``busy_pids`` are the
    processes using it now."""

    index: int
    name: str
    memory_mib: int
    uuid: str
    busy_pids: tuple[int, ...] = ()


@dataclass(frozen=True)
class HostReport:
    """What one look at an own server found. ``reachable`` False means it did not answer
    (``message`` says why, never with a secret); ``leases`` maps each lease's idempotency
    key on the host to the GPU indexes it holds."""

    name: str
    reachable: bool
    message: str
    gpus: tuple[HostGpu, ...] = ()
    leases: tuple[tuple[str, tuple[int, ...]], ...] = ()
    host_key: str = ""


@dataclass(frozen=True)
class LaunchSpec:
    """One instance to launch. ``market`` is ``"on_demand"`` or ``"spot"``."""

    region: str
    instance_type: str
    image_id: str
    market: str
    tags: tuple[tuple[str, str], ...]
    zone: str = ""
    user_data: str = ""
    spot_max_price: Decimal | None = None
    name: str = ""
    # For drivers that set a machine up themselves instead of by user-data (``ssh``): the
    # engineer's public keys, and the agent's configuration as JSON ("" for no agent).
    ssh_public_keys: tuple[str, ...] = ()
    agent_config: str = field(default="", repr=False)


@dataclass(frozen=True)
class CloudInstance:
    """An instance as the cloud reports it. Datetimes are aware UTC."""

    external_id: str
    state: CloudState
    market: str
    region: str
    zone: str
    instance_type: str
    public_address: str
    private_address: str
    launched_at: datetime | None
    state_reason: str
    state_changed_at: datetime | None
    tags: tuple[tuple[str, str], ...]
    # The cloud account that owns it (EC2: the reservation's OwnerId); "" when unknown.
    owner_id: str = ""
    # The account the engineer logs in as, where the driver makes one per lease (``ssh``);
    # "" where the image decides it.
    login_user: str = ""

    def tag(self, key: str) -> str:
        """The value of tag ``key``, or ``""`` when the instance does not carry it."""
        for tag_key, value in self.tags:
            if tag_key == key:
                return value
        return ""

    @property
    def idempotency_key(self) -> str:
        """The portal idempotency key this instance was launched with, or ``""``."""
        return self.tag(TAG_IDEMPOTENCY_KEY)


class ImageState(StrEnum):
    """A machine image's state as the cloud reports it (EC2's vocabulary, simplified)."""

    PENDING = "pending"
    AVAILABLE = "available"
    FAILED = "failed"


@dataclass(frozen=True)
class CloudImage:
    """A machine image as the cloud reports it."""

    image_id: str
    name: str
    state: ImageState
    region: str
    state_reason: str = ""
    tags: tuple[tuple[str, str], ...] = ()


@dataclass(frozen=True)
class VolumeSpec:
    """One data volume to create in ``zone`` of ``region``."""

    region: str
    zone: str
    size_gb: int
    tags: tuple[tuple[str, str], ...]
    name: str = ""


@dataclass(frozen=True)
class CloudVolume:
    """A volume as the cloud reports it. ``state`` is EC2's: creating, available, in-use,
    deleting, deleted or error; ``attached_to`` the instance id it is attached to, or ""."""

    volume_id: str
    state: str
    region: str
    zone: str
    size_gb: int
    attached_to: str
    device: str
    tags: tuple[tuple[str, str], ...]


class Capability(StrEnum):
    """What a driver may offer beyond the core contract. A driver class declares the ones
    it has in ``capabilities`` and implements the matching protocol below; the portal
    offers a lease, a volume or a market only where the driver involved declares it."""

    STOP_START = "stop_start"
    VOLUMES = "volumes"
    IMAGES = "images"
    SPOT = "spot"


@runtime_checkable
class Provider(Protocol):
    """The one contract every driver keeps: priced offers are the catalog's rows, and the
    driver launches with an idempotency key, describes many instances by tag or by id, and
    terminates idempotently. Every method raises ``ProviderError`` on failure, never an
    SDK's exception. What else it can do is in its class's ``capabilities`` (each one a
    protocol below); the contract tests (tests/rental/providers/contract.py) hold every
    driver to all of it."""

    capabilities: frozenset[Capability]

    def validate(self) -> None:
        """Check the credentials with one cheap call; raise ``ProviderError`` if unusable."""
        ...

    def launch(
        self, spec: LaunchSpec, *, idempotency_key: str, client_token: str = ""
    ) -> CloudInstance:
        """Launch one instance; the same key never yields a second instance. The key is
        the instance's tag, the same for every attempt; ``client_token`` (default: the
        key) is the request's idempotency token, which the cloud ties to the request's
        parameters, so each attempt at another place has its own."""
        ...

    def describe(self, *, region: str, tag_filter: dict[str, str]) -> list[CloudInstance]:
        """Every instance in ``region`` carrying all of ``tag_filter``, any state."""
        ...

    def describe_ids(self, external_ids: list[str], *, region: str) -> list[CloudInstance]:
        """The instances among ``external_ids`` the cloud knows, any state; an id missing
        from the answer is unknown to the cloud (never an error)."""
        ...

    def terminate(self, external_ids: list[str], *, region: str) -> None:
        """Terminate the instances; unknown or already terminated ids are ignored."""
        ...


@runtime_checkable
class StopStart(Protocol):
    """``Capability.STOP_START``: an instance stops with its disk kept and starts again."""

    def stop(self, external_ids: list[str], *, region: str) -> None:
        """Stop on-demand instances, keeping their disks; stopping a stopped one is harmless."""
        ...

    def start(self, external_ids: list[str], *, region: str) -> None:
        """Start stopped instances on the same disks; starting a running one is harmless."""
        ...


@runtime_checkable
class Images(Protocol):
    """``Capability.IMAGES``: an instance's disk is saved as a machine image."""

    def create_image(
        self,
        external_id: str,
        *,
        region: str,
        name: str,
        idempotency_key: str,
        tags: tuple[tuple[str, str], ...] = (),
    ) -> CloudImage:
        """Save the instance's disk as an image named ``name``; the same key never yields
        a second image (an image already carrying it is returned)."""
        ...

    def describe_images(self, image_ids: list[str], *, region: str) -> list[CloudImage]:
        """The images among ``image_ids`` the cloud knows; a missing id is unknown to the
        cloud (never an error)."""
        ...


@runtime_checkable
class Volumes(Protocol):
    """``Capability.VOLUMES``: data volumes that outlive instances, attached and detached."""

    def create_volume(self, spec: VolumeSpec, *, idempotency_key: str) -> CloudVolume:
        """Create one volume; the same key never yields a second volume."""
        ...

    def attach_volume(
        self, volume_id: str, *, instance_id: str, device: str, region: str
    ) -> CloudVolume:
        """Attach a volume to an instance; attaching it again to the same one is harmless."""
        ...

    def detach_volume(self, volume_id: str, *, instance_id: str, region: str) -> None:
        """Detach a volume; a volume already detached or gone is harmless. Never deletes."""
        ...

    def describe_volumes(self, volume_ids: list[str], *, region: str) -> list[CloudVolume]:
        """The volumes among ``volume_ids`` the cloud knows; a missing id is not an error."""
        ...

    def delete_volume(self, volume_id: str, *, region: str) -> None:
        """Delete a detached volume (only on a person's explicit request); gone is harmless."""
        ...


# The protocol a driver implements for each capability it declares (``SPOT`` is a market a
# launch asks for in ``LaunchSpec.market``, so it has no methods of its own).
CAPABILITY_PROTOCOLS: dict[Capability, type | None] = {
    Capability.STOP_START: StopStart,
    Capability.IMAGES: Images,
    Capability.VOLUMES: Volumes,
    Capability.SPOT: None,
}
