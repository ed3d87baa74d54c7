"""The state of the local ECS endpoint and the actions it answers (devcloud.alibaba serves
them over HTTP).

Instances live in memory: ``Pending`` for ``boot_s`` after RunInstances, then
``Running``; StopInstances makes them ``Stopping`` then ``Stopped`` after ``stop_s``;
StartInstances ``Starting`` then ``Running``; DeleteInstances releases them (they vanish
from every answer, as released ECS instances do). A RunInstances ``ClientToken`` is
honoured as ECS does: the same token with the same parameters answers the first
request's instance ids again; with other parameters it is refused.

The network is checked as ECS checks a VPC-only account's launches (``vpc_only``, the
default): RunInstances needs a ``SecurityGroupId`` of the region and a ``VSwitchId`` of
the zone, both of one VPC. The security groups and vSwitches the cloud knows are set with
``set_network``; they outlive ``reset()``.
"""

from __future__ import annotations

import json
import threading
import time
import uuid
from dataclasses import dataclass, field
from datetime import UTC, datetime
from decimal import Decimal
from typing import Any


class EcsError(Exception):
    """An ECS error answer: ``code``, ``message`` and the HTTP status it comes with."""

    def __init__(self, code: str, message: str, status: int = 400) -> None:
        super().__init__(message)
        self.code, self.message, self.status = code, message, status


@dataclass(frozen=True)
class InstanceType:
    """One instance type the local cloud sells: its GPUs and its prices per hour (CNY)."""

    name: str
    gpus: int
    gpu_spec: str
    vcpus: int
    memory_gib: int
    price: Decimal
    spot_price: Decimal


INSTANCE_TYPES: dict[str, InstanceType] = {
    t.name: t
    for t in (
        InstanceType(
            "ecs.gn6i-c4g1.xlarge", 1, "NVIDIA T4", 4, 15, Decimal("11.08"), Decimal("2.216")
        ),
        InstanceType(
            "ecs.gn7i-c8g1.2xlarge", 1, "NVIDIA A10", 8, 30, Decimal("16.84"), Decimal("3.368")
        ),
        InstanceType(
            "ecs.gn7i-c32g1.32xlarge",
            4,
            "NVIDIA A10",
            128,
            752,
            Decimal("79.52"),
            Decimal("15.904"),
        ),
        InstanceType(
            "ecs.gn7e-c16g1.4xlarge",
            1,
            "NVIDIA A100 80G",
            16,
            125,
            Decimal("34.74"),
            Decimal("6.948"),
        ),
        InstanceType("ecs.g7.large", 0, "", 2, 8, Decimal("0.66"), Decimal("0.132")),
    )
}
REGIONS: dict[str, tuple[str, ...]] = {
    "cn-hangzhou": ("cn-hangzhou-h", "cn-hangzhou-i", "cn-hangzhou-j"),
    "cn-beijing": ("cn-beijing-g", "cn-beijing-h"),
}
MISMATCH_CODE = "IdempotenceParamNotMatch"
# Parameters that make a RunInstances request what it is, for the ClientToken comparison.
_VOLATILE = frozenset(
    {"Signature", "SignatureNonce", "Timestamp", "AccessKeyId", "SignatureMethod", "Format"}
)


@dataclass
class Instance:
    instance_id: str
    region: str
    zone: str
    instance_type: str
    image_id: str
    name: str
    spot_strategy: str
    tags: list[tuple[str, str]]
    created: float
    private_ip: str
    status: str = "Pending"
    until: float = 0.0  # when the current transition ends (monotonic seconds)
    stopped_mode: str = ""
    security_group_id: str = ""
    vswitch_id: str = ""


@dataclass(frozen=True)
class SecurityGroup:
    group_id: str
    region: str
    vpc_id: str


@dataclass(frozen=True)
class VSwitch:
    vswitch_id: str
    zone: str
    vpc_id: str


@dataclass
class EcsState:
    """Every instance and ClientToken of the local cloud, and its network; thread-safe."""

    boot_s: float = 0.5
    stop_s: float = 0.5
    instances: dict[str, Instance] = field(default_factory=dict)
    tokens: dict[tuple[str, str], tuple[dict[str, str], list[str]]] = field(default_factory=dict)
    lock: threading.Lock = field(default_factory=threading.Lock)
    vpc_only: bool = True
    security_groups: dict[str, SecurityGroup] = field(default_factory=dict)
    vswitches: dict[str, VSwitch] = field(default_factory=dict)

    def set_network(
        self,
        *,
        security_groups: list[SecurityGroup],
        vswitches: list[VSwitch],
        vpc_only: bool = True,
    ) -> None:
        """The security groups and vSwitches the cloud knows (instead of any before), and
        whether a launch must name them (``vpc_only``, as on every account made since ECS
        stopped offering the classic network)."""
        with self.lock:
            self.vpc_only = vpc_only
            self.security_groups = {group.group_id: group for group in security_groups}
            self.vswitches = {switch.vswitch_id: switch for switch in vswitches}

    def reset(self) -> None:
        with self.lock:
            self.instances.clear()
            self.tokens.clear()

    def answer(self, action: str, params: dict[str, str], key_id: str) -> dict[str, Any]:
        """The JSON answer of ``action`` (without RequestId); raises ``EcsError``."""
        handler = _ACTIONS.get(action)
        if handler is None:
            raise EcsError("InvalidAction.NotFound", f"Specified api {action} is not found.", 404)
        region = params.get("RegionId", "")
        if action not in ("DescribeRegions", "DescribeInstanceTypes") and region not in REGIONS:
            raise EcsError(
                "InvalidRegionId.NotFound", "The specified RegionId does not exist.", 404
            )
        with self.lock:
            self._advance(time.monotonic())
            return handler(self, params, key_id)

    def _advance(self, now: float) -> None:
        following = {"Pending": "Running", "Starting": "Running", "Stopping": "Stopped"}
        for instance in self.instances.values():
            if instance.status in following and now >= instance.until:
                instance.status = following[instance.status]

    # -- actions ------------------------------------------------------------------------

    def describe_regions(self, params: dict[str, str], key_id: str) -> dict[str, Any]:
        regions = [{"RegionId": r, "LocalName": r, "RegionEndpoint": "local"} for r in REGIONS]
        return {"Regions": {"Region": regions}}

    def run_instances(self, params: dict[str, str], key_id: str) -> dict[str, Any]:
        token = params.get("ClientToken", "")
        request = {k: v for k, v in params.items() if k not in _VOLATILE}
        if token:
            if len(token) > 64:
                raise EcsError("InvalidClientToken.Malformed", "The ClientToken is too long.")
            known = self.tokens.get((key_id, token))
            if known is not None:
                if known[0] != request:
                    raise EcsError(
                        MISMATCH_CODE,
                        "Request uses a client token in a previous request but is not "
                        "identical to that request.",
                    )
                return {"InstanceIdSets": {"InstanceIdSet": list(known[1])}}
        instance = self._new_instance(params)
        self.instances[instance.instance_id] = instance
        if token:
            self.tokens[(key_id, token)] = (request, [instance.instance_id])
        price = INSTANCE_TYPES[instance.instance_type].price
        return {
            "InstanceIdSets": {"InstanceIdSet": [instance.instance_id]},
            "OrderId": str(uuid.uuid4().int)[:15],
            "TradePrice": float(price),
        }

    def _new_instance(self, params: dict[str, str]) -> Instance:
        region = params["RegionId"]
        type_name = _required(params, "InstanceType")
        image_id = _required(params, "ImageId")
        zone = params.get("ZoneId", "") or self._vswitch_zone(params) or REGIONS[region][0]
        if zone not in REGIONS[region]:
            raise EcsError("InvalidZoneId.NotFound", "The specified zone does not exist.", 404)
        self._check_network(params, region, zone)
        if type_name not in INSTANCE_TYPES:
            raise EcsError(
                "InvalidInstanceType.NotSupported",
                "The specified instanceType is not supported in this zone.",
                403,
            )
        if params.get("Amount", "1") != "1":
            raise EcsError("InvalidParameter.Amount", "The local cloud launches one at a time.")
        spot = params.get("SpotStrategy", "NoSpot")
        if spot not in ("NoSpot", "SpotAsPriceGo", "SpotWithPriceLimit"):
            raise EcsError("InvalidSpotStrategy", "The specified SpotStrategy is not valid.")
        if spot == "SpotWithPriceLimit" and not params.get("SpotPriceLimit"):
            raise EcsError("InvalidParameter.SpotPriceLimit", "SpotPriceLimit is required.")
        tags = _tags(params)
        number = len(self.instances) + 1
        return Instance(
            instance_id="i-" + uuid.uuid4().hex[:20],
            region=region,
            zone=zone,
            instance_type=type_name,
            image_id=image_id,
            name=params.get("InstanceName", ""),
            spot_strategy=spot,
            tags=tags,
            created=time.time(),
            private_ip=f"172.16.{number // 250}.{number % 250 + 2}",
            until=time.monotonic() + self.boot_s,
            security_group_id=params.get("SecurityGroupId", ""),
            vswitch_id=params.get("VSwitchId", ""),
        )

    def _vswitch_zone(self, params: dict[str, str]) -> str:
        switch = self.vswitches.get(params.get("VSwitchId", ""))
        return switch.zone if switch else ""

    def _check_network(self, params: dict[str, str], region: str, zone: str) -> None:
        """ECS's checks of a launch's security group and vSwitch."""
        group_id, switch_id = params.get("SecurityGroupId", ""), params.get("VSwitchId", "")
        if self.vpc_only:
            group_id, switch_id = (
                _required(params, "SecurityGroupId"),
                _required(params, "VSwitchId"),
            )
        group = self.security_groups.get(group_id)
        if group_id and (group is None or group.region != region):
            raise EcsError(
                "InvalidSecurityGroupId.NotFound",
                "The specified SecurityGroupId does not exist.",
                404,
            )
        switch = self.vswitches.get(switch_id)
        if switch_id and (switch is None or switch.zone not in REGIONS[region]):
            raise EcsError(
                "InvalidVSwitchId.NotFound", "The specified VSwitchId does not exist.", 404
            )
        if switch is not None and switch.zone != zone:
            raise EcsError(
                "InvalidParameter.Mismatch",
                "Specified virtual switch is not in the specified zone.",
            )
        if group is not None and switch is not None and group.vpc_id != switch.vpc_id:
            raise EcsError(
                "InvalidSecurityGroup.VpcMismatch",
                "The specified security group and the specified virtual switch are not in the "
                "same VPC.",
            )

    def describe_instances(self, params: dict[str, str], key_id: str) -> dict[str, Any]:
        region = params["RegionId"]
        wanted_tags = _tags(params)
        ids = json.loads(params["InstanceIds"]) if params.get("InstanceIds") else None
        if ids is not None and (not isinstance(ids, list) or len(ids) > 100):
            raise EcsError("InvalidParameter.InstanceIds", "InstanceIds is a JSON list of <=100.")
        page = _int(params, "PageNumber", 1, 1, 10**6)
        size = _int(params, "PageSize", 10, 1, 100)
        matching = [
            instance
            for instance in self.instances.values()
            if instance.region == region
            and (ids is None or instance.instance_id in ids)
            and all(tag in instance.tags for tag in wanted_tags)
        ]
        window = matching[(page - 1) * size : page * size]
        return {
            "TotalCount": len(matching),
            "PageNumber": page,
            "PageSize": size,
            "Instances": {"Instance": [_describe(instance) for instance in window]},
        }

    def delete_instances(self, params: dict[str, str], key_id: str) -> dict[str, Any]:
        targets = self._targets(params)
        if params.get("Force", "").lower() != "true":
            for instance in targets:
                if instance.status != "Stopped":
                    raise EcsError(
                        "IncorrectInstanceStatus",
                        "The current status of the resource does not support this operation.",
                        403,
                    )
        for instance in targets:
            del self.instances[instance.instance_id]
        return {}

    def stop_instances(self, params: dict[str, str], key_id: str) -> dict[str, Any]:
        return self._move(params, ("Running",), "Stopping", self.stop_s)

    def start_instances(self, params: dict[str, str], key_id: str) -> dict[str, Any]:
        return self._move(params, ("Stopped",), "Starting", self.boot_s)

    def _move(
        self, params: dict[str, str], from_states: tuple[str, ...], to: str, seconds: float
    ) -> dict[str, Any]:
        targets = self._targets(params)
        for instance in targets:
            if instance.status not in from_states:
                raise EcsError(
                    "IncorrectInstanceStatus",
                    "The current status of the resource does not support this operation.",
                    403,
                )
        answers = []
        for instance in targets:
            answers.append(
                {
                    "InstanceId": instance.instance_id,
                    "Code": "200",
                    "Message": "success",
                    "PreviousStatus": instance.status,
                    "CurrentStatus": to,
                }
            )
            instance.status, instance.until = to, time.monotonic() + seconds
            if to == "Stopping":
                instance.stopped_mode = params.get("StoppedMode", "KeepCharging")
        return {"InstanceResponses": {"InstanceResponse": answers}}

    def _targets(self, params: dict[str, str]) -> list[Instance]:
        ids = [v for k, v in sorted(params.items()) if k.startswith("InstanceId.")]
        if not ids:
            raise EcsError("MissingParameter", "InstanceId is required.")
        unknown = [i for i in ids if i not in self.instances]
        if unknown:
            raise EcsError(
                "InvalidInstanceId.NotFound", f"The instance {unknown[0]} does not exist.", 404
            )
        return [self.instances[i] for i in ids]

    def describe_instance_types(self, params: dict[str, str], key_id: str) -> dict[str, Any]:
        rows = [
            {
                "InstanceTypeId": t.name,
                "GPUAmount": t.gpus,
                "GPUSpec": t.gpu_spec,
                "CpuCoreCount": t.vcpus,
                "MemorySize": float(t.memory_gib),
            }
            for t in INSTANCE_TYPES.values()
        ]
        return {"InstanceTypes": {"InstanceType": rows}}

    def describe_available_resource(self, params: dict[str, str], key_id: str) -> dict[str, Any]:
        zones = []
        for zone in REGIONS[params["RegionId"]]:
            if params.get("ZoneId") and params["ZoneId"] != zone:
                continue
            supported = [
                {"Value": name, "Status": "Available", "StatusCategory": "WithStock"}
                for name in INSTANCE_TYPES
                if params.get("InstanceType") in (None, "", name)
            ]
            zones.append(
                {
                    "ZoneId": zone,
                    "RegionId": params["RegionId"],
                    "Status": "Available",
                    "StatusCategory": "WithStock",
                    "AvailableResources": {
                        "AvailableResource": [
                            {
                                "Type": "InstanceType",
                                "SupportedResources": {"SupportedResource": supported},
                            }
                        ]
                    },
                }
            )
        return {"AvailableZones": {"AvailableZone": zones}}

    def describe_price(self, params: dict[str, str], key_id: str) -> dict[str, Any]:
        type_name = _required(params, "InstanceType")
        if type_name not in INSTANCE_TYPES:
            raise EcsError("InvalidInstanceType.ValueNotSupported", "Unknown instance type.")
        offer = INSTANCE_TYPES[type_name]
        spot = params.get("SpotStrategy", "NoSpot") != "NoSpot"
        price = float(offer.spot_price if spot else offer.price)
        return {
            "PriceInfo": {
                "Price": {
                    "OriginalPrice": price,
                    "DiscountPrice": 0.0,
                    "TradePrice": price,
                    "Currency": "CNY",
                }
            }
        }


_ACTIONS = {
    "DescribeRegions": EcsState.describe_regions,
    "RunInstances": EcsState.run_instances,
    "DescribeInstances": EcsState.describe_instances,
    "DeleteInstances": EcsState.delete_instances,
    "StopInstances": EcsState.stop_instances,
    "StartInstances": EcsState.start_instances,
    "DescribeInstanceTypes": EcsState.describe_instance_types,
    "DescribeAvailableResource": EcsState.describe_available_resource,
    "DescribePrice": EcsState.describe_price,
}


def _required(params: dict[str, str], name: str) -> str:
    value = params.get(name, "")
    if not value:
        raise EcsError(f"Missing{name}", f"{name} is mandatory for this action.")
    return value


def _int(params: dict[str, str], name: str, default: int, low: int, high: int) -> int:
    raw = params.get(name, "")
    try:
        value = int(raw) if raw else default
    except ValueError:
        raise EcsError(f"InvalidParameter.{name}", f"{name} is not a number.") from None
    if not low <= value <= high:
        raise EcsError(f"InvalidParameter.{name}", f"{name} is out of range [{low}, {high}].")
    return value


def _tags(params: dict[str, str]) -> list[tuple[str, str]]:
    tags = []
    for n in range(1, 21):
        key = params.get(f"Tag.{n}.Key")
        if key is None:
            continue
        if key.startswith(("aliyun", "acs:")) or len(key) > 128:
            raise EcsError("InvalidTagKey.Malformed", "The specified tag key is not valid.")
        tags.append((key, params.get(f"Tag.{n}.Value", "")))
    return tags


def _iso(at: float) -> str:
    return datetime.fromtimestamp(at, UTC).strftime("%Y-%m-%dT%H:%MZ")


def _describe(instance: Instance) -> dict[str, Any]:
    running = instance.status in ("Running", "Stopping")
    return {
        "InstanceId": instance.instance_id,
        "InstanceName": instance.name,
        "RegionId": instance.region,
        "ZoneId": instance.zone,
        "InstanceType": instance.instance_type,
        "ImageId": instance.image_id,
        "Status": instance.status,
        "InstanceChargeType": "PostPaid",
        "SpotStrategy": instance.spot_strategy,
        "StoppedMode": instance.stopped_mode if instance.status == "Stopped" else "",
        "CreationTime": _iso(instance.created),
        "StartTime": _iso(instance.created),
        "PublicIpAddress": {"IpAddress": ["127.0.0.1"] if running else []},
        "VpcAttributes": {
            "PrivateIpAddress": {"IpAddress": [instance.private_ip]},
            "VSwitchId": instance.vswitch_id,
        },
        "SecurityGroupIds": {
            "SecurityGroupId": [instance.security_group_id] if instance.security_group_id else []
        },
        "Tags": {"Tag": [{"TagKey": k, "TagValue": v} for k, v in instance.tags]},
        "OperationLocks": {"LockReason": []},
    }
