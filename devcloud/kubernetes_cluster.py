"""The state of the local Kubernetes cluster (devcloud/kubernetes.py serves it over HTTP).

Objects are kept as the JSON the API speaks (camelCase dicts). A tiny scheduler places a
pod on a ready node whose labels match its node selector and affinity (``In`` terms only)
and that has enough unallocated ``nvidia.com/gpu``; a pod that fits nowhere stays Pending
with a ``PodScheduled=False`` condition and a ``FailedScheduling`` event, worded as the
real scheduler words it. A placed pod turns Running ``start_delay_s`` after it was placed.
Every pending pod is tried again at each request, so a freed GPU is used.
"""

from __future__ import annotations

import copy
import itertools
import threading
import uuid
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta

GPU = "nvidia.com/gpu"
PRODUCT_LABEL = "nvidia.com/gpu.product"
MEMORY_LABEL = "nvidia.com/gpu.memory"
HOSTNAME_LABEL = "kubernetes.io/hostname"
KINDS = {"pods": "Pod", "services": "Service", "secrets": "Secret"}


class ApiError(Exception):
    """An answer other than 2xx, as the API's ``Status`` object."""

    def __init__(self, code: int, reason: str, message: str) -> None:
        super().__init__(message)
        self.code = code
        self.reason = reason
        self.message = message

    def status(self) -> dict:
        return {
            "kind": "Status",
            "apiVersion": "v1",
            "metadata": {},
            "status": "Failure",
            "message": self.message,
            "reason": self.reason,
            "code": self.code,
        }


@dataclass(frozen=True)
class NodeSpec:
    """One node of the local cluster: ``gpus`` allocatable GPUs of ``product`` (the label
    GPU feature discovery sets, e.g. ``NVIDIA-A100-SXM4-80GB``) with ``memory_mib`` each."""

    name: str
    gpus: int
    product: str = "NVIDIA-A100-SXM4-80GB"
    memory_mib: int = 81920
    ready: bool = True
    address: str = "10.0.0.1"


def now_text(moment: datetime | None = None) -> str:
    return (moment or datetime.now(UTC)).strftime("%Y-%m-%dT%H:%M:%SZ")


def _node(spec: NodeSpec) -> dict:
    return {
        "apiVersion": "v1",
        "kind": "Node",
        "metadata": {
            "name": spec.name,
            "uid": str(uuid.uuid4()),
            "creationTimestamp": now_text(),
            "labels": {
                HOSTNAME_LABEL: spec.name,
                PRODUCT_LABEL: spec.product,
                MEMORY_LABEL: str(spec.memory_mib),
                "nvidia.com/gpu.count": str(spec.gpus),
            },
        },
        "status": {
            "allocatable": {GPU: str(spec.gpus), "cpu": "32", "memory": "256Gi"},
            "capacity": {GPU: str(spec.gpus), "cpu": "32", "memory": "256Gi"},
            "addresses": [
                {"type": "InternalIP", "address": spec.address},
                {"type": "Hostname", "address": spec.name},
            ],
            "conditions": [
                {
                    "type": "Ready",
                    "status": "True" if spec.ready else "False",
                    "reason": "KubeletReady" if spec.ready else "KubeletNotReady",
                }
            ],
        },
    }


def gpus_of(pod: dict) -> int:
    """The GPUs a pod asks for: its containers' ``nvidia.com/gpu`` limits (or requests)."""
    total = 0
    for container in pod["spec"].get("containers", []):
        resources = container.get("resources") or {}
        amount = (resources.get("limits") or {}).get(GPU) or (resources.get("requests") or {}).get(
            GPU
        )
        total += int(amount or 0)
    return total


def labels_match(labels: dict, selector: str) -> bool:
    """Equality-based label selectors: ``a=b,c==d,e!=f,g`` (and ``!g``)."""
    for term in filter(None, (part.strip() for part in selector.split(","))):
        if "!=" in term:
            key, value = term.split("!=", 1)
            if labels.get(key) == value:
                return False
        elif "=" in term:
            key, value = term.replace("==", "=").split("=", 1)
            if labels.get(key) != value:
                return False
        elif term.startswith("!"):
            if term[1:] in labels:
                return False
        elif term not in labels:
            return False
    return True


class Cluster:
    """Namespaces, nodes, pods, services, secrets and events, under one lock."""

    def __init__(self, nodes: list[NodeSpec], *, start_delay_s: float = 0.2) -> None:
        self.lock = threading.RLock()
        self.start_delay_s = start_delay_s
        self._ips = itertools.count(10)
        self.set_nodes(nodes)
        self.namespaces: dict[str, dict] = {}
        self.objects: dict[str, dict[tuple[str, str], dict]] = {
            "pods": {},
            "services": {},
            "secrets": {},
        }
        self.events: list[dict] = []
        self._placed: dict[tuple[str, str], datetime] = {}

    def set_nodes(self, nodes: list[NodeSpec]) -> None:
        with self.lock:
            self.nodes = {spec.name: _node(spec) for spec in nodes}

    # -- namespaces ------------------------------------------------------------------------

    def create_namespace(self, body: dict) -> dict:
        name = body["metadata"]["name"]
        if name in self.namespaces:
            raise ApiError(409, "AlreadyExists", f'namespaces "{name}" already exists')
        stored = copy.deepcopy(body)
        stored.update(apiVersion="v1", kind="Namespace")
        stored["metadata"].update(uid=str(uuid.uuid4()), creationTimestamp=now_text())
        stored["status"] = {"phase": "Active"}
        self.namespaces[name] = stored
        return stored

    def namespace(self, name: str) -> dict:
        try:
            return self.namespaces[name]
        except KeyError:
            raise ApiError(404, "NotFound", f'namespaces "{name}" not found') from None

    # -- namespaced objects ----------------------------------------------------------------

    def create(self, kind: str, namespace: str, body: dict) -> dict:
        self.namespace(namespace)
        meta = body.get("metadata") or {}
        name = meta.get("name") or ""
        if not name:
            raise ApiError(422, "Invalid", f"{kind}: metadata.name: Required value")
        if meta.get("namespace", namespace) != namespace:
            raise ApiError(
                400, "BadRequest", "the namespace of the object does not match the request"
            )
        if (namespace, name) in self.objects[kind]:
            raise ApiError(409, "AlreadyExists", f'{kind} "{name}" already exists')
        stored = copy.deepcopy(body)
        stored.update(apiVersion="v1", kind=KINDS[kind])  # as the API answers, always
        stored["metadata"].update(
            namespace=namespace, uid=str(uuid.uuid4()), creationTimestamp=now_text()
        )
        if kind == "pods":
            if not gpus_of(stored) and not stored["spec"].get("containers"):
                raise ApiError(422, "Invalid", "Pod: spec.containers: Required value")
            stored["status"] = {"phase": "Pending"}
        elif kind == "services":
            self._expose(stored)
        self.objects[kind][(namespace, name)] = stored
        if kind == "pods":
            self.schedule()
        return stored

    def _expose(self, service: dict) -> None:
        spec = service.setdefault("spec", {})
        spec["clusterIP"] = f"10.96.0.{next(self._ips)}"
        for index, port in enumerate(spec.get("ports") or []):
            port.setdefault("protocol", "TCP")
            if spec.get("type") in ("NodePort", "LoadBalancer"):
                port.setdefault("nodePort", 30022 + index)
        if spec.get("type") == "LoadBalancer":
            ingress = [{"ip": f"203.0.113.{next(self._ips)}"}]
            service["status"] = {"loadBalancer": {"ingress": ingress}}
        else:
            service["status"] = {"loadBalancer": {}}

    def get(self, kind: str, namespace: str, name: str) -> dict:
        self.schedule()
        try:
            return self.objects[kind][(namespace, name)]
        except KeyError:
            raise ApiError(404, "NotFound", f'{kind} "{name}" not found') from None

    def delete(self, kind: str, namespace: str, name: str) -> dict:
        found = self.get(kind, namespace, name)
        del self.objects[kind][(namespace, name)]
        self._placed.pop((namespace, name), None)
        found = copy.deepcopy(found)
        found["metadata"]["deletionTimestamp"] = now_text()
        self.schedule()  # what it held is free for the pods waiting
        return found

    def list(self, kind: str, namespace: str | None, selector: str) -> list[dict]:
        self.schedule()
        return [
            item
            for (space, _name), item in sorted(self.objects[kind].items())
            if namespace in (None, space)
            and labels_match(item["metadata"].get("labels") or {}, selector)
        ]

    def list_events(self, namespace: str, field_selector: str) -> list[dict]:
        self.schedule()
        wanted = dict(term.split("=", 1) for term in field_selector.split(",") if "=" in term)
        found = []
        for event in self.events:
            if event["metadata"]["namespace"] != namespace:
                continue
            involved = event["involvedObject"]
            if all(
                (involved.get(key.split(".", 1)[1]) if key.startswith("involvedObject.") else None)
                == value
                for key, value in wanted.items()
            ):
                found.append(event)
        return found

    def set_phase(self, namespace: str, name: str, phase: str, reason: str = "") -> None:
        """A test's hand on a pod: ``Failed`` or ``Succeeded``, as a container's end makes it."""
        with self.lock:
            pod = self.objects["pods"][(namespace, name)]
            pod["status"]["phase"] = phase
            if reason:
                pod["status"]["reason"] = reason

    # -- the scheduler ---------------------------------------------------------------------

    def _used(self) -> dict[str, int]:
        used = dict.fromkeys(self.nodes, 0)
        for pod in self.objects["pods"].values():
            node = pod["spec"].get("nodeName")
            if node in used and pod["status"]["phase"] not in ("Succeeded", "Failed"):
                used[node] += gpus_of(pod)
        return used

    @staticmethod
    def _eligible(pod: dict, node: dict) -> bool:
        labels = node["metadata"]["labels"]
        selector = pod["spec"].get("nodeSelector") or {}
        if any(labels.get(key) != value for key, value in selector.items()):
            return False
        affinity = ((pod["spec"].get("affinity") or {}).get("nodeAffinity") or {}).get(
            "requiredDuringSchedulingIgnoredDuringExecution"
        )
        if not affinity:
            return True
        return any(
            all(
                expression["operator"] == "In"
                and labels.get(expression["key"]) in expression["values"]
                for expression in term.get("matchExpressions") or []
            )
            for term in affinity.get("nodeSelectorTerms") or []
        )

    def schedule(self) -> None:
        """Place every unplaced pending pod that fits; start the placed ones whose time came."""
        with self.lock:
            now = datetime.now(UTC)
            used = self._used()
            pods = sorted(
                self.objects["pods"].items(),
                key=lambda item: item[1]["metadata"]["creationTimestamp"],
            )
            for key, pod in pods:
                if pod["spec"].get("nodeName") or pod["status"]["phase"] != "Pending":
                    continue
                self._place(key, pod, used, now)
            for key, placed_at in self._placed.items():
                pod = self.objects["pods"][key]
                ready = now - placed_at >= timedelta(seconds=self.start_delay_s)
                if pod["status"]["phase"] == "Pending" and ready:
                    node = self.nodes.get(pod["spec"]["nodeName"])
                    address = node["status"]["addresses"][0]["address"] if node else ""
                    pod["status"].update(
                        phase="Running",
                        hostIP=address,
                        podIP=f"10.244.0.{next(self._ips) % 250 + 2}",
                        startTime=now_text(now),
                    )
                    pod["status"]["conditions"].append(
                        {"type": "Ready", "status": "True", "lastTransitionTime": now_text(now)}
                    )

    def _place(self, key: tuple[str, str], pod: dict, used: dict[str, int], now: datetime) -> None:
        need = gpus_of(pod)
        short = unmatched = 0
        for name, node in sorted(self.nodes.items()):
            ready = node["status"]["conditions"][0]["status"] == "True"
            if not ready or not self._eligible(pod, node):
                unmatched += 1
                continue
            if int(node["status"]["allocatable"][GPU]) - used[name] < need:
                short += 1
                continue
            pod["spec"]["nodeName"] = name
            used[name] += need
            pod["status"]["conditions"] = [
                {"type": "PodScheduled", "status": "True", "lastTransitionTime": now_text(now)}
            ]
            self._placed[key] = now
            return
        reasons = []
        if short:
            reasons.append(f"{short} Insufficient {GPU}")
        if unmatched:
            reasons.append(f"{unmatched} node(s) didn't match Pod's node affinity/selector")
        message = f"0/{len(self.nodes)} nodes are available: {', '.join(reasons) or 'no nodes'}."
        pod["status"]["conditions"] = [
            {
                "type": "PodScheduled",
                "status": "False",
                "reason": "Unschedulable",
                "message": message,
                "lastTransitionTime": now_text(now),
            }
        ]
        self._event(pod, "FailedScheduling", message, now)

    def _event(self, pod: dict, reason: str, message: str, now: datetime) -> None:
        meta = pod["metadata"]
        for event in self.events:
            same = event["involvedObject"]["uid"] == meta["uid"] and event["reason"] == reason
            if same and event["message"] == message:
                event["count"] += 1
                event["lastTimestamp"] = now_text(now)
                return
        self.events.append(
            {
                "apiVersion": "v1",
                "kind": "Event",
                "metadata": {
                    "name": f"{meta['name']}.{uuid.uuid4().hex[:16]}",
                    "namespace": meta["namespace"],
                },
                "involvedObject": {
                    "kind": "Pod",
                    "apiVersion": "v1",
                    "name": meta["name"],
                    "namespace": meta["namespace"],
                    "uid": meta["uid"],
                },
                "reason": reason,
                "message": message,
                "type": "Warning",
                "count": 1,
                "firstTimestamp": now_text(now),
                "lastTimestamp": now_text(now),
                "source": {"component": "default-scheduler"},
            }
        )
