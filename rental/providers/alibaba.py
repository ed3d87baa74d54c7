"""The Alibaba Cloud ECS driver, on Alibaba Cloud's official Python SDK for ECS
(``alibabacloud_ecs20140526``, API version 2014-05-26).

Each public call makes a bounded number of HTTP requests (the SDK's own retries are off:
the Celery tasks retry with backoff and try the next zone or offering, L2) and turns every
failure into a ``ProviderError``. ECS speaks of instances as Pending, Starting, Running,
Stopping and Stopped; a released instance vanishes from its answers, which the portal
reads as terminated.
"""

from __future__ import annotations

import base64
import json
import re
import threading
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from datetime import UTC, datetime
from typing import Any

from alibabacloud_ecs20140526 import models as ecs
from alibabacloud_ecs20140526.client import Client
from alibabacloud_tea_openapi.exceptions import AlibabaCloudException
from alibabacloud_tea_openapi.utils_models import Config
from darabonba.exceptions import UnretryableException
from darabonba.runtime import RuntimeOptions
from Tea.exceptions import TeaException

from rental.providers.alibaba_offers import PricedOffer, priced_gpu_offers
from rental.providers.base import (
    MARKET_ON_DEMAND,
    MARKET_SPOT,
    TAG_IDEMPOTENCY_KEY,
    AccountConfig,
    Capability,
    CloudInstance,
    CloudState,
    LaunchSpec,
    ProviderError,
    ProviderErrorKind,
)

CLIENT_TOKEN_MAX_LENGTH = 64
PAGE_SIZE = 100  # the most DescribeInstances answers in one page
IDS_CHUNK = 100  # the most ids one DescribeInstances (InstanceIds) or batch call takes
DEFAULT_CONNECT_TIMEOUT_S = 3.0
DEFAULT_READ_TIMEOUT_S = 30.0

_STATES = {
    "Pending": CloudState.PENDING,
    "Starting": CloudState.PENDING,
    "Running": CloudState.RUNNING,
    "Stopping": CloudState.STOPPING,
    "Stopped": CloudState.STOPPED,
}
_CAPACITY_CODES = frozenset(
    {
        "OperationDenied.NoStock",
        "Zone.NotOnSale",
        "InvalidInstanceType.NotSupported",
        "InvalidResourceType.NotSupported",
        "OperationDenied.ZoneNotAllowed",
        "ResourceNotAvailable",
    }
)
_AUTH_CODES = frozenset(
    {
        "InvalidAccessKeyId.NotFound",
        "InvalidAccessKeyId.Inactive",
        "SignatureDoesNotMatch",
        "IncompleteSignature",
        "MissingAccessKeyId",
        "Forbidden.RAM",
        "Forbidden",
        "Forbidden.AccessKeyDisabled",
        "InvalidSecurityToken.Expired",
        "InvalidSecurityToken.Malformed",
    }
)
# RunInstances' answers about the network an account's options name.
_OPTION_CODES = {
    "InvalidSecurityGroupId.NotFound": "security_group_id",
    "InvalidVSwitchId.NotFound": "vswitch_ids",
    "InvalidSecurityGroup.VpcMismatch": "security_group_id",
    "InvalidParameter.Mismatch": "vswitch_ids",
}
_TRANSIENT_CODES = frozenset(
    {"ServiceUnavailable", "InternalError", "UnknownError", "RequestTimeout"}
)


def classify_error_code(code: str, http_status: int = 400) -> ProviderErrorKind:
    """Map an ECS error code (and the HTTP status it came with) to a ``ProviderErrorKind``."""
    if code in _CAPACITY_CODES:
        return ProviderErrorKind.CAPACITY
    if code.startswith("QuotaExceeded") or code == "OperationDenied.QuotaExceed":
        return ProviderErrorKind.QUOTA
    if code.startswith("Throttling"):
        return ProviderErrorKind.THROTTLED
    if code in _AUTH_CODES:
        return ProviderErrorKind.AUTH
    if code.endswith(".NotFound"):
        return ProviderErrorKind.NOT_FOUND
    if code in _TRANSIENT_CODES or http_status >= 500:
        return ProviderErrorKind.TRANSIENT
    return ProviderErrorKind.INVALID


def parse_creation_time(value: str) -> datetime | None:
    """ECS's ``CreationTime`` ("2026-12-02T10:00Z", seconds optional) as aware UTC."""
    for pattern in ("%Y-%m-%dT%H:%M:%SZ", "%Y-%m-%dT%H:%MZ"):
        try:
            return datetime.strptime(value or "", pattern).replace(tzinfo=UTC)
        except ValueError:
            continue
    return None


class AlibabaProvider:
    """The ``Provider`` for Alibaba Cloud ECS (``endpoint_url``: another ECS endpoint,
    such as the local one of the tests; empty: ``ecs.<region>.aliyuncs.com`` over HTTPS).

    One SDK client per region, created on first use; a provider may be shared between
    threads."""

    # Kept equal to the registry's entry for "alibaba" (the contract tests check it).
    capabilities = frozenset({Capability.STOP_START, Capability.SPOT})

    def __init__(
        self,
        config: AccountConfig,
        *,
        connect_timeout: float = DEFAULT_CONNECT_TIMEOUT_S,
        read_timeout: float = DEFAULT_READ_TIMEOUT_S,
    ) -> None:
        self._config = config
        self._connect_ms = int(connect_timeout * 1000)
        self._read_ms = int(read_timeout * 1000)
        self._clients: dict[str, Client] = {}
        self._lock = threading.Lock()

    def __repr__(self) -> str:
        endpoint = self._config.endpoint_url or "aliyun"
        key = self._config.credentials.access_key_id
        return f"AlibabaProvider(endpoint={endpoint!r}, key={key!r})"

    # -- the core contract --------------------------------------------------------------

    def validate(self) -> None:
        """Check the credentials with one cheap authenticated call (DescribeRegions).
        Read-only. Raises ``ProviderError`` (kind ``auth`` for bad credentials)."""
        region = self._config.default_region
        self._call(region, "describe_regions", ecs.DescribeRegionsRequest())

    def launch(
        self, spec: LaunchSpec, *, idempotency_key: str, client_token: str = ""
    ) -> CloudInstance:
        """Launch exactly one instance for ``idempotency_key`` and return it.

        Idempotent: an instance already carrying the key's tag is returned and nothing is
        launched; otherwise RunInstances is sent with ``client_token`` (default: the key;
        first 64 characters) as ``ClientToken``, so a request retried after a lost answer
        names the same instance. ECS ties a token to its first request's parameters, so
        each attempt at another place needs a token of its own. Spot launches ask for
        ``SpotAsPriceGo``, or ``SpotWithPriceLimit`` at ``spot_max_price``. Raises
        ``ProviderError`` (``capacity`` for no stock in the zone)."""
        if not idempotency_key:
            raise ProviderError(ProviderErrorKind.INVALID, "An idempotency key is required.")
        if spec.market not in (MARKET_ON_DEMAND, MARKET_SPOT):
            raise ProviderError(ProviderErrorKind.INVALID, f"Unknown market {spec.market!r}.")
        existing = self._describe(spec.region, {TAG_IDEMPOTENCY_KEY: idempotency_key}, None)
        if existing:
            existing.sort(key=lambda found: (found.launched_at is None, found.launched_at))
            return existing[0]
        request = self._run_request(spec, idempotency_key, client_token)
        try:
            response = self._call(spec.region, "run_instances", request)
        except ProviderError as error:
            raise _named_option(error) from None
        sets = response.body.instance_id_sets
        ids = list(sets.instance_id_set or []) if sets else []
        if not ids:
            raise ProviderError(
                ProviderErrorKind.TRANSIENT, "RunInstances answered without an instance."
            )
        found = self.describe_ids(ids[:1], region=spec.region)
        if found:
            return found[0]
        # Not described yet (ECS is eventually consistent): what was asked for, pending.
        return CloudInstance(
            external_id=ids[0],
            state=CloudState.PENDING,
            market=spec.market,
            region=spec.region,
            zone=request.zone_id or "",
            instance_type=spec.instance_type,
            public_address="",
            private_address="",
            launched_at=None,
            state_reason="",
            state_changed_at=None,
            tags=tuple(sorted(_launch_tags(spec, idempotency_key).items())),
        )

    def describe(self, *, region: str, tag_filter: dict[str, str]) -> list[CloudInstance]:
        """Every instance in ``region`` carrying all of ``tag_filter`` (at most 20 tags),
        following every DescribeInstances page (100 a page). Read-only. Raises
        ``ProviderError``."""
        return self._describe(region, tag_filter, None)

    def describe_ids(self, external_ids: list[str], *, region: str) -> list[CloudInstance]:
        """The instances among ``external_ids`` ECS still knows; a released one is missing
        (the portal reads it as terminated). One request per 100 ids. Read-only."""
        ids = list(dict.fromkeys(external_ids))
        found: list[CloudInstance] = []
        for start in range(0, len(ids), IDS_CHUNK):
            found.extend(self._describe(region, {}, ids[start : start + IDS_CHUNK]))
        return found

    def terminate(self, external_ids: list[str], *, region: str) -> None:
        """Release these instances (DeleteInstances with Force, so running ones too), sent
        for every id even one a describe does not show yet. Idempotent: an empty list makes
        no call, and ids ECS does not know (``InvalidInstanceId.NotFound``: ECS refuses the
        whole request for one) are ignored, the rest sent one by one. Raises
        ``ProviderError``."""
        ids = list(dict.fromkeys(external_ids))
        for start in range(0, len(ids), IDS_CHUNK):
            chunk = ids[start : start + IDS_CHUNK]
            try:
                self._delete(region, chunk)
            except ProviderError as error:
                if error.kind != ProviderErrorKind.NOT_FOUND:
                    raise
                for external_id in chunk if len(chunk) > 1 else ():
                    try:
                        self._delete(region, [external_id])
                    except ProviderError as single_error:
                        if single_error.kind != ProviderErrorKind.NOT_FOUND:
                            raise

    # -- Capability.STOP_START ----------------------------------------------------------

    def stop(self, external_ids: list[str], *, region: str) -> None:
        """Stop these instances with ``StoppedMode=KeepCharging``, so their disks and their
        place in the zone are kept (L9). Idempotent: when ECS refuses because an instance
        is not running (``IncorrectInstanceStatus``), the call succeeds if every instance
        is stopping or stopped already. Raises ``ProviderError``."""
        for chunk in _chunks(external_ids):
            request = ecs.StopInstancesRequest(
                region_id=region, instance_id=chunk, stopped_mode="KeepCharging"
            )
            self._move(region, "stop_instances", request, chunk, _STOPPED_OR_STOPPING)

    def start(self, external_ids: list[str], *, region: str) -> None:
        """Start these stopped instances on their kept disks (L9). Idempotent as ``stop``:
        instances starting or running already are fine. Raises ``ProviderError``
        (``capacity`` when the zone has no room for them now)."""
        for chunk in _chunks(external_ids):
            request = ecs.StartInstancesRequest(region_id=region, instance_id=chunk)
            self._move(region, "start_instances", request, chunk, _STARTED)

    # -- offerings ----------------------------------------------------------------------

    def priced_offers(self, region: str) -> list[PricedOffer]:
        """Every GPU instance type sold in ``region``, per zone with stock, with its
        on-demand and spot prices per hour (rental.providers.alibaba_offers). Read-only."""
        return priced_gpu_offers(
            lambda action, request: self._call(region, action, request), region
        )

    # -- internals ----------------------------------------------------------------------

    def _move(
        self, region: str, action: str, request: Any, ids: list[str], done: frozenset
    ) -> None:
        try:
            self._call(region, action, request)
        except ProviderError as error:
            if not error.message.startswith("IncorrectInstanceStatus"):
                raise
            found = self.describe_ids(ids, region=region)
            if len(found) != len(ids) or any(i.state not in done for i in found):
                raise

    def _delete(self, region: str, ids: list[str]) -> None:
        request = ecs.DeleteInstancesRequest(region_id=region, instance_id=ids, force=True)
        self._call(region, "delete_instances", request)

    def _run_request(
        self, spec: LaunchSpec, idempotency_key: str, client_token: str
    ) -> ecs.RunInstancesRequest:
        tags = _launch_tags(spec, idempotency_key)
        if len(tags) > 20:
            raise ProviderError(ProviderErrorKind.INVALID, "ECS takes at most 20 tags.")
        request = ecs.RunInstancesRequest(
            region_id=spec.region,
            instance_type=spec.instance_type,
            image_id=spec.image_id,
            amount=1,
            instance_charge_type="PostPaid",
            client_token=(client_token or idempotency_key)[:CLIENT_TOKEN_MAX_LENGTH],
            tag=[ecs.RunInstancesRequestTag(key=k, value=v) for k, v in tags.items()],
        )
        request.security_group_id, request.zone_id, request.v_switch_id = self._network(spec)
        if spec.name:
            request.instance_name = spec.name[:128]
        if spec.user_data:
            request.user_data = base64.b64encode(spec.user_data.encode()).decode()
        if spec.market == MARKET_SPOT:
            if spec.spot_max_price is None:
                request.spot_strategy = "SpotAsPriceGo"
            else:
                request.spot_strategy = "SpotWithPriceLimit"
                # The SDK's field is a float; the price is written out exactly first.
                request.spot_price_limit = float(format(spec.spot_max_price, "f"))
        else:
            request.spot_strategy = "NoSpot"
        return request

    def _network(self, spec: LaunchSpec) -> tuple[str, str | None, str | None]:
        """The launch's security group, zone and vSwitch, from the account's options:
        the vSwitch of the launch's zone; with no zone, the first zone (by name) of the
        region that has one. A region without vSwitches sends none (ECS decides)."""
        group = str(self._config.option("security_group_id") or "")
        if not group:
            raise ProviderError(
                ProviderErrorKind.INVALID,
                "The account's option security_group_id is not set: Alibaba Cloud launches "
                "into a VPC and needs a security group.",
            )
        switches = {
            zone: switch
            for zone, switch in self._config.option("vswitch_ids", ())
            if _in_region(zone, spec.region)
        }
        if not switches:
            return group, spec.zone or None, None
        zone = spec.zone or min(switches)
        if zone not in switches:
            raise ProviderError(
                ProviderErrorKind.INVALID,
                f"The account's option vswitch_ids has no vSwitch for zone {zone} "
                f"(it has: {', '.join(sorted(switches))}).",
            )
        return group, zone, switches[zone]

    def _describe(
        self, region: str, tag_filter: dict[str, str], ids: list[str] | None
    ) -> list[CloudInstance]:
        if ids is not None and not ids:
            return []
        if len(tag_filter) > 20:
            raise ProviderError(ProviderErrorKind.INVALID, "ECS filters on at most 20 tags.")
        found: dict[str, CloudInstance] = {}
        page = 1
        while True:
            request = ecs.DescribeInstancesRequest(
                region_id=region,
                page_number=page,
                page_size=PAGE_SIZE,
                tag=[
                    ecs.DescribeInstancesRequestTag(key=k, value=v) for k, v in tag_filter.items()
                ],
            )
            if ids is not None:
                request.instance_ids = json.dumps(ids)
            body = self._call(region, "describe_instances", request).body
            rows = list(body.instances.instance or []) if body.instances else []
            for row in rows:
                instance = _to_cloud_instance(row, region)
                found.setdefault(instance.external_id, instance)
            if not rows or page * PAGE_SIZE >= int(body.total_count or 0):
                return list(found.values())
            page += 1

    def _client(self, region: str) -> Client:
        with self._lock:
            client = self._clients.get(region)
            if client is None:
                endpoint, protocol = self._endpoint(region)
                credentials = self._config.credentials
                client = Client(
                    Config(
                        access_key_id=credentials.access_key_id,
                        access_key_secret=credentials.secret_access_key,
                        security_token=credentials.session_token or None,
                        endpoint=endpoint,
                        protocol=protocol,
                        region_id=region,
                        connect_timeout=self._connect_ms,
                        read_timeout=self._read_ms,
                        user_agent="gpu-portal",
                    )
                )
                self._clients[region] = client
            return client

    def _endpoint(self, region: str) -> tuple[str, str]:
        url = self._config.endpoint_url
        if not url:
            return f"ecs.{region}.aliyuncs.com", "https"
        scheme, _, rest = url.partition("://")
        if not rest:
            return url.rstrip("/"), "https"
        return rest.rstrip("/"), scheme.lower()

    def _call(self, region: str, action: str, request: Any) -> Any:
        method: Callable[[Any, RuntimeOptions], Any] = getattr(
            self._client(region), f"{action}_with_options"
        )
        with self._errors():
            return method(request, RuntimeOptions(autoretry=False, max_attempts=1))

    def _scrub(self, message: str) -> str:
        return self._config.credentials.scrub(message)

    @contextmanager
    def _errors(self) -> Iterator[None]:
        """Turn every SDK failure inside the block into a ``ProviderError``."""
        try:
            yield
        except AlibabaCloudException as error:
            code = str(error.code or "Unknown")
            status = int(getattr(error, "status_code", None) or 400)
            data = error.data if isinstance(error.data, dict) else {}
            text = str(data.get("Message") or "")
            message = self._scrub(f"{code}: {text}" if text else code)
            raise ProviderError(classify_error_code(code, status), message) from error
        except UnretryableException as error:  # the connection failed or timed out
            raise ProviderError(ProviderErrorKind.TRANSIENT, self._scrub(str(error))) from error
        except TeaException as error:  # refused by the SDK before sending
            raise ProviderError(ProviderErrorKind.INVALID, self._scrub(str(error))) from error


_STOPPED_OR_STOPPING = frozenset({CloudState.STOPPING, CloudState.STOPPED})
_STARTED = frozenset({CloudState.PENDING, CloudState.RUNNING})


def _in_region(zone: str, region: str) -> bool:
    """Whether ECS zone ``zone`` lies in ``region`` (cn-hangzhou-h in cn-hangzhou,
    ap-southeast-1a in ap-southeast-1; not cn-hangzhou-finance-b)."""
    return zone.startswith(region) and re.fullmatch(r"-?[a-z]", zone[len(region) :]) is not None


def _named_option(error: ProviderError) -> ProviderError:
    """An unknown security group or vSwitch is the account's options' fault, not a
    missing instance: ``invalid``, naming the option to fix."""
    for code, option in _OPTION_CODES.items():
        if error.message.startswith(code):
            return ProviderError(
                ProviderErrorKind.INVALID,
                f"{error.message} (check the account's option {option})",
            )
    return error


def _chunks(external_ids: list[str]) -> list[list[str]]:
    ids = list(dict.fromkeys(external_ids))
    return [ids[start : start + IDS_CHUNK] for start in range(0, len(ids), IDS_CHUNK)]


def _launch_tags(spec: LaunchSpec, idempotency_key: str) -> dict[str, str]:
    tags = dict(spec.tags)
    tags[TAG_IDEMPOTENCY_KEY] = idempotency_key
    return tags


def _to_cloud_instance(row: Any, region: str) -> CloudInstance:
    status = str(row.status or "")
    state = _STATES.get(status)
    if state is None:
        raise ProviderError(
            ProviderErrorKind.TRANSIENT, f"The cloud reported an unknown state {status!r}."
        )
    public = list(row.public_ip_address.ip_address or []) if row.public_ip_address else []
    eip = row.eip_address.ip_address if row.eip_address else ""
    vpc = row.vpc_attributes
    private = (
        list(vpc.private_ip_address.ip_address or []) if vpc and vpc.private_ip_address else []
    )
    tags = (
        tuple(sorted((t.tag_key or "", t.tag_value or "") for t in (row.tags.tag or [])))
        if row.tags
        else ()
    )
    locks = (
        [lock.lock_reason for lock in row.operation_locks.lock_reason or []]
        if row.operation_locks
        else []
    )
    return CloudInstance(
        external_id=str(row.instance_id),
        state=state,
        market=MARKET_ON_DEMAND if (row.spot_strategy or "NoSpot") == "NoSpot" else MARKET_SPOT,
        region=str(row.region_id or region),
        zone=str(row.zone_id or ""),
        instance_type=str(row.instance_type or ""),
        public_address=eip or (public[0] if public else ""),
        private_address=private[0] if private else "",
        launched_at=parse_creation_time(str(row.creation_time or "")),
        state_reason=", ".join(str(lock) for lock in locks if lock),
        state_changed_at=None,
        tags=tags,
    )
