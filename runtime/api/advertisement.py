"""ResourceAdvertisement: what a foreign cluster offers one home cluster, published in its tenant namespace."""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from decimal import Decimal
from typing import Any, ClassVar

from pydantic import Field

from runtime.api import names
from runtime.api._base import ApiModel, CrdInfo, CustomObject, PrinterColumn
from runtime.api.nodeaccess import NodeRules
from runtime.api.quantities import parse_quantity


class NodeOffer(ApiModel):
    """What one physical node offers: a virtual node standing for a node pool sums those its
    offloadingPatch.nodeSelector matches (by these labels)."""

    name: str
    labels: dict[str, str] = Field(default_factory=dict)
    resources: dict[str, str] = Field(default_factory=dict)


class ResourceAdvertisementSpec(ApiModel):
    cluster_id: str = Field(alias="clusterID", description="the foreign cluster that advertises")
    # allocatable of its physical nodes minus the requests of pods not offloaded by this home cluster
    resources: dict[str, str] = Field(default_factory=dict)
    labels: dict[str, str] = Field(default_factory=dict, description="labels suggested for the virtual node")
    # the same per node (a list: a merge patch replaces it whole, so a label a node lost goes too)
    nodes: list[NodeOffer] = Field(default_factory=list)
    cordoned: bool = Field(
        default=False, description="the foreign cluster cordoned this home (its Quota): no new pod of it starts"
    )


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


# -- what a cluster offers (docs/offloading.md): pure, for the foreign agent and for the stack's preview checks --


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


def node_taints(node: Any) -> list[dict[str, Any]]:
    return [{"key": t.key, "value": t.value, "effect": t.effect} for t in (node.spec and node.spec.taints) or []]


def available_by_node(
    home_id: str, nodes: list[Any], loads: Iterable[PodLoad], rules: NodeRules | None = None
) -> dict[str, dict[str, Decimal]]:
    """Per Ready physical node that the home may use (`rules`: the nodes its Quota lets it use; None:
    any): its allocatable minus the requests of the pods on it that `home_id` did not offload (never
    below zero)."""
    available: dict[str, dict[str, Decimal]] = {}
    for node in nodes:
        usable = rules is None or rules.admits_node(node.metadata.labels or {}, node_taints(node))
        if usable and _is_physical_and_ready(node):
            allocatable = (node.status and node.status.allocatable) or {}
            available[node.metadata.name] = {r: parse_quantity(q) or Decimal(0) for r, q in allocatable.items()}
    for load in loads:
        on_node = available.get(load.node)
        if on_node is not None and load.origin != home_id:
            for resource, amount in load.requests:
                if resource in on_node:
                    on_node[resource] -= amount
    return {node: {r: max(a, Decimal(0)) for r, a in free.items()} for node, free in available.items()}


def summed(per_node: Iterable[Mapping[str, Decimal]]) -> dict[str, Decimal]:
    total: dict[str, Decimal] = defaultdict(Decimal)
    for free in per_node:
        for resource, amount in free.items():
            total[resource] += amount
    return dict(total)


def available_for(
    home_id: str, nodes: list[Any], loads: Iterable[PodLoad], rules: NodeRules | None = None
) -> dict[str, Decimal]:
    return summed(available_by_node(home_id, nodes, loads, rules).values())


def node_offers(nodes: list[Any], per_node: Mapping[str, Mapping[str, Decimal]]) -> list[dict[str, Any]]:
    """The advertisement's `nodes`: each Ready physical node's labels and free resources, by name."""
    labels = {n.metadata.name: dict(n.metadata.labels or {}) for n in nodes}
    return [
        {
            "name": name,
            "labels": labels.get(name, {}),
            "resources": {r: as_quantity(a) for r, a in sorted(free.items())},
        }
        for name, free in sorted(per_node.items())
    ]


def pool_offer(spec: Mapping[str, Any], node_selector: Mapping[str, str] | None) -> dict[str, str]:
    """What an advertisement (its spec, as stored) offers the virtual node of a node pool: the sum
    over the nodes whose labels `node_selector` matches; None or empty: the whole cluster's."""
    if not node_selector:
        return dict(spec.get("resources") or {})
    picked = [
        {r: parse_quantity(q) or Decimal(0) for r, q in (offer.get("resources") or {}).items()}
        for offer in spec.get("nodes") or []
        if all((offer.get("labels") or {}).get(k) == v for k, v in node_selector.items())
    ]
    return {r: as_quantity(a) for r, a in sorted(summed(picked).items())}


# The resources a pod's fit on one foreign node is judged by, each with its label and unit (a label
# value is an integer, so `Gt` can compare it: millicores of cpu, bytes of memory).
LARGEST_POD_LABELS = {"cpu": (names.LARGEST_POD_CPU_LABEL, 1000), "memory": (names.LARGEST_POD_MEMORY_LABEL, 1)}


def largest_pod_labels(
    spec: Mapping[str, Any],
    node_selector: Mapping[str, str] | None,
    sharing_percentage: int,
    capacity: Mapping[str, str],
) -> dict[str, str]:
    """The virtual node's largest-pod labels: per resource, the most any one foreign node of its pool
    has free (the advertisement's `nodes`), times the share, never above the node's `capacity`. An
    advertisement without per-node figures (an older agent) gives the capacity: no worse than the sum."""
    offers = [
        offer
        for offer in spec.get("nodes") or []
        if all((offer.get("labels") or {}).get(k) == v for k, v in (node_selector or {}).items())
    ]
    labels: dict[str, str] = {}
    for resource, (label, unit) in LARGEST_POD_LABELS.items():
        ceiling = parse_quantity(capacity.get(resource, "0")) or Decimal(0)
        if offers:
            free = max(parse_quantity((o.get("resources") or {}).get(resource, "0")) or Decimal(0) for o in offers)
            largest = min(free * Decimal(sharing_percentage) / Decimal(100), ceiling)
        else:
            largest = ceiling
        labels[label] = str(int(largest * unit))
    return labels


# docs/offloading.md: the labels a foreign cluster suggests for its virtual node ("geographical region, underlying
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
    cluster_id: str,
    current: Any,
    resources: dict[str, str],
    labels: dict[str, str],
    nodes: list[dict[str, Any]] | None = None,
    cordoned: bool = False,
) -> dict[str, Any] | None:
    """The spec to write over `current` (the stored advertisement, a mapping, or None); None: it already
    says it. Keys gone since are null, which removes them in a merge patch; `nodes` is replaced whole."""
    spec = (current or {}).get("spec") or {}
    nodes = nodes or []
    if (
        current is not None
        and spec.get("resources") == resources
        and (spec.get("labels") or {}) == labels
        and (spec.get("nodes") or []) == nodes
        and bool(spec.get("cordoned")) == cordoned
    ):
        return None
    gone_resources = set(spec.get("resources") or {}) - set(resources)
    gone_labels = set(spec.get("labels") or {}) - set(labels)
    return {
        "clusterID": cluster_id,
        "resources": {**resources, **dict.fromkeys(gone_resources)},
        "labels": {**labels, **dict.fromkeys(gone_labels)},
        "nodes": nodes,
        "cordoned": cordoned,
    }


def as_quantity(amount: Decimal) -> str:
    if amount == amount.to_integral_value():
        return str(int(amount))
    return f"{int(amount * 1000)}m"
