"""The provider contract (tests/rental/providers/contract.py) run against the kubernetes
driver on the local Kubernetes API server (devcloud/kubernetes.py), two nodes of two
A100 80GB each."""

from __future__ import annotations

import pytest

from devcloud.kubernetes import LocalKubernetes
from rental.providers.base import MARKET_ON_DEMAND, AccountConfig, Credentials, LaunchSpec
from rental.providers.kubernetes_naming import instance_type
from rental.providers.registry import get_provider
from tests.fixtures_kubernetes import KUBE_TOKEN
from tests.rental.providers.contract import ContractTarget, ProviderContract, Tags

REGION = "pool-1"


def kubernetes_driver(server: LocalKubernetes, token: str):
    return get_provider(
        AccountConfig(
            driver="kubernetes",
            credentials=Credentials(access_key_id="gpu-portal", secret_access_key=token),
            endpoint_url=server.url,
            default_region=REGION,
        )
    )


def make_spec(*, tags: Tags, market: str = MARKET_ON_DEMAND) -> LaunchSpec:
    return LaunchSpec(
        region=REGION,
        instance_type=instance_type("A100 80GB", 1),
        image_id="registry.example.com/gpu-portal/cuda-ssh:12.4",
        market=market,
        tags=tags,
        name="contract",
        ssh_public_keys=("ssh-ed25519 AAAAC3NzaC1lZDI1NTE5AAAAIContract engineer@example",),
    )


@pytest.fixture
def contract_target(kube: LocalKubernetes) -> ContractTarget:
    return ContractTarget(
        driver="kubernetes",
        provider=kubernetes_driver(kube, KUBE_TOKEN),
        region=REGION,
        make_spec=make_spec,
        unknown_id="gpu-portal-shared/gp-00000000000000000000",
        refusing=kubernetes_driver(kube, "wrong-token"),
    )


class TestKubernetesContract(ProviderContract):
    pass
