"""A local Kubernetes API server for the tests: the subset the ``kubernetes`` driver uses.

No real API server can run on the machines that test this project, so this one answers
the calls the driver (rental/providers/kubernetes.py) makes, over HTTP on 127.0.0.1:

    GET  /api/v1/nodes                                  (labelSelector)
    GET  /api/v1/namespaces/{ns}     POST /api/v1/namespaces
    POST /api/v1/namespaces/{ns}/{pods|services|secrets}
    GET  /api/v1/namespaces/{ns}/{pods|services|secrets}[/{name}]   (labelSelector)
    DELETE /api/v1/namespaces/{ns}/{pods|services|secrets}/{name}
    GET  /api/v1/{pods|services}                        (all namespaces, labelSelector)
    GET  /api/v1/namespaces/{ns}/events                 (fieldSelector involvedObject.*)

Every request body is held to the official client's model of it
(devcloud/kubernetes_models.py: unknown fields, wrong types and missing required fields
are refused with 422 ``Invalid``), as the answers are in the tests. Requests need
``Authorization: Bearer <token>`` with a token of ``tokens`` (401 otherwise). Errors are
the API's ``Status`` objects. The cluster's state and its scheduler are in
devcloud/kubernetes_cluster.py.

    cluster = start([NodeSpec("gpu-a", 2), NodeSpec("gpu-b", 2)], tokens={"t0k"})
    cluster.inject(status=500, times=2)               # the next two requests fail
    cluster.inject(status=403, method="POST", resource="pods")
    cluster.delay(2.0, resource="pods")              # the next pods request waits 2 s
    cluster.requests                                 # (method, path) of each request
    cluster.reset(); cluster.stop()
"""

from __future__ import annotations

import json
import re
import threading
import time
from dataclasses import dataclass
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any
from urllib.parse import parse_qs, urlsplit

from devcloud.kubernetes_cluster import ApiError, Cluster, NodeSpec, labels_match
from devcloud.kubernetes_models import InvalidBody, check

HOST = "127.0.0.1"
MODELS = {
    "namespaces": "V1Namespace",
    "pods": "V1Pod",
    "services": "V1Service",
    "secrets": "V1Secret",
}
LIST_KINDS = {
    "pods": ("PodList", "V1PodList"),
    "services": ("ServiceList", "V1ServiceList"),
    "secrets": ("SecretList", "V1SecretList"),
    "nodes": ("NodeList", "V1NodeList"),
    "events": ("EventList", "CoreV1EventList"),
}
_PATH = re.compile(
    r"/api/v1(?:/namespaces/(?P<ns>[^/]+))?(?:/(?P<kind>nodes|pods|services|secrets|events))?"
    r"(?:/(?P<name>[^/]+))?"
)
_STATUS_REASONS = {
    401: "Unauthorized",
    403: "Forbidden",
    404: "NotFound",
    409: "AlreadyExists",
    422: "Invalid",
    429: "TooManyRequests",
    500: "InternalError",
    503: "ServiceUnavailable",
}


@dataclass
class _Fault:
    status: int
    method: str | None
    resource: str | None
    remaining: int
    message: str


@dataclass
class _Delay:
    seconds: float
    resource: str | None
    remaining: int


class LocalKubernetes:
    """The server and its controls; thread-safe."""

    def __init__(self, nodes: list[NodeSpec], tokens: set[str], start_delay_s: float) -> None:
        self.cluster = Cluster(nodes, start_delay_s=start_delay_s)
        self._lock = threading.Lock()  # faults, delays and the log; the cluster has its own
        self.tokens = set(tokens)
        self.requests: list[tuple[str, str]] = []
        self.bodies: list[tuple[str, str, Any]] = []  # (method, path, answer body) of each
        self._faults: list[_Fault] = []
        self._delays: list[_Delay] = []
        self._initial_nodes = list(nodes)
        self._server: ThreadingHTTPServer | None = None

    @property
    def url(self) -> str:
        assert self._server is not None
        return f"http://{HOST}:{self._server.server_address[1]}"

    def inject(
        self,
        *,
        status: int,
        method: str | None = None,
        resource: str | None = None,
        times: int = 1,
        message: str = "injected fault",
    ) -> None:
        """The next ``times`` requests (of ``method`` on ``resource`` when given: "pods",
        "namespaces", ...) are answered with ``status`` and a ``Status`` body."""
        with self._lock:
            self._faults.append(_Fault(status, method, resource, times, message))

    def delay(self, seconds: float, *, resource: str | None = None, times: int = 1) -> None:
        """The next ``times`` requests (on ``resource`` when given) wait ``seconds`` first."""
        with self._lock:
            self._delays.append(_Delay(seconds, resource, times))

    def set_nodes(self, nodes: list[NodeSpec]) -> None:
        self.cluster.set_nodes(nodes)

    def reset(self) -> None:
        """An empty cluster on the starting nodes: no objects, faults, delays or log."""
        with self._lock:
            delay = self.cluster.start_delay_s
            self.cluster = Cluster(self._initial_nodes, start_delay_s=delay)
            self._faults.clear()
            self._delays.clear()
            self.requests.clear()
            self.bodies.clear()

    def stop(self) -> None:
        if self._server is not None:
            self._server.shutdown()
            self._server.server_close()

    # -- answering ---------------------------------------------------------------------

    def _take(self, items: list, method: str, resource: str) -> Any:
        with self._lock:
            for item in items:
                wanted = item.resource in (None, resource)
                verb = getattr(item, "method", None) in (None, method)
                if item.remaining > 0 and wanted and verb:
                    item.remaining -= 1
                    return item
        return None

    def answer(self, method: str, target: str, headers: Any, raw: bytes) -> tuple[int, dict]:
        """The status and body of one request; every answer is kept in ``bodies``."""
        status, body = self._answer(method, target, headers, raw)
        with self._lock:
            self.bodies.append((method, urlsplit(target).path, body))
        return status, body

    def _answer(self, method: str, target: str, headers: Any, raw: bytes) -> tuple[int, dict]:
        url = urlsplit(target)
        query = {key: values[-1] for key, values in parse_qs(url.query).items()}
        match = _PATH.fullmatch(url.path.rstrip("/"))
        resource = ""
        if match:
            namespaced = match.group("ns") or match.group("name") == "namespaces"
            resource = match.group("kind") or ("namespaces" if namespaced else "")
        with self._lock:
            self.requests.append((method, url.path))
        delay = self._take(self._delays, method, resource)
        if delay is not None:
            time.sleep(delay.seconds)
        auth = headers.get("Authorization", "")
        if not auth.startswith("Bearer ") or auth[len("Bearer ") :] not in self.tokens:
            return 401, ApiError(401, "Unauthorized", "Unauthorized").status()
        fault = self._take(self._faults, method, resource)
        if fault is not None:
            reason = _STATUS_REASONS.get(fault.status, "InternalError")
            return fault.status, ApiError(fault.status, reason, fault.message).status()
        try:
            with self.cluster.lock:
                body = self._route(method, url.path.rstrip("/"), match, query, raw)
        except ApiError as error:
            return error.code, error.status()
        except InvalidBody as error:
            return 422, ApiError(422, "Invalid", f"invalid body: {error}").status()
        return (201 if method == "POST" else 200), body

    def _route(self, method: str, path: str, match: Any, query: dict, raw: bytes) -> dict:
        cluster = self.cluster
        if path == "/api/v1/namespaces" and method == "POST":
            return cluster.create_namespace(self._body(raw, "namespaces"))
        if match is None:
            raise ApiError(404, "NotFound", "the server could not find the requested resource")
        ns, kind, name = match.group("ns"), match.group("kind"), match.group("name")
        selector = query.get("labelSelector", "")
        if kind == "nodes" and not ns and not name and method == "GET":
            nodes = [
                node for _name, node in sorted(cluster.nodes.items()) if _selects(node, selector)
            ]
            return _listed("nodes", nodes)
        if ns and not kind and not name and method == "GET":
            return cluster.namespace(ns)
        if kind == "events" and ns and not name and method == "GET":
            return _listed("events", cluster.list_events(ns, query.get("fieldSelector", "")))
        if kind in ("pods", "services", "secrets"):
            if method == "POST" and ns and not name:
                return cluster.create(kind, ns, self._body(raw, kind))
            if method == "GET" and not name and (ns or kind != "secrets"):
                return _listed(kind, cluster.list(kind, ns, selector))
            if method == "GET" and ns and name:
                return cluster.get(kind, ns, name)
            if method == "DELETE" and ns and name:
                return cluster.delete(kind, ns, name)
        raise ApiError(404, "NotFound", "the server could not find the requested resource")

    @staticmethod
    def _body(raw: bytes, kind: str) -> dict:
        try:
            data = json.loads(raw or b"null")
        except ValueError:
            raise InvalidBody("", "not JSON") from None
        if not isinstance(data, dict):
            raise InvalidBody("", "expected an object")
        check(data, MODELS[kind])
        return data


def _selects(item: dict, selector: str) -> bool:
    return labels_match(item["metadata"].get("labels") or {}, selector)


def _listed(kind: str, items: list[dict]) -> dict:
    return {
        "apiVersion": "v1",
        "kind": LIST_KINDS[kind][0],
        "metadata": {"resourceVersion": "1"},
        "items": items,
    }


def _handler(owner: LocalKubernetes) -> type[BaseHTTPRequestHandler]:
    class Handler(BaseHTTPRequestHandler):
        protocol_version = "HTTP/1.1"
        disable_nagle_algorithm = True  # headers and body go out in two writes

        def _serve(self) -> None:
            length = int(self.headers.get("Content-Length") or 0)
            raw = self.rfile.read(length) if length else b""
            status, body = owner.answer(self.command, self.path, self.headers, raw)
            data = json.dumps(body).encode()
            self.send_response(status)
            self.send_header("Content-Type", "application/json")
            self.send_header("Content-Length", str(len(data)))
            self.end_headers()
            self.wfile.write(data)

        do_GET = do_POST = do_DELETE = _serve

        def log_message(self, format: str, *args: Any) -> None:
            pass

    return Handler


def start(
    nodes: list[NodeSpec] | None = None,
    *,
    tokens: set[str] | frozenset[str] = frozenset({"local-token"}),
    port: int = 0,
    start_delay_s: float = 0.2,
) -> LocalKubernetes:
    """A local API server on 127.0.0.1 (a free port by default), serving in a thread."""
    nodes = nodes if nodes is not None else [NodeSpec("gpu-a", 2), NodeSpec("gpu-b", 2)]
    local = LocalKubernetes(nodes, set(tokens), start_delay_s)
    server = ThreadingHTTPServer((HOST, port), _handler(local))
    server.daemon_threads = True
    local._server = server
    threading.Thread(
        target=server.serve_forever, args=(0.05,), name="local-kubernetes", daemon=True
    ).start()
    return local
