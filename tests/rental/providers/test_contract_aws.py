"""The provider contract (tests/rental/providers/contract.py) run against the AWS driver
on the local EC2-compatible endpoint."""

from __future__ import annotations

import pytest

from devcloud.server import LocalCloud
from rental.providers.base import (
    MARKET_ON_DEMAND,
    AccountConfig,
    Credentials,
    LaunchSpec,
)
from rental.providers.registry import get_provider
from tests.rental.providers.contract import ContractTarget, ProviderContract, Tags

REGION = "us-east-1"
GOOD_KEY = "AKIDCONTRACT"


def aws_driver(cloud: LocalCloud, key: str):
    return get_provider(
        AccountConfig(
            driver="aws",
            credentials=Credentials(access_key_id=key, secret_access_key="contract-secret"),
            endpoint_url=cloud.url,
            default_region=REGION,
        )
    )


def make_spec(*, tags: Tags, market: str = MARKET_ON_DEMAND) -> LaunchSpec:
    return LaunchSpec(
        region=REGION,
        instance_type="g5.xlarge",
        image_id="ami-0a1b2c3d4e5f60001",
        market=market,
        tags=tags,
        name="contract",
    )


@pytest.fixture
def contract_target(cloud: LocalCloud) -> ContractTarget:
    cloud.require_access_keys({GOOD_KEY})
    return ContractTarget(
        driver="aws",
        provider=aws_driver(cloud, GOOD_KEY),
        region=REGION,
        make_spec=make_spec,
        unknown_id="i-0123456789abcdef0",
        refusing=aws_driver(cloud, "AKIDREFUSED"),
        cleanup=cloud.reset,
    )


class TestAwsContract(ProviderContract):
    pass
