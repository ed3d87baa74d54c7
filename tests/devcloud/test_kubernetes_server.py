"""The local Kubernetes API server (devcloud/kubernetes.py): its bodies, both ways, are the
official client's models; its scheduler and auth behave as the driver's tests assume."""

from __future__ import annotations

import json
import time
import urllib.error
import urllib.request
from collections.abc import Iterator

import pytest

from devcloud import kubernetes as local_kubernetes
from devcloud.kubernetes import LocalKubernetes
from devcloud.kubernetes_cluster import NodeSpec
from devcloud.kubernetes_models import InvalidBody, check
from rental.providers.base import (
    MARKET_ON_DEMAND,
    TAG_INSTALLATION,
    AccountConfig,
    Credentials,
    LaunchSpec,
    ProviderError,
)
from rental.providers.kubernetes import KubernetesProvider

TOKEN = "server-test-token"
MODEL_OF_KIND = {
    "Pod": "V1Pod",
    "PodList": "V1PodList",
    "Namespace": "V1Namespace",
    "Service": "V1Service",
    "ServiceList": "V1ServiceList",
    "Secret": "V1Secret",
    "NodeList": "V1NodeList",
    "EventList": "CoreV1EventList",
    "Status": "V1Status",
}


@pytest.fixture
def server() -> Iterator[LocalKubernetes]:
    local = local_kubernetes.start(
        [NodeSpec("gpu-a", 2), NodeSpec("gpu-b", 2)], tokens={TOKEN}, start_delay_s=0.1
    )
    try:
        yield local
    finally:
        local.stop()


def call(server: LocalKubernetes, method: str, path: str, body=None, token: str = TOKEN):
    request = urllib.request.Request(
        server.url + path,
        method=method,
        data=json.dumps(body).encode() if body is not None else None,
        headers={"Authorization": f"Bearer {token}", "Content-Type": "application/json"},
    )
    try:
        with urllib.request.urlopen(request, timeout=5) as answer:
            return answer.status, json.loads(answer.read())
    except urllib.error.HTTPError as error:
        return error.code, json.loads(error.read())


def pod(name: str, gpus: int = 2, **container_extra) -> dict:
    container = {
        "name": "lease",
        "image": "cuda:12",
        "resources": {"limits": {"nvidia.com/gpu": str(gpus)}},
    }
    return {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"name": name, "labels": {"team": "a"}},
        "spec": {"containers": [container | container_extra]},
    }


def with_namespace(server: LocalKubernetes, name: str = "ns-1") -> str:
    status, _body = call(server, "POST", "/api/v1/namespaces", {"metadata": {"name": name}})
    assert status == 201
    return name


def test_every_answer_of_a_drivers_work_is_the_official_clients_model(
    server: LocalKubernetes, monkeypatch: pytest.MonkeyPatch
) -> None:
    provider = KubernetesProvider(
        AccountConfig(
            driver="kubernetes",
            credentials=Credentials("gpu-portal", TOKEN),
            endpoint_url=server.url,
            default_region="pool",
        )
    )
    spec = LaunchSpec(
        region="pool",
        instance_type="k8s-2x-a100-80gb",
        image_id="cuda:12",
        market=MARKET_ON_DEMAND,
        tags=((TAG_INSTALLATION, "i"),),
        ssh_public_keys=("ssh-ed25519 AAAA e@x",),
    )
    empty = provider.inspect_nodes()
    first = provider.launch(spec, idempotency_key="a")
    provider.launch(spec, idempotency_key="b")
    monkeypatch.setattr(provider, "inspect_nodes", lambda: empty)  # a racing launch's view
    with pytest.raises(ProviderError):
        provider.launch(spec, idempotency_key="c")  # the scheduler's refusal: events read
    provider.describe(region="pool", tag_filter={TAG_INSTALLATION: "i"})
    provider.describe_ids([first.external_id], region="pool")
    provider.terminate([first.external_id], region="pool")
    provider.terminate([first.external_id], region="pool")  # 404s: Status bodies

    kinds = set()
    for _method, _path, body in server.bodies:
        check(body, MODEL_OF_KIND[body["kind"]])
        kinds.add(body["kind"])
    assert kinds == set(MODEL_OF_KIND)


def test_an_error_answer_is_a_status_object(server: LocalKubernetes) -> None:
    status, body = call(server, "GET", "/api/v1/namespaces/absent")
    assert status == 404
    check(body, "V1Status")
    assert body["reason"] == "NotFound"


def test_it_refuses_a_request_without_the_token(server: LocalKubernetes) -> None:
    status, body = call(server, "GET", "/api/v1/nodes", token="other")
    assert status == 401
    assert body["reason"] == "Unauthorized"
    check(body, "V1Status")


@pytest.mark.parametrize(
    ("body", "field"),
    [
        (pod("p", imagee="typo"), "spec.containers[0].imagee"),
        (
            pod("p", resources={"limits": {"nvidia.com/gpu": 2}}),
            "spec.containers[0].resources.limits.nvidia.com/gpu",
        ),
        (pod("p", ports=[{"containerPort": "22"}]), "spec.containers[0].ports[0].containerPort"),
        ({"metadata": {"name": "p"}, "spec": {"containers": [{"image": "x"}]}}, "name"),
        ({"metadata": {"name": "p"}, "spec": {}}, "containers"),
    ],
)
def test_it_refuses_a_body_that_is_not_the_clients_model(
    server: LocalKubernetes, body: dict, field: str
) -> None:
    namespace = with_namespace(server)

    status, answer = call(server, "POST", f"/api/v1/namespaces/{namespace}/pods", body)

    assert status == 422
    assert answer["reason"] == "Invalid"
    assert field in answer["message"]
    assert server.cluster.objects["pods"] == {}


def test_the_model_check_names_the_field(server: LocalKubernetes) -> None:
    with pytest.raises(InvalidBody) as wrong:
        check({"metadata": {"labels": {"a": 1}}}, "V1Namespace")
    assert wrong.value.field == "metadata.labels.a"
    assert check({"metadata": {"name": "n"}}, "V1Namespace").metadata.name == "n"


def test_it_schedules_by_free_gpus_and_tells_why_not(server: LocalKubernetes) -> None:
    namespace = with_namespace(server)
    for name in ("p1", "p2", "p3"):
        assert call(server, "POST", f"/api/v1/namespaces/{namespace}/pods", pod(name))[0] == 201

    _status, third = call(server, "GET", f"/api/v1/namespaces/{namespace}/pods/p3")
    _status, events = call(
        server,
        "GET",
        f"/api/v1/namespaces/{namespace}/events?fieldSelector=involvedObject.name%3Dp3",
    )

    assert "nodeName" not in third["spec"]
    assert third["status"]["conditions"][0]["reason"] == "Unschedulable"
    [event] = events["items"]
    assert event["reason"] == "FailedScheduling"
    assert event["message"] == "0/2 nodes are available: 2 Insufficient nvidia.com/gpu."
    check(events, "CoreV1EventList")

    assert call(server, "DELETE", f"/api/v1/namespaces/{namespace}/pods/p1")[0] == 200
    _status, placed = call(server, "GET", f"/api/v1/namespaces/{namespace}/pods/p3")
    assert placed["spec"]["nodeName"] in {"gpu-a", "gpu-b"}


def test_a_placed_pod_turns_running_after_its_start_delay(server: LocalKubernetes) -> None:
    namespace = with_namespace(server)
    _status, created = call(server, "POST", f"/api/v1/namespaces/{namespace}/pods", pod("p1"))
    assert created["status"]["phase"] == "Pending"
    time.sleep(0.15)

    _status, running = call(server, "GET", f"/api/v1/namespaces/{namespace}/pods/p1")

    assert running["status"]["phase"] == "Running"
    check(running, "V1Pod")


def test_it_lists_by_label_selector_and_across_namespaces(server: LocalKubernetes) -> None:
    first, second = with_namespace(server, "ns-1"), with_namespace(server, "ns-2")
    call(server, "POST", f"/api/v1/namespaces/{first}/pods", pod("p1", 1))
    other = pod("p2", 1)
    other["metadata"]["labels"] = {"team": "b"}
    call(server, "POST", f"/api/v1/namespaces/{second}/pods", other)

    _status, team_a = call(server, "GET", "/api/v1/pods?labelSelector=team%3Da")
    _status, in_second = call(server, "GET", f"/api/v1/namespaces/{second}/pods")

    assert [item["metadata"]["name"] for item in team_a["items"]] == ["p1"]
    assert [item["metadata"]["name"] for item in in_second["items"]] == ["p2"]


def test_it_refuses_a_pod_in_a_namespace_that_does_not_exist(server: LocalKubernetes) -> None:
    status, body = call(server, "POST", "/api/v1/namespaces/nowhere/pods", pod("p"))
    assert status == 404
    assert body["message"] == 'namespaces "nowhere" not found'
