"""The ``kubernetes`` driver: GPU pods in a Kubernetes cluster, through the official client.

An account of this driver is a cluster: ``endpoint_url`` is its API server's URL and the
credentials' ``secret_access_key`` a bearer token (a service account's), never logged.

An "instance" is one pod running the offering's container image (``LaunchSpec.image_id``)
with ``nvidia.com/gpu`` limits of the offering's count, in the namespace of its project
(``gpu-portal-<project slug>``, made when missing), named from the idempotency key (the
same key names the same pod: a second create is refused as AlreadyExists and the pod
that exists is returned). The engineer's public keys and the agent's configuration go in a
Secret of the same name, mounted at /etc/gpu-portal (``authorized_keys``, ``agent.json``);
the image runs sshd reading them. A Service of the same name (``LoadBalancer`` by default)
reaches its port 22: its address is the instance's public address. The external id is
``<namespace>/<pod name>``; the zone the node it runs on; the region the one asked.

Offerings name what to launch: ``k8s-<count>x-<model slug>`` (kubernetes_naming). Which
nodes have that model is read from the nodes (GPU feature discovery's
``nvidia.com/gpu.product`` label, ``status.allocatable["nvidia.com/gpu"]``); a launch with
a zone goes to that node only. Every call raises ``ProviderError``, never the client's.
"""

from __future__ import annotations

import json
from datetime import UTC, datetime
from typing import Any

import urllib3
from kubernetes import client
from kubernetes.client.exceptions import ApiException
from kubernetes.utils.quantity import parse_quantity

from rental.providers.base import (
    MARKET_ON_DEMAND,
    TAG_IDEMPOTENCY_KEY,
    AccountConfig,
    Capability,
    CloudInstance,
    CloudState,
    LaunchSpec,
    ProviderError,
    ProviderErrorKind,
)
from rental.providers.kubernetes_naming import (
    GPU_RESOURCE,
    HOSTNAME_LABEL,
    MANAGED_LABEL,
    MANAGED_VALUE,
    POD_LABEL,
    PRODUCT_LABEL,
    TAGS_ANNOTATION,
    TYPE_ANNOTATION,
    KubernetesNode,
    gpu_count,
    labels_for,
    namespace_for,
    node_model,
    object_name,
    parse_type,
    selector,
    tags_annotation,
    tags_from,
)
from rental.providers.ssh_host import gpu_matches

DEFAULT_CONNECT_TIMEOUT_S = 3.0
DEFAULT_READ_TIMEOUT_S = 30.0
SECRET_MOUNT = "/etc/gpu-portal"
PHASES = {
    "Pending": CloudState.PENDING,
    "Running": CloudState.RUNNING,
    "Succeeded": CloudState.TERMINATED,
    "Failed": CloudState.TERMINATED,
    "Unknown": CloudState.PENDING,
}
ENDED = ("Succeeded", "Failed")
GIB = 2**30


def _status_message(error: ApiException) -> str:
    """The message of the API's ``Status`` answer (never a header, never the token)."""
    try:
        return str(json.loads(error.body or "{}").get("message", ""))[:300]
    except (ValueError, TypeError, AttributeError):
        return ""


def classify(error: ApiException) -> ProviderError:
    """A client's ``ApiException`` as a ``ProviderError`` of the kind its status means."""
    status = error.status or 0
    message = _status_message(error) or (error.reason or "no answer")
    text = f"Kubernetes API answered {status}: {message}"
    if status == 401:
        return ProviderError(ProviderErrorKind.AUTH, text)
    if status == 403:
        quota = "exceeded quota" in message
        return ProviderError(ProviderErrorKind.QUOTA if quota else ProviderErrorKind.AUTH, text)
    if status == 404:
        return ProviderError(ProviderErrorKind.NOT_FOUND, text)
    if status == 429:
        return ProviderError(ProviderErrorKind.THROTTLED, text)
    if status >= 500 or status == 0:
        return ProviderError(ProviderErrorKind.TRANSIENT, text)
    return ProviderError(ProviderErrorKind.INVALID, text)


def _aware(moment: datetime | None) -> datetime | None:
    if moment is None:
        return None
    return moment.replace(tzinfo=UTC) if moment.tzinfo is None else moment.astimezone(UTC)


class KubernetesProvider:
    """The driver for one cluster. Every method raises ``ProviderError``."""

    capabilities: frozenset[Capability] = frozenset()

    def __init__(
        self,
        config: AccountConfig,
        *,
        connect_timeout: float = DEFAULT_CONNECT_TIMEOUT_S,
        read_timeout: float = DEFAULT_READ_TIMEOUT_S,
        service_type: str = "LoadBalancer",
    ) -> None:
        configuration = client.Configuration()
        configuration.host = config.endpoint_url.rstrip("/")
        # The whole header value, no prefix: read alike by clients before and after 36.
        token = config.credentials.secret_access_key
        configuration.api_key = {"authorization": f"Bearer {token}"}
        configuration.retries = False  # one request per call: the tasks retry with backoff
        self._api = client.CoreV1Api(client.ApiClient(configuration))
        self._timeout = (connect_timeout, read_timeout)
        self.service_type = service_type

    def _call(self, method: str, *args: Any, absent: int | None = None, **kwargs: Any) -> Any:
        """``CoreV1Api.<method>`` with the timeouts; every failure as ``ProviderError``,
        except an answer of status ``absent`` (404: not there, 409: there already), which
        gives None."""
        try:
            return getattr(self._api, method)(*args, _request_timeout=self._timeout, **kwargs)
        except ApiException as error:
            if absent is not None and error.status == absent:
                return None
            raise classify(error) from None
        except urllib3.exceptions.HTTPError as error:
            raise ProviderError(
                ProviderErrorKind.TRANSIENT,
                f"Kubernetes API did not answer ({type(error).__name__}).",
            ) from None
        except ValueError as error:  # the client's own check of a body or an answer
            raise ProviderError(ProviderErrorKind.INVALID, f"Kubernetes client: {error}") from None

    def _maybe(self, method: str, *args: Any, **kwargs: Any) -> Any:
        """``_call``, with None for an object that is not there (404)."""
        return self._call(method, *args, absent=404, **kwargs)

    def _create(self, method: str, namespace: str, body: Any) -> bool:
        """Create ``body``; False when it exists already (409 AlreadyExists)."""
        return self._call(method, namespace, body, absent=409) is not None

    # -- what the portal asks ----------------------------------------------------------

    def validate(self) -> None:
        """One cheap call: the nodes (the token must be good and may list them)."""
        self._call("list_node", limit=1)

    def inspect_nodes(self) -> list[KubernetesNode]:
        """Every node with its GPUs: allocatable ``nvidia.com/gpu``, how many pods that
        have not ended hold, the model from GPU feature discovery's labels."""
        nodes = self._call("list_node").items
        held: dict[str, int] = {}
        for pod in self._call("list_pod_for_all_namespaces").items:
            if pod.spec.node_name and (pod.status.phase if pod.status else "") not in ENDED:
                held[pod.spec.node_name] = held.get(pod.spec.node_name, 0) + _gpus(pod)
        found = []
        for node in nodes:
            status = node.status
            product, memory, model = node_model(node.metadata.labels)
            ready = any(
                condition.type == "Ready" and condition.status == "True"
                for condition in (status.conditions or [])
            )
            addresses = {item.type: item.address for item in (status.addresses or [])}
            found.append(
                KubernetesNode(
                    name=node.metadata.name,
                    ready=ready and not (node.spec and node.spec.unschedulable),
                    product=product,
                    memory_mib=memory,
                    model=model,
                    allocatable=gpu_count((status.allocatable or {}).get(GPU_RESOURCE)),
                    allocated=held.get(node.metadata.name, 0),
                    address=addresses.get("ExternalIP") or addresses.get("InternalIP", ""),
                    vcpus=_whole((status.allocatable or {}).get("cpu")),
                    memory_gib=_whole((status.allocatable or {}).get("memory"), GIB),
                )
            )
        return sorted(found, key=lambda item: item.name)

    def launch(
        self, spec: LaunchSpec, *, idempotency_key: str, client_token: str = ""
    ) -> CloudInstance:
        """Run the offering's image as a pod with its GPUs. Idempotent by key: the pod the
        key names is returned when it exists (whatever its state). ``client_token`` is not
        used: the key alone names the pod. Raises ``capacity`` when no ready node
        (``spec.zone``, when given) has the GPUs free, or when the scheduler reports the
        pod unschedulable right after its creation (the pod is then removed)."""
        count, model = parse_type(spec.instance_type)
        if not spec.image_id:
            raise ProviderError(
                ProviderErrorKind.INVALID, "A Kubernetes lease needs a container image."
            )
        namespace, name = namespace_for(spec.tags), object_name(idempotency_key)
        existing = self._maybe("read_namespaced_pod", name, namespace)
        if existing is not None:
            return self._instance(existing, spec.region)
        products = self._room(count, model, spec.zone)
        tags = {key: value for key, value in spec.tags if key != TAG_IDEMPOTENCY_KEY}
        tags[TAG_IDEMPOTENCY_KEY] = idempotency_key
        labels = labels_for(tags, name)
        self._ensure_namespace(namespace)
        self._create("create_namespaced_secret", namespace, self._secret(spec, name, labels))
        pod = self._pod(spec, name, labels, tags, count, products)
        if not self._create("create_namespaced_pod", namespace, pod):
            pod_now = self._call("read_namespaced_pod", name, namespace)
            self._create("create_namespaced_service", namespace, self._service(name, labels))
            return self._instance(pod_now, spec.region)
        self._create("create_namespaced_service", namespace, self._service(name, labels))
        created = self._call("read_namespaced_pod", name, namespace)
        refusal = self._unschedulable(created)
        if refusal:
            self._remove(namespace, name)
            raise ProviderError(ProviderErrorKind.CAPACITY, f"Kubernetes scheduler: {refusal}")
        return self._instance(created, spec.region)

    def _room(self, count: int, model: str, zone: str) -> list[str]:
        """The GPU products of the ready nodes (``zone``'s only, when given) that have the
        model; raises ``capacity`` when none has ``count`` of them free."""
        nodes = [
            node
            for node in self.inspect_nodes()
            if gpu_matches(node.product, node.memory_mib, model) and (not zone or node.name == zone)
        ]
        if not any(node.free >= count for node in nodes):
            where = f"node {zone}" if zone else "any ready node of this cluster"
            raise ProviderError(
                ProviderErrorKind.CAPACITY, f"No {count} free GPU(s) of model {model} on {where}."
            )
        return sorted({node.product for node in nodes})

    def _ensure_namespace(self, namespace: str) -> None:
        if self._maybe("read_namespace", namespace) is not None:
            return
        body = client.V1Namespace(
            metadata=client.V1ObjectMeta(name=namespace, labels={MANAGED_LABEL: MANAGED_VALUE})
        )
        # 409: made meanwhile by another launch, as good.
        self._call("create_namespace", body, absent=409)

    def _secret(self, spec: LaunchSpec, name: str, labels: dict[str, str]) -> client.V1Secret:
        keys = "".join(f"{key.strip()}\n" for key in spec.ssh_public_keys if key.strip())
        return client.V1Secret(
            metadata=client.V1ObjectMeta(name=name, labels=labels),
            type="Opaque",
            string_data={"authorized_keys": keys, "agent.json": spec.agent_config},
        )

    def _pod(
        self,
        spec: LaunchSpec,
        name: str,
        labels: dict[str, str],
        tags: dict[str, str],
        count: int,
        products: list[str],
    ) -> client.V1Pod:
        container = client.V1Container(
            name="lease",
            image=spec.image_id,
            resources=client.V1ResourceRequirements(limits={GPU_RESOURCE: str(count)}),
            ports=[client.V1ContainerPort(name="ssh", container_port=22, protocol="TCP")],
            env=[
                client.V1EnvVar(
                    name="GPU_PORTAL_AUTHORIZED_KEYS", value=f"{SECRET_MOUNT}/authorized_keys"
                ),
                client.V1EnvVar(name="GPU_PORTAL_AGENT_CONFIG", value=f"{SECRET_MOUNT}/agent.json"),
            ],
            volume_mounts=[
                client.V1VolumeMount(name="gpu-portal", mount_path=SECRET_MOUNT, read_only=True)
            ],
        )
        affinity = client.V1Affinity(
            node_affinity=client.V1NodeAffinity(
                required_during_scheduling_ignored_during_execution=client.V1NodeSelector(
                    node_selector_terms=[
                        client.V1NodeSelectorTerm(
                            match_expressions=[
                                client.V1NodeSelectorRequirement(
                                    key=PRODUCT_LABEL, operator="In", values=products
                                )
                            ]
                        )
                    ]
                )
            )
        )
        return client.V1Pod(
            metadata=client.V1ObjectMeta(
                name=name,
                labels=labels,
                annotations={
                    TAGS_ANNOTATION: tags_annotation(tags),
                    TYPE_ANNOTATION: spec.instance_type,
                },
            ),
            spec=client.V1PodSpec(
                containers=[container],
                restart_policy="Never",
                automount_service_account_token=False,
                enable_service_links=False,
                node_selector={HOSTNAME_LABEL: spec.zone} if spec.zone else None,
                affinity=affinity,
                tolerations=[
                    client.V1Toleration(key=GPU_RESOURCE, operator="Exists", effect="NoSchedule")
                ],
                volumes=[
                    client.V1Volume(
                        name="gpu-portal",
                        secret=client.V1SecretVolumeSource(secret_name=name, default_mode=0o400),
                    )
                ],
            ),
        )

    def _service(self, name: str, labels: dict[str, str]) -> client.V1Service:
        return client.V1Service(
            metadata=client.V1ObjectMeta(name=name, labels=labels),
            spec=client.V1ServiceSpec(
                type=self.service_type,
                selector={POD_LABEL: name},
                ports=[client.V1ServicePort(name="ssh", port=22, target_port=22, protocol="TCP")],
            ),
        )

    def _unschedulable(self, pod: client.V1Pod) -> str:
        """The scheduler's refusal of a pod not placed yet ("" when none is known): its
        ``FailedScheduling`` event, else its ``PodScheduled=False`` condition."""
        if pod.spec.node_name or (pod.status and pod.status.phase != "Pending"):
            return ""
        events = self._call(
            "list_namespaced_event",
            pod.metadata.namespace,
            field_selector=f"involvedObject.name={pod.metadata.name}",
        ).items
        failed = [event for event in events if event.reason == "FailedScheduling"]
        if failed:
            return failed[-1].message or "unschedulable"
        for condition in (pod.status.conditions if pod.status else None) or []:
            if condition.type == "PodScheduled" and condition.status == "False":
                return condition.message or condition.reason or "unschedulable"
        return ""

    def describe(self, *, region: str, tag_filter: dict[str, str]) -> list[CloudInstance]:
        """Every pod of the portal carrying all of ``tag_filter`` in any namespace (one
        list of pods and one of services, both by label selector)."""
        wanted = selector(tag_filter)
        pods = self._call("list_pod_for_all_namespaces", label_selector=wanted).items
        services = {
            (item.metadata.namespace, item.metadata.name): item
            for item in self._call("list_service_for_all_namespaces", label_selector=wanted).items
        }
        found = []
        for pod in pods:
            service = services.get((pod.metadata.namespace, pod.metadata.name))
            instance = self._instance(pod, region, service=service, look=False)
            if all(instance.tag(key) == value for key, value in tag_filter.items()):
                found.append(instance)
        return sorted(found, key=lambda instance: instance.external_id)

    def describe_ids(self, external_ids: list[str], *, region: str) -> list[CloudInstance]:
        """The pods among ``external_ids`` (``<namespace>/<name>``) the cluster has; an id
        of another shape, or of a pod that is gone, is missing from the answer."""
        found = []
        for namespace, name in sorted({_split(item) for item in external_ids} - {None}):
            pod = self._maybe("read_namespaced_pod", name, namespace)
            if pod is not None:
                found.append(self._instance(pod, region))
        return found

    def terminate(self, external_ids: list[str], *, region: str) -> None:
        """Delete each pod with its service and secret; what is gone already is ignored."""
        for namespace, name in sorted({_split(item) for item in external_ids} - {None}):
            self._remove(namespace, name)

    def _remove(self, namespace: str, name: str) -> None:
        for method in (
            "delete_namespaced_pod",
            "delete_namespaced_service",
            "delete_namespaced_secret",
        ):
            self._maybe(method, name, namespace)

    def _instance(
        self,
        pod: client.V1Pod,
        region: str,
        *,
        service: client.V1Service | None = None,
        look: bool = True,
    ) -> CloudInstance:
        """The pod as a ``CloudInstance``; ``look`` reads its service for the address."""
        meta, status = pod.metadata, pod.status or client.V1PodStatus()
        if look:
            service = self._maybe("read_namespaced_service", meta.name, meta.namespace)
        phase = status.phase or "Pending"
        state = PHASES.get(phase, CloudState.PENDING)
        if meta.deletion_timestamp is not None and state != CloudState.TERMINATED:
            state = CloudState.SHUTTING_DOWN
        changes = [
            c.last_transition_time for c in status.conditions or [] if c.last_transition_time
        ]
        return CloudInstance(
            external_id=f"{meta.namespace}/{meta.name}",
            state=state,
            market=MARKET_ON_DEMAND,
            region=region,
            zone=pod.spec.node_name or "",
            instance_type=(meta.annotations or {}).get(TYPE_ANNOTATION, ""),
            public_address=_address(service),
            private_address=status.pod_ip or "",
            launched_at=_aware(status.start_time or meta.creation_timestamp),
            state_reason=_reason(pod),
            state_changed_at=_aware(max(changes) if changes else meta.creation_timestamp),
            tags=tags_from(meta.annotations),
        )


def _whole(quantity: str | None, unit: int = 1) -> int:
    """A resource quantity ("31500m", "256Gi") in whole ``unit``s, rounded down; 0 for
    none or nonsense."""
    try:
        return max(int(parse_quantity(quantity) // unit), 0) if quantity else 0
    except ValueError:
        return 0


def _split(external_id: str) -> tuple[str, str] | None:
    namespace, _, name = external_id.partition("/")
    return (namespace, name) if namespace and name and "/" not in name else None


def _gpus(pod: client.V1Pod) -> int:
    total = 0
    for container in pod.spec.containers or []:
        resources = container.resources
        limits = (resources.limits if resources else None) or {}
        requests = (resources.requests if resources else None) or {}
        total += gpu_count(limits.get(GPU_RESOURCE) or requests.get(GPU_RESOURCE))
    return total


def _address(service: client.V1Service | None) -> str:
    """The load balancer's address of the SSH service ("" until one is given)."""
    balancer = service.status.load_balancer if service and service.status else None
    for ingress in (balancer.ingress if balancer else None) or []:
        if ingress.ip or ingress.hostname:
            return (ingress.ip or ingress.hostname)[:64]
    return ""


def _reason(pod: client.V1Pod) -> str:
    """Why the pod is as it is: the scheduler's refusal, a container that cannot start
    (``ErrImagePull: …``), or the pod's own reason; "" when all is well."""
    status = pod.status or client.V1PodStatus()
    for condition in status.conditions or []:
        if condition.type == "PodScheduled" and condition.status == "False":
            return f"{condition.reason or 'Unschedulable'}: {condition.message or ''}".strip()
    for container in status.container_statuses or []:
        waiting = container.state.waiting if container.state else None
        if waiting and waiting.reason not in (None, "ContainerCreating", "PodInitializing"):
            return f"{waiting.reason}: {waiting.message or ''}".strip()
    if status.reason:
        return f"{status.reason}: {status.message or ''}".strip()
    return ""
