"""The provider contract (tests/rental/providers/contract.py) run against the Alibaba
Cloud ECS driver on the local ECS endpoint (devcloud.alibaba)."""

from __future__ import annotations

import pytest

from devcloud.alibaba import LocalEcs
from rental.providers.account_options import frozen
from rental.providers.base import MARKET_ON_DEMAND, AccountConfig, Credentials, LaunchSpec
from rental.providers.registry import get_provider
from tests.fixtures_alibaba import ALIBABA_KEY, ALIBABA_SECRET, NETWORK_OPTIONS
from tests.rental.providers.contract import ContractTarget, ProviderContract, Tags

REGION = "cn-hangzhou"


def alibaba_driver(cloud: LocalEcs, secret: str):
    return get_provider(
        AccountConfig(
            driver="alibaba",
            credentials=Credentials(access_key_id=ALIBABA_KEY, secret_access_key=secret),
            endpoint_url=cloud.url,
            default_region=REGION,
            options=frozen(NETWORK_OPTIONS),
        )
    )


def make_spec(*, tags: Tags, market: str = MARKET_ON_DEMAND) -> LaunchSpec:
    return LaunchSpec(
        region=REGION,
        instance_type="ecs.gn7i-c8g1.2xlarge",
        image_id="ubuntu_22_04_x64_20G_alibase_20240101.vhd",
        market=market,
        tags=tags,
        name="contract",
    )


@pytest.fixture
def contract_target(ecs_cloud: LocalEcs) -> ContractTarget:
    return ContractTarget(
        driver="alibaba",
        provider=alibaba_driver(ecs_cloud, ALIBABA_SECRET),
        region=REGION,
        make_spec=make_spec,
        unknown_id="i-00000000000000000000",
        refusing=alibaba_driver(ecs_cloud, "not-the-secret"),
        cleanup=ecs_cloud.reset,
        timeout_s=10.0,
    )


class TestAlibabaContract(ProviderContract):
    pass
