"""Pytest plugin: a local Alibaba Cloud ECS endpoint (devcloud.alibaba) for the Alibaba
driver's tests, started once per session and emptied for each test. Its network: one VPC
per region, a security group in each and a vSwitch in each zone (``NETWORK_OPTIONS`` are
an account's options that reach them), and a security group of another VPC."""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from devcloud import alibaba
from devcloud.alibaba import LocalEcs
from devcloud.alibaba_ecs import REGIONS, SecurityGroup, VSwitch

ALIBABA_KEY = "LTAI5tLocalKey"
ALIBABA_SECRET = "local-ecs-secret-0001"
SECURITY_GROUPS = {"cn-hangzhou": "sg-localhz01", "cn-beijing": "sg-localbj01"}
OTHER_VPC_GROUP = "sg-othervpc01"  # in cn-hangzhou, another VPC than its vSwitches
# Zone → vSwitch: "cn-hangzhou-h" → "vsw-localcnhangzhouh", …
VSWITCHES = {
    zone: "vsw-local" + zone.replace("-", "") for zones in REGIONS.values() for zone in zones
}
# The options of an account whose launches reach the local cloud's network (cn-hangzhou).
NETWORK_OPTIONS = {
    "security_group_id": SECURITY_GROUPS["cn-hangzhou"],
    "vswitch_ids": {zone: VSWITCHES[zone] for zone in REGIONS["cn-hangzhou"]},
}


def local_network(cloud: LocalEcs) -> None:
    """The local cloud's network: VPC-only, as a real account's."""
    groups = [
        SecurityGroup(group, region, f"vpc-{region}") for region, group in SECURITY_GROUPS.items()
    ]
    groups.append(SecurityGroup(OTHER_VPC_GROUP, "cn-hangzhou", "vpc-other"))
    switches = [
        VSwitch(VSWITCHES[zone], zone, f"vpc-{region}")
        for region, zones in REGIONS.items()
        for zone in zones
    ]
    cloud.set_network(security_groups=groups, vswitches=switches, vpc_only=True)


@pytest.fixture(scope="session")
def local_ecs() -> Iterator[LocalEcs]:
    """One local ECS endpoint for the session; prefer ``ecs_cloud``, which starts empty."""
    cloud = alibaba.start({ALIBABA_KEY: ALIBABA_SECRET}, boot_s=0.3, stop_s=0.3)
    try:
        yield cloud
    finally:
        cloud.stop()


@pytest.fixture
def ecs_cloud(local_ecs: LocalEcs) -> Iterator[LocalEcs]:
    """The session's local ECS endpoint: no instances, no faults, the one good key, the
    network of ``local_network``."""
    local_ecs.reset()
    local_ecs.set_secrets({ALIBABA_KEY: ALIBABA_SECRET})
    local_network(local_ecs)
    yield local_ecs
    local_ecs.reset()
