"""How the ``kubernetes`` driver names things in a cluster, and reads its nodes' GPUs.

Pure functions and data, no client: object names from an idempotency key, a namespace
per project, the portal's tags as labels (sanitised to label syntax, the raw tags kept in
an annotation), offerings' instance types (``k8s-2x-a100-80gb``), and a node's GPUs
mapped to the catalog from GPU feature discovery's labels.
"""

from __future__ import annotations

import hashlib
import json
import re
from dataclasses import dataclass

from rental.providers.base import TAG_PREFIX, TAG_PROJECT, ProviderError, ProviderErrorKind
from rental.providers.ssh_host import catalog_name, model_slug

GPU_RESOURCE = "nvidia.com/gpu"
PRODUCT_LABEL = "nvidia.com/gpu.product"  # set by NVIDIA's GPU feature discovery
MEMORY_LABEL = "nvidia.com/gpu.memory"  # MiB, also GPU feature discovery's
HOSTNAME_LABEL = "kubernetes.io/hostname"
MANAGED_LABEL = "app.kubernetes.io/managed-by"
MANAGED_VALUE = "gpu-portal"
POD_LABEL = "gpu-portal.io/pod"  # what the SSH service selects
TAGS_ANNOTATION = "gpu-portal.io/tags"  # the raw tags, JSON: [[key, value], ...]
TYPE_ANNOTATION = "gpu-portal.io/instance-type"
NAMESPACE_PREFIX = "gpu-portal-"
INSTANCE_TYPE = re.compile(r"k8s-(\d+)x-([a-z0-9][a-z0-9-]*)")
_LABEL_MAX = 63
_NOT_LABEL = re.compile(r"[^A-Za-z0-9_.-]+")
_NOT_DNS = re.compile(r"[^a-z0-9-]+")


def instance_type(model_name: str, count: int) -> str:
    """The offering's instance type for ``count`` GPUs of the catalog model
    ``model_name``: ``instance_type("A100 80GB", 2)`` → ``"k8s-2x-a100-80gb"``."""
    return f"k8s-{count}x-{model_slug(model_name)}"


def parse_type(value: str) -> tuple[int, str]:
    """``"k8s-2x-a100-80gb"`` → ``(2, "a100-80gb")``; raises ``invalid`` otherwise."""
    match = INSTANCE_TYPE.fullmatch(value)
    if not match or int(match.group(1)) < 1:
        raise ProviderError(
            ProviderErrorKind.INVALID,
            f"Instance type {value!r} is not a Kubernetes pool type like k8s-2x-a100-80gb.",
        )
    return int(match.group(1)), match.group(2)


def _digest(text: str, length: int) -> str:
    return hashlib.sha256(text.encode()).hexdigest()[:length]


def object_name(idempotency_key: str) -> str:
    """The pod's (and its service's and secret's) name: ``gp-`` and 20 hex digits of the
    key's hash, so the same key always names the same pod."""
    return f"gp-{_digest(idempotency_key, 20)}"


def _fit(text: str, pattern: re.Pattern[str], raw: str) -> str:
    """``text`` cleaned by ``pattern``, ends trimmed to alphanumerics, at most 63 long; a
    changed or cut value ends in a hash of ``raw``, so two raw values never meet."""
    cleaned = pattern.sub("-", text)
    cleaned = re.sub(r"^[^A-Za-z0-9]+|[^A-Za-z0-9]+$", "", cleaned)
    if cleaned == raw and len(cleaned) <= _LABEL_MAX:
        return cleaned
    head = re.sub(r"[^A-Za-z0-9]+$", "", cleaned[: _LABEL_MAX - 11])
    return f"{head}-{_digest(raw, 10)}" if head else _digest(raw, 10)


def namespace_for(tags: tuple[tuple[str, str], ...]) -> str:
    """``gpu-portal-<project slug>`` for the project tag's value (``shared`` without one)."""
    project = next((value for key, value in tags if key == TAG_PROJECT), "") or "shared"
    room = _LABEL_MAX - len(NAMESPACE_PREFIX)
    slug = _NOT_DNS.sub("-", project.lower()).strip("-")
    if slug != project or len(slug) > room:
        slug = f"{slug[: room - 11].strip('-')}-{_digest(project, 10)}".strip("-")
    return NAMESPACE_PREFIX + slug


def label_key(tag_key: str) -> str:
    """A tag's label key: ``gpu-portal:project`` → ``gpu-portal.io/project``; any other
    tag → ``tag.gpu-portal.io/<sanitised key>``."""
    if tag_key.startswith(TAG_PREFIX):
        rest = tag_key[len(TAG_PREFIX) :]
        return f"gpu-portal.io/{_fit(rest, _NOT_LABEL, rest)}"
    return f"tag.gpu-portal.io/{_fit(tag_key, _NOT_LABEL, tag_key)}"


def label_value(value: str) -> str:
    """A tag's value in label syntax (at most 63 characters, hashed where it had to
    change); the raw value is in the tags annotation."""
    return _fit(value, _NOT_LABEL, value) if value else ""


def labels_for(tags: dict[str, str], name: str) -> dict[str, str]:
    labels = {label_key(key): label_value(value) for key, value in tags.items()}
    labels.update({MANAGED_LABEL: MANAGED_VALUE, POD_LABEL: name})
    return labels


def selector(tag_filter: dict[str, str]) -> str:
    """The label selector of the portal's objects carrying ``tag_filter`` (it narrows the
    answer; the raw tags decide)."""
    terms = [f"{MANAGED_LABEL}={MANAGED_VALUE}"]
    terms += [f"{label_key(key)}={label_value(value)}" for key, value in sorted(tag_filter.items())]
    return ",".join(terms)


def tags_annotation(tags: dict[str, str]) -> str:
    return json.dumps(sorted([key, value] for key, value in tags.items()))


def tags_from(annotations: dict[str, str] | None) -> tuple[tuple[str, str], ...]:
    try:
        pairs = json.loads((annotations or {}).get(TAGS_ANNOTATION, "[]"))
        return tuple(sorted((str(key), str(value)) for key, value in pairs))
    except (ValueError, TypeError):
        return ()


@dataclass(frozen=True)
class KubernetesNode:
    """One node as the driver reads it: its GPUs (``allocatable`` of ``nvidia.com/gpu``,
    ``allocated`` to pods that have not ended), their product as GPU feature discovery
    labels it and the catalog's name of that card ("" without the label), and the node's
    allocatable CPUs and memory (whole; 0 where the node does not say)."""

    name: str
    ready: bool
    product: str
    memory_mib: int
    model: str
    allocatable: int
    allocated: int
    address: str
    vcpus: int = 0
    memory_gib: int = 0

    @property
    def free(self) -> int:
        return max(self.allocatable - self.allocated, 0) if self.ready else 0


def node_model(labels: dict[str, str] | None) -> tuple[str, int, str]:
    """(product label, memory MiB, catalog name) of a node's GPUs:
    ``NVIDIA-A100-SXM4-80GB`` → ``A100 80GB``, ``NVIDIA-GeForce-RTX-4090`` with 24564 MiB
    → ``RTX 4090 24GB``."""
    labels = labels or {}
    product = labels.get(PRODUCT_LABEL, "")
    try:
        memory = int(labels.get(MEMORY_LABEL, "0"))
    except ValueError:
        memory = 0
    return product, memory, catalog_name(product, memory) if product else ""


def gpu_count(quantity: str | None) -> int:
    """An ``nvidia.com/gpu`` quantity (whole devices) as a number; 0 for none or nonsense."""
    try:
        return int(quantity or 0)
    except ValueError:
        return 0


def offerings_wanted(nodes: list[KubernetesNode]) -> dict[tuple[str, int], list[str]]:
    """(catalog model, k) → the ready nodes with at least k allocatable GPUs of it, for
    k = 1 … the most of that model on one node: the pool's offerings, ``instance_type``
    naming each (as own servers' are kept in step with their hosts)."""
    most: dict[str, int] = {}
    for node in nodes:
        if node.model:
            most[node.model] = max(most.get(node.model, 0), node.allocatable)
    return {
        (model, k): sorted(
            node.name
            for node in nodes
            if node.model == model and node.ready and node.allocatable >= k
        )
        for model, top in most.items()
        for k in range(1, top + 1)
    }
