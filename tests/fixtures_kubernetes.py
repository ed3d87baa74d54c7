"""Pytest plugin: the local Kubernetes API server (devcloud/kubernetes.py) for the
kubernetes driver's tests and the pool's offerings: one per session, emptied for each
test."""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from devcloud import kubernetes as local_kubernetes
from devcloud.kubernetes import LocalKubernetes
from devcloud.kubernetes_cluster import NodeSpec

KUBE_TOKEN = "kube-contract-token"
KUBE_NODES = [
    NodeSpec("gpu-a", 2, "NVIDIA-A100-SXM4-80GB", 81920, address="10.0.0.1"),
    NodeSpec("gpu-b", 2, "NVIDIA-A100-SXM4-80GB", 81920, address="10.0.0.2"),
]


@pytest.fixture(scope="session")
def kube_server() -> Iterator[LocalKubernetes]:
    server = local_kubernetes.start(KUBE_NODES, tokens={KUBE_TOKEN}, start_delay_s=0.2)
    try:
        yield server
    finally:
        server.stop()


@pytest.fixture
def kube(kube_server: LocalKubernetes) -> Iterator[LocalKubernetes]:
    """The session's local cluster, empty: two ready nodes of two A100 80GB each."""
    kube_server.reset()
    yield kube_server
    kube_server.reset()
