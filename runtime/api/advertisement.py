"""ResourceAdvertisement: what a foreign cluster offers one home cluster, published in its tenant namespace."""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Iterable
from dataclasses import dataclass
from decimal import Decimal
from typing import Any, ClassVar

from pydantic import Field

from runtime.api import names
from runtime.api._base import ApiModel, CrdInfo, CustomObject, PrinterColumn
from runtime.api.quantities import parse_quantity


class ResourceAdvertisementSpec(ApiModel):
    cluster_id: str = Field(alias="clusterID", description="the foreign cluster that advertises")
    # allocatable of its physical nodes minus the requests of pods not offloaded by this home cluster
    resources: dict[str, str] = Field(default_factory=dict)
    labels: dict[str, str] = Field(default_factory=dict, description="labels suggested for the virtual node")


class ResourceAdvertisement(CustomObject):
    crd: ClassVar[CrdInfo] = CrdInfo(
        kind="ResourceAdvertisement",
        plural="resourceadvertisements",
        short_names=("adv",),
        description="Resources a foreign cluster offers to one home cluster.",
        printer_columns=(
            PrinterColumn("ClusterID", ".spec.clusterID"),
            PrinterColumn("CPU", ".spec.resources.cpu"),
            PrinterColumn("Memory", ".spec.resources.memory"),
            PrinterColumn("Age", ".metadata.creationTimestamp", "date"),
        ),
    )

    spec: ResourceAdvertisementSpec


# -- what a cluster offers (seed 004): pure, for the foreign agent and for the stack's preview checks --


def _is_physical_and_ready(node: Any) -> bool:
    labels = node.metadata.labels or {}
    if labels.get(names.TYPE_LABEL) == names.VIRTUAL_NODE_TYPE or (node.spec and node.spec.unschedulable):
        return False
    conditions = (node.status.conditions if node.status else None) or []
    return any(c.type == "Ready" and c.status == "True" for c in conditions)


def pod_requests(pod: Any) -> dict[str, Decimal]:
    """What a pod holds on its node: the sum of its containers' requests, at least the largest
    init container's (as the scheduler counts), and one `pods` slot."""
    spec = pod.spec
    totals: dict[str, Decimal] = defaultdict(Decimal)
    for container in spec.containers or []:
        for resource, quantity in ((container.resources and container.resources.requests) or {}).items():
            totals[resource] += parse_quantity(quantity) or Decimal(0)
    for container in spec.initContainers or []:
        for resource, quantity in ((container.resources and container.resources.requests) or {}).items():
            totals[resource] = max(totals[resource], parse_quantity(quantity) or Decimal(0))
    totals["pods"] += 1
    return totals


@dataclass(frozen=True, slots=True)
class PodLoad:
    """What one pod holds on a node, as the advertisement counts it."""

    node: str
    origin: str | None  # the home cluster that offloaded it (its origin label), None for a local pod
    requests: tuple[tuple[str, Decimal], ...]


def load_of(pod: Any) -> PodLoad | None:
    """The load of a pod placed on a node and not finished; None for any other pod."""
    node = pod.spec.nodeName if pod.spec else None
    if not node or (pod.status and pod.status.phase in ("Succeeded", "Failed")):
        return None
    origin = (pod.metadata.labels or {}).get(names.ORIGIN_LABEL)
    return PodLoad(node, origin, tuple(sorted(pod_requests(pod).items())))


def loads_of(pods: Iterable[Any]) -> list[PodLoad]:
    return [load for load in map(load_of, pods) if load is not None]


def available_for(home_id: str, nodes: list[Any], loads: Iterable[PodLoad]) -> dict[str, Decimal]:
    physical = {n.metadata.name for n in nodes if _is_physical_and_ready(n)}
    available: dict[str, Decimal] = defaultdict(Decimal)
    for node in nodes:
        if node.metadata.name in physical:
            for resource, quantity in ((node.status and node.status.allocatable) or {}).items():
                available[resource] += parse_quantity(quantity) or Decimal(0)
    for load in loads:
        if load.node in physical and load.origin != home_id:
            for resource, amount in load.requests:
                if resource in available:
                    available[resource] -= amount
    return {resource: max(amount, Decimal(0)) for resource, amount in available.items()}


# Seed 000: the labels a foreign cluster suggests for its virtual node ("geographical region, underlying
# provider"), read from the well-known topology labels of its nodes when all of them agree.
SUGGESTED_NODE_LABELS = ("topology.kubernetes.io/region", "topology.kubernetes.io/zone")


def suggested_labels(nodes: Iterable[Any]) -> dict[str, str]:
    """The topology labels every Ready physical node carries with one same value (a cluster spread
    over several zones suggests its region only)."""
    physical = [n for n in nodes if _is_physical_and_ready(n)]
    suggested: dict[str, str] = {}
    for key in SUGGESTED_NODE_LABELS:
        values = {(n.metadata.labels or {}).get(key) for n in physical}
        if len(values) == 1 and (value := values.pop()):
            suggested[key] = value
    return suggested


def advertisement_patch(
    cluster_id: str, current: Any, resources: dict[str, str], labels: dict[str, str]
) -> dict[str, Any] | None:
    """The spec to write over `current` (the stored advertisement, a mapping, or None); None: it already
    says it. Keys gone since are null, which removes them in a merge patch."""
    spec = (current or {}).get("spec") or {}
    if current is not None and spec.get("resources") == resources and (spec.get("labels") or {}) == labels:
        return None
    gone_resources = set(spec.get("resources") or {}) - set(resources)
    gone_labels = set(spec.get("labels") or {}) - set(labels)
    return {
        "clusterID": cluster_id,
        "resources": {**resources, **dict.fromkeys(gone_resources)},
        "labels": {**labels, **dict.fromkeys(gone_labels)},
    }


def as_quantity(amount: Decimal) -> str:
    if amount == amount.to_integral_value():
        return str(int(amount))
    return f"{int(amount * 1000)}m"
