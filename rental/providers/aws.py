"""The AWS EC2 driver; works against any EC2-compatible endpoint (``endpoint_url``).

Each public call makes a bounded number of HTTP requests (botocore's own retries are off
by default: the Celery tasks retry with backoff and try the next zone or offering) and
turns every failure into a ``ProviderError``.
"""

from __future__ import annotations

import re
import threading
from collections.abc import Iterator, Mapping
from contextlib import contextmanager
from datetime import UTC, datetime
from typing import Any

import boto3
import botocore.session
from botocore.config import Config
from botocore.exceptions import (
    BotoCoreError,
    ClientError,
    ConnectionClosedError,
    ConnectTimeoutError,
    EndpointConnectionError,
    NoCredentialsError,
    NoRegionError,
    ParamValidationError,
    PartialCredentialsError,
    ReadTimeoutError,
)

from rental.providers.aws_parsing import ResponseParsers
from rental.providers.aws_volumes import AwsVolumes
from rental.providers.base import (
    MARKET_ON_DEMAND,
    MARKET_SPOT,
    TAG_IDEMPOTENCY_KEY,
    AccountConfig,
    Capability,
    CloudImage,
    CloudInstance,
    CloudState,
    ImageState,
    LaunchSpec,
    ProviderError,
    ProviderErrorKind,
)

CLIENT_TOKEN_MAX_LENGTH = 64
DEFAULT_PAGE_SIZE = 1000
DESCRIBE_IDS_CHUNK = 200  # EC2 accepts at most 200 values in one filter
DEFAULT_CONNECT_TIMEOUT_S = 3.0
DEFAULT_READ_TIMEOUT_S = 30.0

_LIVE_STATES = ("pending", "running", "shutting-down", "stopping", "stopped")

_CAPACITY_CODES = frozenset(
    {
        "InsufficientInstanceCapacity",
        "InsufficientCapacity",
        "InsufficientHostCapacity",
        "InsufficientReservedInstanceCapacity",
        "InsufficientCapacityOnOutpost",
        "SpotMaxPriceTooLow",
        # EC2 answers "Unsupported" when the instance type is not offered in the zone.
        "Unsupported",
    }
)
_QUOTA_CODES = frozenset(
    {
        "InstanceLimitExceeded",
        "VcpuLimitExceeded",
        "MaxSpotInstanceCountExceeded",
        "InsufficientFreeAddressesInSubnet",
        "ResourceLimitExceeded",
    }
)
_THROTTLED_CODES = frozenset(
    {
        "RequestLimitExceeded",
        "Throttling",
        "ThrottlingException",
        "TooManyRequestsException",
        "RequestThrottled",
        "SlowDown",
    }
)
_AUTH_CODES = frozenset(
    {
        "AuthFailure",
        "UnauthorizedOperation",
        "InvalidClientTokenId",
        "SignatureDoesNotMatch",
        "OptInRequired",
        "Blocked",
        "ExpiredToken",
        "RequestExpired",
        "UnrecognizedClientException",
        "AccessDenied",
        "AccessDeniedException",
    }
)
_INVALID_CODES = frozenset(
    {
        "InvalidInstanceType",
        "MissingParameter",
        "InvalidParameterCombination",
        "IdempotentParameterMismatch",
        "UnsupportedOperation",
        "ValidationError",
    }
)
_TRANSIENT_CODES = frozenset(
    {
        "InternalError",
        "InternalFailure",
        "ServiceUnavailable",
        "Unavailable",
        "RequestTimeout",
        "RequestTimeoutException",
    }
)

_TRANSITION_TIME = re.compile(r"\((\d{4}-\d{2}-\d{2} \d{2}:\d{2}:\d{2}) (?:GMT|UTC)\)")


_SESSION_LOCK = threading.Lock()
_session: boto3.session.Session | None = None


def _shared_session() -> boto3.session.Session:
    """One boto3 session for the process, so the EC2 service model is loaded once; clients
    get their credentials explicitly and never from the session. Call with _SESSION_LOCK
    held (sessions are not thread-safe, the clients they create are)."""
    global _session
    if _session is None:
        core = botocore.session.get_session()
        core.register_component("response_parser_factory", ResponseParsers())
        _session = boto3.session.Session(botocore_session=core)
    return _session


def classify_error_code(code: str, http_status: int = 400) -> ProviderErrorKind:
    """Map an EC2 error code (and the HTTP status it came with) to a ``ProviderErrorKind``."""
    if code in _CAPACITY_CODES:
        return ProviderErrorKind.CAPACITY
    if code in _QUOTA_CODES:
        return ProviderErrorKind.QUOTA
    if code in _THROTTLED_CODES:
        return ProviderErrorKind.THROTTLED
    if code in _AUTH_CODES:
        return ProviderErrorKind.AUTH
    if code in _INVALID_CODES or code.startswith(("InvalidParameter", "InvalidAMIID.")):
        return ProviderErrorKind.INVALID
    if code.endswith(".NotFound"):
        return ProviderErrorKind.NOT_FOUND
    if code in _TRANSIENT_CODES or http_status >= 500:
        return ProviderErrorKind.TRANSIENT
    if code.startswith("Invalid") or code.endswith(".Malformed"):
        return ProviderErrorKind.INVALID
    if http_status in (401, 403):
        return ProviderErrorKind.AUTH
    return ProviderErrorKind.INVALID


def parse_state_changed_at(transition_reason: str) -> datetime | None:
    """The time in an EC2 ``StateTransitionReason`` such as
    ``"User initiated (2026-12-02 10:00:00 GMT)"``, as aware UTC; ``None`` when absent."""
    match = _TRANSITION_TIME.search(transition_reason or "")
    if match is None:
        return None
    return datetime.strptime(match.group(1), "%Y-%m-%d %H:%M:%S").replace(tzinfo=UTC)


class AwsProvider(AwsVolumes):
    """The ``Provider`` for AWS EC2 and EC2-compatible endpoints.

    One boto3 client per region, created on first use and cached on this object; a
    provider may be shared between threads. ``page_size`` is the ``MaxResults`` of each
    DescribeInstances page (AWS accepts 5 to 1000); ``max_attempts`` counts botocore's
    attempts per request including the first (1 = no SDK-level retries).
    """

    # Kept equal to the registry's entry for "aws" (tests/rental/providers/test_registry.py).
    capabilities = frozenset(
        {Capability.STOP_START, Capability.VOLUMES, Capability.IMAGES, Capability.SPOT}
    )

    def __init__(
        self,
        config: AccountConfig,
        *,
        page_size: int = DEFAULT_PAGE_SIZE,
        max_attempts: int = 1,
        connect_timeout: float = DEFAULT_CONNECT_TIMEOUT_S,
        read_timeout: float = DEFAULT_READ_TIMEOUT_S,
    ) -> None:
        self._config = config
        self._page_size = page_size
        self._botocore_config = Config(
            connect_timeout=connect_timeout,
            read_timeout=read_timeout,
            retries={"total_max_attempts": max_attempts, "mode": "standard"},
            user_agent_extra="gpu-portal",
        )
        self._clients: dict[str, Any] = {}
        self._lock = threading.Lock()

    def __repr__(self) -> str:
        endpoint = self._config.endpoint_url or "aws"
        return f"AwsProvider(endpoint={endpoint!r}, key={self._config.credentials.access_key_id!r})"

    # -- public API -------------------------------------------------------------------

    def validate(self) -> None:
        """Check that the credentials work with one cheap authenticated call
        (DescribeAvailabilityZones in the default region). Read-only, idempotent.
        Raises ``ProviderError`` (kind ``auth`` for bad credentials)."""
        with self._errors():
            self._client(self._config.default_region).describe_availability_zones()

    def launch(
        self, spec: LaunchSpec, *, idempotency_key: str, client_token: str = ""
    ) -> CloudInstance:
        """Launch exactly one instance for ``idempotency_key`` and return it.

        Idempotent: if a non-terminated instance already carries the key's tag it is
        returned and nothing is launched; otherwise RunInstances is sent with the key
        ``client_token`` (default: the key; first 64 characters) as ``ClientToken``, so a
        retried request after a lost answer does not launch twice either. EC2 ties a token
        to its first request's parameters (a reuse with others is
        IdempotentParameterMismatch), so the caller gives each attempt at another place a
        token of its own. The instance and its volumes carry ``spec.tags``, the
        idempotency-key tag and ``Name``. Spot launches are one-time requests that
        terminate on interruption. Raises ``ProviderError``.
        """
        if not idempotency_key:
            raise ProviderError(ProviderErrorKind.INVALID, "An idempotency key is required.")
        if spec.market not in (MARKET_ON_DEMAND, MARKET_SPOT):
            raise ProviderError(ProviderErrorKind.INVALID, f"Unknown market {spec.market!r}.")
        existing = self._find_by_idempotency_key(spec.region, idempotency_key)
        if existing is not None:
            return existing
        with self._errors():
            response = self._client(spec.region).run_instances(
                **self._run_instances_params(spec, idempotency_key, client_token)
            )
        instances = response.get("Instances") or []
        if not instances:
            raise ProviderError(
                ProviderErrorKind.TRANSIENT, "RunInstances answered without an instance."
            )
        return self._to_cloud_instance(
            instances[0], spec.region, owner_id=str(response.get("OwnerId") or "")
        )

    def describe(self, *, region: str, tag_filter: dict[str, str]) -> list[CloudInstance]:
        """Every instance in ``region`` that carries all tags in ``tag_filter``, in every
        state including terminated, following all DescribeInstances pages (one request per
        page, never one per instance). Read-only, idempotent. Raises ``ProviderError``."""
        return self._describe(region, {f"tag:{key}": [value] for key, value in tag_filter.items()})

    def describe_ids(self, external_ids: list[str], *, region: str) -> list[CloudInstance]:
        """The instances among ``external_ids`` the cloud still knows, in any state; an id
        missing from the answer is unknown to the cloud. One request per 200 ids (an
        ``instance-id`` filter, so unknown ids are not an error). Read-only, idempotent.
        Raises ``ProviderError``."""
        ids = list(dict.fromkeys(external_ids))
        found: list[CloudInstance] = []
        for start in range(0, len(ids), DESCRIBE_IDS_CHUNK):
            found.extend(
                self._describe(region, {"instance-id": ids[start : start + DESCRIBE_IDS_CHUNK]})
            )
        return found

    def terminate(self, external_ids: list[str], *, region: str) -> None:
        """Ask the cloud to terminate these instances. Idempotent: an empty list makes no
        call, and ids the cloud does not know (or no longer knows) are ignored, as are
        instances already terminated. Returns once the cloud accepted the request; the
        instances reach ``terminated`` later. Raises ``ProviderError`` for anything else."""
        ids = list(dict.fromkeys(external_ids))
        if not ids:
            return
        try:
            self._terminate(region, ids)
        except ProviderError as error:
            if error.kind != ProviderErrorKind.NOT_FOUND:
                raise
            if len(ids) == 1:
                return
            # EC2 refuses the whole request when one id is unknown: retry one by one.
            for external_id in ids:
                try:
                    self._terminate(region, [external_id])
                except ProviderError as single_error:
                    if single_error.kind != ProviderErrorKind.NOT_FOUND:
                        raise

    def stop(self, external_ids: list[str], *, region: str) -> None:
        """Stop these on-demand instances; their EBS disks are kept (L9). Idempotent: EC2
        accepts stopping a stopped instance; an empty list makes no call. Returns once the
        cloud accepted; the instances reach ``stopped`` later. Raises ``ProviderError``."""
        ids = list(dict.fromkeys(external_ids))
        if ids:
            with self._errors():
                self._client(region).stop_instances(InstanceIds=ids)

    def start(self, external_ids: list[str], *, region: str) -> None:
        """Start these stopped instances on their kept disks (L9). Idempotent: starting a
        running instance is accepted. Raises ``ProviderError`` (``capacity`` when the zone
        has no room now)."""
        ids = list(dict.fromkeys(external_ids))
        if ids:
            with self._errors():
                self._client(region).start_instances(InstanceIds=ids)

    def create_image(
        self,
        external_id: str,
        *,
        region: str,
        name: str,
        idempotency_key: str,
        tags: tuple[tuple[str, str], ...] = (),
    ) -> CloudImage:
        """Save the instance's disk as an image (EC2 CreateImage, without a reboot).

        Idempotent: CreateImage takes no client token, so the image is tagged with the
        key and an image already carrying it is returned without a second CreateImage;
        EC2's own refusal of a duplicate name (a request whose answer was lost) is
        answered by the image of that name. Raises ``ProviderError``."""
        if not idempotency_key:
            raise ProviderError(ProviderErrorKind.INVALID, "An idempotency key is required.")
        existing = self._images(region, {f"tag:{TAG_IDEMPOTENCY_KEY}": [idempotency_key]})
        if existing:
            return existing[0]
        all_tags = {**dict(tags), TAG_IDEMPOTENCY_KEY: idempotency_key}
        try:
            with self._errors():
                response = self._client(region).create_image(
                    InstanceId=external_id,
                    Name=name[:128],
                    NoReboot=True,
                    TagSpecifications=[
                        {
                            "ResourceType": "image",
                            "Tags": [{"Key": k, "Value": v} for k, v in all_tags.items()],
                        }
                    ],
                )
        except ProviderError as error:
            if "InvalidAMIName.Duplicate" not in error.message:
                raise
            same_name = self._images(region, {"name": [name[:128]]})
            if not same_name:
                raise
            return same_name[0]
        found = self.describe_images([response["ImageId"]], region=region)
        if found:
            return found[0]
        return CloudImage(
            image_id=response["ImageId"], name=name, state=ImageState.PENDING, region=region
        )

    def describe_images(self, image_ids: list[str], *, region: str) -> list[CloudImage]:
        """The images among ``image_ids`` this account owns, in any state (an
        ``image-id`` filter, so unknown ids are not an error). Read-only. Raises
        ``ProviderError``."""
        ids = list(dict.fromkeys(image_ids))
        if not ids:
            return []
        return self._images(region, {"image-id": ids})

    # -- internals --------------------------------------------------------------------

    def _images(self, region: str, filters: Mapping[str, list[str]]) -> list[CloudImage]:
        with self._errors():
            response = self._client(region).describe_images(
                Owners=["self"],
                Filters=[{"Name": name, "Values": values} for name, values in filters.items()],
            )
        return [self._to_cloud_image(raw, region) for raw in response.get("Images", [])]

    @staticmethod
    def _to_cloud_image(raw: Mapping[str, Any], region: str) -> CloudImage:
        state = str(raw.get("State", "") or "")
        if state == "available":
            image_state = ImageState.AVAILABLE
        elif state in ("failed", "invalid", "error", "deregistered", "disabled"):
            image_state = ImageState.FAILED
        else:
            image_state = ImageState.PENDING
        reason = raw.get("StateReason") or {}
        return CloudImage(
            image_id=str(raw.get("ImageId", "")),
            name=str(raw.get("Name", "") or ""),
            state=image_state,
            region=region,
            state_reason=str(reason.get("Message") or reason.get("Code") or ""),
            tags=tuple(sorted((t["Key"], t["Value"]) for t in raw.get("Tags") or [])),
        )

    def _client(self, region: str) -> Any:
        with self._lock:
            client = self._clients.get(region)
            if client is None:
                credentials = self._config.credentials
                with _SESSION_LOCK:
                    client = _shared_session().client(
                        "ec2",
                        region_name=region,
                        endpoint_url=self._config.endpoint_url or None,
                        aws_access_key_id=credentials.access_key_id,
                        aws_secret_access_key=credentials.secret_access_key,
                        aws_session_token=credentials.session_token or None,
                        config=self._botocore_config,
                    )
                self._clients[region] = client
            return client

    def _terminate(self, region: str, ids: list[str]) -> None:
        with self._errors():
            self._client(region).terminate_instances(InstanceIds=ids)

    def _find_by_idempotency_key(self, region: str, key: str) -> CloudInstance | None:
        found = self._describe(
            region,
            {
                f"tag:{TAG_IDEMPOTENCY_KEY}": [key],
                "instance-state-name": list(_LIVE_STATES),
            },
        )
        # The state filter is repeated here for EC2-compatible endpoints that ignore it.
        live = [instance for instance in found if instance.state != CloudState.TERMINATED]
        live.sort(key=lambda instance: (instance.launched_at is None, instance.launched_at))
        return live[0] if live else None

    def _describe(self, region: str, filters: Mapping[str, list[str]]) -> list[CloudInstance]:
        params: dict[str, Any] = {
            "PaginationConfig": {"PageSize": self._page_size},
        }
        if filters:
            params["Filters"] = [
                {"Name": name, "Values": values} for name, values in filters.items()
            ]
        result: list[CloudInstance] = []
        seen: set[str] = set()
        with self._errors():
            paginator = self._client(region).get_paginator("describe_instances")
            for page in paginator.paginate(**params):
                for reservation in page.get("Reservations", []):
                    for raw in reservation.get("Instances", []):
                        instance = self._to_cloud_instance(
                            raw, region, owner_id=str(reservation.get("OwnerId") or "")
                        )
                        if instance.external_id not in seen:
                            seen.add(instance.external_id)
                            result.append(instance)
        return result

    def _run_instances_params(
        self, spec: LaunchSpec, idempotency_key: str, client_token: str = ""
    ) -> dict[str, Any]:
        tags = dict(spec.tags)
        tags[TAG_IDEMPOTENCY_KEY] = idempotency_key
        if spec.name:
            tags["Name"] = spec.name
        tag_list = [{"Key": key, "Value": value} for key, value in tags.items()]
        params: dict[str, Any] = {
            "ImageId": spec.image_id,
            "InstanceType": spec.instance_type,
            "MinCount": 1,
            "MaxCount": 1,
            "ClientToken": (client_token or idempotency_key)[:CLIENT_TOKEN_MAX_LENGTH],
            "TagSpecifications": [
                {"ResourceType": "instance", "Tags": tag_list},
                {"ResourceType": "volume", "Tags": tag_list},
            ],
        }
        if spec.zone:
            params["Placement"] = {"AvailabilityZone": spec.zone}
        if spec.user_data:
            params["UserData"] = spec.user_data  # botocore base64-encodes it
        if spec.market == MARKET_SPOT:
            spot_options: dict[str, Any] = {
                "SpotInstanceType": "one-time",
                "InstanceInterruptionBehavior": "terminate",
            }
            if spec.spot_max_price is not None:
                spot_options["MaxPrice"] = format(spec.spot_max_price, "f")
            params["InstanceMarketOptions"] = {
                "MarketType": "spot",
                "SpotOptions": spot_options,
            }
        return params

    @staticmethod
    def _to_cloud_instance(
        raw: Mapping[str, Any], region: str, *, owner_id: str = ""
    ) -> CloudInstance:
        state_name = (raw.get("State") or {}).get("Name", "pending")
        reason = raw.get("StateReason") or {}
        launched_at = raw.get("LaunchTime")
        if isinstance(launched_at, datetime):
            launched_at = (
                launched_at.replace(tzinfo=UTC)
                if launched_at.tzinfo is None
                else launched_at.astimezone(UTC)
            )
        else:
            launched_at = None
        tags = tuple(
            sorted((tag.get("Key", ""), tag.get("Value", "")) for tag in raw.get("Tags") or [])
        )
        try:
            state = CloudState(state_name)
        except ValueError:
            raise ProviderError(
                ProviderErrorKind.TRANSIENT, f"The cloud reported an unknown state {state_name!r}."
            ) from None
        return CloudInstance(
            external_id=raw["InstanceId"],
            state=state,
            market=MARKET_SPOT if raw.get("InstanceLifecycle") == "spot" else MARKET_ON_DEMAND,
            region=region,
            zone=(raw.get("Placement") or {}).get("AvailabilityZone", "") or "",
            instance_type=raw.get("InstanceType", "") or "",
            public_address=raw.get("PublicIpAddress", "") or "",
            private_address=raw.get("PrivateIpAddress", "") or "",
            launched_at=launched_at,
            state_reason=reason.get("Message") or reason.get("Code") or "",
            state_changed_at=parse_state_changed_at(raw.get("StateTransitionReason", "")),
            tags=tags,
            owner_id=owner_id,
        )

    def _scrub(self, message: str) -> str:
        return self._config.credentials.scrub(message)

    @contextmanager
    def _errors(self) -> Iterator[None]:
        """Turn every botocore failure inside the block into a ``ProviderError``."""
        try:
            yield
        except ClientError as error:
            details = error.response.get("Error", {})
            code = str(details.get("Code", "") or "Unknown")
            status = int(error.response.get("ResponseMetadata", {}).get("HTTPStatusCode") or 400)
            text = str(details.get("Message", "") or "")
            message = self._scrub(f"{code}: {text}" if text else code)
            raise ProviderError(classify_error_code(code, status), message) from error
        except (
            EndpointConnectionError,
            ConnectTimeoutError,
            ReadTimeoutError,
            ConnectionClosedError,
        ) as error:
            raise ProviderError(ProviderErrorKind.TRANSIENT, self._scrub(str(error))) from error
        except (NoCredentialsError, PartialCredentialsError) as error:
            raise ProviderError(ProviderErrorKind.AUTH, self._scrub(str(error))) from error
        except (ParamValidationError, NoRegionError) as error:
            raise ProviderError(ProviderErrorKind.INVALID, self._scrub(str(error))) from error
        except BotoCoreError as error:
            raise ProviderError(ProviderErrorKind.TRANSIENT, self._scrub(str(error))) from error
