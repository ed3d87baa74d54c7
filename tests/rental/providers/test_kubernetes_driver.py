"""The kubernetes driver against the local Kubernetes API server (devcloud/kubernetes.py):
what it makes in the cluster, how it reads nodes' GPUs, and each of its faults."""

from __future__ import annotations

import json
import socket
import time

import pytest

from devcloud.kubernetes import LocalKubernetes
from rental.providers.base import (
    MARKET_ON_DEMAND,
    TAG_IDEMPOTENCY_KEY,
    TAG_INSTALLATION,
    TAG_PROJECT,
    AccountConfig,
    CloudState,
    Credentials,
    LaunchSpec,
    ProviderError,
    ProviderErrorKind,
)
from rental.providers.kubernetes import KubernetesProvider
from rental.providers.kubernetes_naming import instance_type, object_name, offerings_wanted
from tests.fixtures_kubernetes import KUBE_TOKEN

REGION = "pool-1"
KEY = "ssh-ed25519 AAAAC3NzaC1lZDI1NTE5AAAAIDriver engineer@example"


def driver(url: str, token: str = KUBE_TOKEN, **options) -> KubernetesProvider:
    config = AccountConfig(
        driver="kubernetes",
        credentials=Credentials(access_key_id="gpu-portal", secret_access_key=token),
        endpoint_url=url,
        default_region=REGION,
    )
    return KubernetesProvider(config, **options)


def spec(count: int = 1, *, project: str = "vision-team", zone: str = "", **extra) -> LaunchSpec:
    values = {
        "region": REGION,
        "instance_type": instance_type("A100 80GB", count),
        "image_id": "registry.example.com/cuda-ssh:12.4",
        "market": MARKET_ON_DEMAND,
        "tags": ((TAG_PROJECT, project), (TAG_INSTALLATION, "test-install")),
        "zone": zone,
        "ssh_public_keys": (KEY,),
        "agent_config": '{"url": "https://portal.example/agent", "token": "agent-secret"}',
    }
    return LaunchSpec(**(values | extra))


def stored(kube: LocalKubernetes, kind: str, namespace: str, name: str) -> dict:
    return kube.cluster.objects[kind][(namespace, name)]


def test_it_runs_a_pod_with_gpu_limits_in_the_projects_namespace(kube: LocalKubernetes) -> None:
    instance = driver(kube.url).launch(spec(2), idempotency_key="lease-1")

    name = object_name("lease-1")
    assert instance.external_id == f"gpu-portal-vision-team/{name}"
    assert "gpu-portal-vision-team" in kube.cluster.namespaces
    pod = stored(kube, "pods", "gpu-portal-vision-team", name)
    [container] = pod["spec"]["containers"]
    assert container["image"] == "registry.example.com/cuda-ssh:12.4"
    assert container["resources"]["limits"] == {"nvidia.com/gpu": "2"}
    assert pod["metadata"]["labels"]["gpu-portal.io/project"] == "vision-team"
    assert json.loads(pod["metadata"]["annotations"]["gpu-portal.io/tags"]) == [
        [TAG_IDEMPOTENCY_KEY, "lease-1"],
        [TAG_INSTALLATION, "test-install"],
        [TAG_PROJECT, "vision-team"],
    ]
    assert instance.zone in {"gpu-a", "gpu-b"}
    assert instance.instance_type == "k8s-2x-a100-80gb"
    assert instance.tag(TAG_PROJECT) == "vision-team"


def test_it_makes_an_ssh_service_and_a_secret_with_the_keys_and_agent(
    kube: LocalKubernetes,
) -> None:
    instance = driver(kube.url).launch(spec(), idempotency_key="lease-1")

    name = object_name("lease-1")
    service = stored(kube, "services", "gpu-portal-vision-team", name)
    assert service["spec"]["type"] == "LoadBalancer"
    assert service["spec"]["selector"] == {"gpu-portal.io/pod": name}
    assert [(p["port"], p["targetPort"]) for p in service["spec"]["ports"]] == [(22, 22)]
    assert instance.public_address == service["status"]["loadBalancer"]["ingress"][0]["ip"]
    secret = stored(kube, "secrets", "gpu-portal-vision-team", name)
    assert secret["stringData"]["authorized_keys"] == KEY + "\n"
    assert json.loads(secret["stringData"]["agent.json"])["token"] == "agent-secret"
    pod = stored(kube, "pods", "gpu-portal-vision-team", name)
    assert pod["spec"]["volumes"][0]["secret"]["secretName"] == name
    assert "agent-secret" not in json.dumps(pod)  # the agent's token only in the secret


def test_it_keeps_one_namespace_per_project(kube: LocalKubernetes) -> None:
    provider = driver(kube.url)
    provider.launch(spec(project="vision-team"), idempotency_key="a")
    provider.launch(spec(project="vision-team"), idempotency_key="b")
    provider.launch(spec(project="Speech_Lab"), idempotency_key="c")

    namespaces = sorted(kube.cluster.namespaces)
    assert namespaces[0] == "gpu-portal-speech-lab-" + namespaces[0].rsplit("-", 1)[1]
    assert namespaces[1] == "gpu-portal-vision-team"
    assert len(namespaces) == 2


def test_it_turns_running_and_ends_when_its_container_ends(kube: LocalKubernetes) -> None:
    provider = driver(kube.url)
    launched = provider.launch(spec(), idempotency_key="lease-1")
    assert launched.state == CloudState.PENDING
    time.sleep(0.3)

    [running] = provider.describe_ids([launched.external_id], region=REGION)
    assert running.state == CloudState.RUNNING
    assert running.private_address.startswith("10.244.")
    namespace, name = launched.external_id.split("/")
    kube.cluster.set_phase(namespace, name, "Failed", "Evicted")

    [ended] = provider.describe_ids([launched.external_id], region=REGION)
    assert ended.state == CloudState.TERMINATED
    assert ended.state_reason.startswith("Evicted")


def test_it_returns_the_existing_pod_when_its_create_meets_already_exists(
    kube: LocalKubernetes,
) -> None:
    provider = driver(kube.url)
    first = provider.launch(spec(), idempotency_key="lease-1")
    # The look-up before the create misses it (as a read racing another launch would).
    kube.inject(status=404, method="GET", resource="pods", message='pods "x" not found')

    again = provider.launch(spec(), idempotency_key="lease-1")

    assert again.external_id == first.external_id
    assert len(kube.cluster.objects["pods"]) == 1
    assert ("POST", "/api/v1/namespaces/gpu-portal-vision-team/pods") in kube.requests


def test_it_refuses_for_capacity_when_no_node_has_the_gpus_free(kube: LocalKubernetes) -> None:
    provider = driver(kube.url)
    provider.launch(spec(2), idempotency_key="a")
    provider.launch(spec(2), idempotency_key="b")

    with pytest.raises(ProviderError) as full:
        provider.launch(spec(1), idempotency_key="c")
    with pytest.raises(ProviderError) as too_big:
        provider.launch(spec(3), idempotency_key="d")

    assert full.value.kind == ProviderErrorKind.CAPACITY and full.value.retryable
    assert too_big.value.kind == ProviderErrorKind.CAPACITY
    assert len(kube.cluster.objects["pods"]) == 2


def test_it_launches_on_the_zones_node_only(kube: LocalKubernetes) -> None:
    provider = driver(kube.url)
    placed = provider.launch(spec(2, zone="gpu-b"), idempotency_key="a")
    assert placed.zone == "gpu-b"

    with pytest.raises(ProviderError) as refused:
        provider.launch(spec(1, zone="gpu-b"), idempotency_key="b")

    assert refused.value.kind == ProviderErrorKind.CAPACITY
    assert "gpu-b" in str(refused.value)


def test_it_removes_a_pod_the_scheduler_refuses_and_says_why(
    kube: LocalKubernetes, monkeypatch: pytest.MonkeyPatch
) -> None:
    provider = driver(kube.url)
    stale = provider.inspect_nodes()  # what a launch racing the next two saw
    provider.launch(spec(2), idempotency_key="a")
    provider.launch(spec(2), idempotency_key="b")
    monkeypatch.setattr(provider, "inspect_nodes", lambda: stale)

    with pytest.raises(ProviderError) as refused:
        provider.launch(spec(1), idempotency_key="c")

    assert refused.value.kind == ProviderErrorKind.CAPACITY
    assert "0/2 nodes are available: 2 Insufficient nvidia.com/gpu." in str(refused.value)
    assert len(kube.cluster.objects["pods"]) == 2
    assert len(kube.cluster.objects["services"]) == 2


def test_it_reads_the_nodes_gpus_and_what_pods_hold(kube: LocalKubernetes) -> None:
    provider = driver(kube.url)
    provider.launch(spec(2, zone="gpu-a"), idempotency_key="a")

    nodes = provider.inspect_nodes()

    assert [(n.name, n.model, n.allocatable, n.allocated, n.free) for n in nodes] == [
        ("gpu-a", "A100 80GB", 2, 2, 0),
        ("gpu-b", "A100 80GB", 2, 0, 2),
    ]
    assert nodes[0].product == "NVIDIA-A100-SXM4-80GB"
    assert offerings_wanted(nodes) == {
        ("A100 80GB", 1): ["gpu-a", "gpu-b"],
        ("A100 80GB", 2): ["gpu-a", "gpu-b"],
    }


def test_it_terminates_twice_and_unknown_ids_harmlessly(kube: LocalKubernetes) -> None:
    provider = driver(kube.url)
    launched = provider.launch(spec(), idempotency_key="lease-1")

    provider.terminate([launched.external_id], region=REGION)
    provider.terminate([launched.external_id, "no-slash", "gpu-portal-x/gp-0"], region=REGION)

    assert kube.cluster.objects == {"pods": {}, "services": {}, "secrets": {}}
    assert provider.describe_ids([launched.external_id], region=REGION) == []


def test_it_describes_by_raw_tags_that_labels_cannot_hold(kube: LocalKubernetes) -> None:
    provider = driver(kube.url)
    odd = "reservation 42 / attempt #3 " + "x" * 80
    tags = ((TAG_PROJECT, "p"), (TAG_INSTALLATION, odd), ("Name", "my run"))
    provider.launch(spec(tags=tags), idempotency_key="lease-1")

    [found] = provider.describe(region=REGION, tag_filter={TAG_INSTALLATION: odd})

    assert found.tag(TAG_INSTALLATION) == odd
    assert found.tag("Name") == "my run"
    assert provider.describe(region=REGION, tag_filter={TAG_INSTALLATION: odd[:-1]}) == []


def test_a_wrong_token_is_an_auth_error_that_never_shows_the_token(
    kube: LocalKubernetes,
) -> None:
    refusing = driver(kube.url, token="not-the-token-123")

    for call in (
        refusing.validate,
        lambda: refusing.launch(spec(), idempotency_key="x"),
        lambda: refusing.describe(region=REGION, tag_filter={}),
    ):
        with pytest.raises(ProviderError) as refused:
            call()
        assert refused.value.kind == ProviderErrorKind.AUTH
        assert not refused.value.retryable
        assert "not-the-token-123" not in str(refused.value) + repr(refused.value)


@pytest.mark.parametrize(
    ("status", "message", "kind"),
    [
        (500, "etcdserver: request timed out", ProviderErrorKind.TRANSIENT),
        (503, "the server is currently unable to handle the request", ProviderErrorKind.TRANSIENT),
        (429, "too many requests", ProviderErrorKind.THROTTLED),
        (403, 'pods "gp-1" is forbidden: exceeded quota: gpus', ProviderErrorKind.QUOTA),
        (403, "forbidden: cannot create pods", ProviderErrorKind.AUTH),
        (422, "Pod is invalid", ProviderErrorKind.INVALID),
    ],
)
def test_it_names_the_kind_of_each_failure_of_the_api(
    kube: LocalKubernetes, status: int, message: str, kind: ProviderErrorKind
) -> None:
    kube.inject(status=status, method="POST", resource="pods", message=message)

    with pytest.raises(ProviderError) as failed:
        driver(kube.url).launch(spec(), idempotency_key="lease-1")

    assert failed.value.kind == kind
    assert type(failed.value) is ProviderError
    assert message in str(failed.value)


def test_a_server_error_on_describe_is_transient(kube: LocalKubernetes) -> None:
    kube.inject(status=500, resource="pods")

    with pytest.raises(ProviderError) as failed:
        driver(kube.url).describe(region=REGION, tag_filter={TAG_PROJECT: "p"})

    assert failed.value.kind == ProviderErrorKind.TRANSIENT and failed.value.retryable


def test_a_slow_or_absent_api_server_is_transient(kube: LocalKubernetes) -> None:
    kube.delay(1.5, resource="nodes")
    with pytest.raises(ProviderError) as slow:
        driver(kube.url, read_timeout=0.3).validate()
    with socket.socket() as closed:
        closed.bind(("127.0.0.1", 0))
        port = closed.getsockname()[1]
    with pytest.raises(ProviderError) as absent:
        driver(f"http://127.0.0.1:{port}").validate()

    assert slow.value.kind == ProviderErrorKind.TRANSIENT
    assert absent.value.kind == ProviderErrorKind.TRANSIENT


def test_it_refuses_what_it_cannot_launch_before_calling_the_cluster(
    kube: LocalKubernetes,
) -> None:
    provider = driver(kube.url)
    for bad in (
        spec(instance_type="g5.xlarge"),
        spec(instance_type="k8s-0x-a100"),
        spec(image_id=""),
    ):
        with pytest.raises(ProviderError) as refused:
            provider.launch(bad, idempotency_key="x")
        assert refused.value.kind == ProviderErrorKind.INVALID
    assert kube.requests == []
