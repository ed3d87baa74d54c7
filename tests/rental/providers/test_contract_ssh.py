"""The provider contract (tests/rental/providers/contract.py) run against the ssh driver on
a real OpenSSH server with four GPUs (tests/own_hosts.py)."""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from rental.providers.base import MARKET_ON_DEMAND, LaunchSpec
from rental.providers.registry import get_provider
from rental.providers.ssh import instance_type
from tests import own_hosts
from tests.own_hosts import RTX_4090
from tests.rental.providers.contract import ContractTarget, ProviderContract, Tags

UNAVAILABLE = own_hosts.unavailable()
REGION = "dc-1"


def make_spec(*, tags: Tags, market: str = MARKET_ON_DEMAND) -> LaunchSpec:
    return LaunchSpec(
        region=REGION,
        instance_type=instance_type("RTX 4090 24GB", 1),
        image_id="",
        market=market,
        tags=tags,
        name="contract",
    )


@pytest.fixture
def contract_target() -> Iterator[ContractTarget]:
    if UNAVAILABLE:
        pytest.skip(UNAVAILABLE)
    with own_hosts.site({"box-a": 4 * [RTX_4090]}) as site:
        box = site.hosts["box-a"]
        wrong_key = box.config(private_key=site.engineer_key.private)
        yield ContractTarget(
            driver="ssh",
            provider=get_provider(site.account_config(region=REGION)),
            region=REGION,
            make_spec=make_spec,
            unknown_id="box-a/gp-0000000000",
            refusing=get_provider(site.account_config(region=REGION, hosts=[wrong_key])),
        )


class TestSshContract(ProviderContract):
    pass
