"""On-demand offloading: which pods ask for a virtual node, and the settings of an on-demand namespace.

Pure functions on pods as dicts (the wire form) and on a namespace's annotations; the controller
(runtime.controllers.ondemand) acts on what they say.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from decimal import Decimal
from typing import Any

from runtime.api import names
from runtime.api.advertisement import pod_requests
from runtime.api.core import NodeSelector
from runtime.api.durations import DurationError, parse_duration
from runtime.api.namespaceoffloading import NamespaceOffloadingSpec, PodOffloadingStrategy
from runtime.api.quantities import parse_quantity
from runtime.api.scheduling import affinity_mismatch
from runtime.api.selectors import SelectorSyntaxError, parse_selector

DEFAULT_GRACE_PERIOD_SECONDS = 300.0
MAX_GRACE_PERIOD_SECONDS = 7 * 24 * 3600.0
BACKOFF_REASON = "OffloadingBackOff"  # a pod bound to a virtual node of a namespace not offloaded (docs/reflection.md)
TERMINAL_PHASES = ("Succeeded", "Failed")
VIRTUAL_NODE_TOLERATION = {
    "key": names.VIRTUAL_NODE_TAINT_KEY,
    "operator": "Equal",
    "value": names.VIRTUAL_NODE_TAINT_VALUE,
    "effect": names.VIRTUAL_NODE_TAINT_EFFECT,
}


def _requires_virtual(expression: Mapping[str, Any]) -> bool:
    return (
        expression.get("key") == names.TYPE_LABEL
        and expression.get("operator") == "In"
        and names.VIRTUAL_NODE_TYPE in (expression.get("values") or [])
    )


def asks_for_virtual_node(pod: Mapping[str, Any]) -> bool:
    """The pod can only run on a virtual node: `runtimeClassName: liqo`, a nodeSelector
    `liqo.io/type=virtual-node`, or a required node affinity whose every term asks for one."""
    spec = pod.get("spec") or {}
    if spec.get("runtimeClassName") == names.RUNTIME_CLASS_NAME:
        return True
    if (spec.get("nodeSelector") or {}).get(names.TYPE_LABEL) == names.VIRTUAL_NODE_TYPE:
        return True
    required = ((spec.get("affinity") or {}).get("nodeAffinity") or {}).get(
        "requiredDuringSchedulingIgnoredDuringExecution"
    )
    terms = (required or {}).get("nodeSelectorTerms") or []
    return bool(terms) and all(any(map(_requires_virtual, term.get("matchExpressions") or [])) for term in terms)


def _condition(pod: Mapping[str, Any], kind: str) -> Mapping[str, Any]:
    conditions = (pod.get("status") or {}).get("conditions") or []
    return next((c for c in conditions if c.get("type") == kind), {})


def waits_for_offloading(pod: Mapping[str, Any], virtual_nodes: Sequence[str] | set[str]) -> bool:
    """A pod that asks for a virtual node and cannot run without its namespace offloaded: bound to a
    virtual node and backing off (OffloadingBackOff), or not scheduled at all (the virtual nodes'
    taint, which only an offloaded namespace's pods tolerate)."""
    if not asks_for_virtual_node(pod) or (pod.get("metadata") or {}).get("deletionTimestamp"):
        return False
    status = pod.get("status") or {}
    if status.get("phase", "Pending") != "Pending":
        return False
    node = (pod.get("spec") or {}).get("nodeName")
    if node:
        return node in virtual_nodes and status.get("reason") == BACKOFF_REASON
    return _condition(pod, "PodScheduled").get("reason") == "Unschedulable"


def starved_at_home(pod: Mapping[str, Any]) -> bool:
    """A pod the scheduler left unscheduled for lack of resources (`Insufficient cpu`, ...), that asks
    for no virtual node (those are `waits_for_offloading`'s)."""
    if asks_for_virtual_node(pod) or (pod.get("metadata") or {}).get("deletionTimestamp"):
        return False
    if (pod.get("spec") or {}).get("nodeName") or (pod.get("status") or {}).get("phase", "Pending") != "Pending":
        return False
    scheduled = _condition(pod, "PodScheduled")
    return scheduled.get("reason") == "Unschedulable" and "Insufficient " in (scheduled.get("message") or "")


def _ready(node: Any) -> bool:
    conditions = (node.status.conditions if node.status else None) or []
    return any(c.type == "Ready" and c.status == "True" for c in conditions)


def free_on_virtual_nodes(nodes: Iterable[Any], pods: Iterable[Any]) -> dict[str, dict[str, Decimal]]:
    """Per Ready virtual node (lightkube Nodes): its allocatable minus the requests of the unfinished pods on it."""
    free = {
        node.metadata.name: {r: parse_quantity(q) or Decimal(0) for r, q in (node.status.allocatable or {}).items()}
        for node in nodes
        if _ready(node) and node.status.allocatable
    }
    for pod in pods:
        on_node = free.get(pod.spec.nodeName if pod.spec else "")
        if on_node is None or (pod.status and pod.status.phase in TERMINAL_PHASES):
            continue
        for resource, amount in pod_requests(pod).items():
            if resource in on_node:
                on_node[resource] -= amount
    return free


def virtual_node_fitting(pod: Any, nodes: Mapping[str, Any], free: Mapping[str, Mapping[str, Decimal]]) -> str | None:
    """The first virtual node (by name) whose labels the pod's nodeSelector and required node affinity
    allow and whose free resources hold its requests; None if none would."""
    wire = pod.to_dict()
    spec = wire.get("spec") or {}
    requests = pod_requests(pod)
    for name in sorted(free):
        if affinity_mismatch(spec, name, nodes[name].metadata.labels or {}) is not None:
            continue
        if all(free[name].get(resource, Decimal(0)) >= amount for resource, amount in requests.items()):
            return name
    return None


def runs_on_virtual_node(pod: Mapping[str, Any], virtual_nodes: Sequence[str] | set[str]) -> bool:
    """The pod is (or is about to be) a remote one: bound to a virtual node and not finished."""
    node = (pod.get("spec") or {}).get("nodeName")
    return bool(node) and node in virtual_nodes and (pod.get("status") or {}).get("phase") not in TERMINAL_PHASES


def claim_is_remote(claim: Mapping[str, Any], virtual_nodes: Sequence[str] | set[str]) -> bool:
    """A claim whose volume the scheduler put on a virtual node: reflected in a foreign cluster."""
    annotations = (claim.get("metadata") or {}).get("annotations") or {}
    return annotations.get(names.SELECTED_NODE_ANNOTATION) in virtual_nodes


def lacks_toleration(pod: Mapping[str, Any]) -> bool:
    """An unscheduled pod the virtual nodes' taint keeps off them (admitted before its namespace was offloaded)."""
    spec = pod.get("spec") or {}
    return not spec.get("nodeName") and VIRTUAL_NODE_TOLERATION not in (spec.get("tolerations") or [])


@dataclass
class OnDemandDefaults:
    """The stack's defaults (the controller-manager's flags), which a namespace's annotations override."""

    pod_offloading_strategy: PodOffloadingStrategy = PodOffloadingStrategy.LOCAL_AND_REMOTE
    cluster_selector: list[str] = field(default_factory=list)
    grace_period_seconds: float = DEFAULT_GRACE_PERIOD_SECONDS


@dataclass
class OnDemandSettings:
    spec: NamespaceOffloadingSpec
    grace_period_seconds: float


def settings_for(
    annotations: Mapping[str, str], defaults: OnDemandDefaults
) -> tuple[OnDemandSettings | None, list[str]]:
    """The namespace's on-demand settings, or None and what is wrong, each problem naming its annotation."""
    problems = []
    strategy = defaults.pod_offloading_strategy
    if (text := annotations.get(names.ON_DEMAND_STRATEGY_ANNOTATION)) is not None:
        try:
            strategy = PodOffloadingStrategy(text)
        except ValueError:
            allowed = ", ".join(s.value for s in PodOffloadingStrategy)
            problems.append(f"annotation {names.ON_DEMAND_STRATEGY_ANNOTATION}: {text!r} is not one of {allowed}")
    selector = NodeSelector()
    texts = defaults.cluster_selector
    if (text := annotations.get(names.ON_DEMAND_CLUSTER_SELECTOR_ANNOTATION)) is not None:
        texts = [text] if text.strip() else []
    try:
        selector = parse_selector(texts)
    except SelectorSyntaxError as err:
        problems.append(f"annotation {names.ON_DEMAND_CLUSTER_SELECTOR_ANNOTATION}: {err}")
    grace = defaults.grace_period_seconds
    if (text := annotations.get(names.ON_DEMAND_GRACE_PERIOD_ANNOTATION)) is not None:
        try:
            grace = parse_duration(text, minimum=1, maximum=MAX_GRACE_PERIOD_SECONDS)
        except DurationError as err:
            problems.append(f"annotation {names.ON_DEMAND_GRACE_PERIOD_ANNOTATION}: {err}")
    if problems:
        return None, problems
    spec = NamespaceOffloadingSpec(pod_offloading_strategy=strategy, cluster_selector=selector)
    return OnDemandSettings(spec, grace), []
