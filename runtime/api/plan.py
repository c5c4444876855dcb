"""Pure functions shared by the Pulumi program (to show the plan) and the runtime (to act on it)."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from decimal import ROUND_FLOOR, Decimal

from runtime.api import names
from runtime.api.core import NodeSelector, Taint
from runtime.api.namespaceoffloading import NamespaceMappingStrategy
from runtime.api.quantities import parse_quantity
from runtime.api.selectors import selector_matches


def twin_namespace_name(
    namespace: str,
    strategy: NamespaceMappingStrategy,
    home_cluster_id: str,
    remote_namespace_name: str | None = None,
) -> str:
    """The name of a namespace's twin in a foreign cluster (docs/offloading.md)."""
    if strategy is NamespaceMappingStrategy.DEFAULT_NAME:
        return f"{namespace}-{home_cluster_id}"
    if strategy is NamespaceMappingStrategy.ENFORCE_SAME_NAME:
        return namespace
    if not remote_namespace_name:
        raise ValueError("namespaceMappingStrategy SelectedName requires remoteNamespaceName")
    return remote_namespace_name


def virtual_node_labels(foreign_cluster_id: str, suggested: Mapping[str, str]) -> dict[str, str]:
    """Labels of a virtual node: what the foreign cluster suggests, then the two that identify it."""
    return {
        **suggested,
        names.TYPE_LABEL: names.VIRTUAL_NODE_TYPE,
        names.REMOTE_CLUSTER_ID_LABEL: foreign_cluster_id,
    }


def selection_labels(
    declared: Mapping[str, Mapping[str, str]], node_labels: Mapping[str, Mapping[str, str]]
) -> dict[str, dict[str, str]]:
    """The labels a cluster selector is matched against, per foreign cluster id (docs/offloading.md): those of its
    virtual Node at home (suggested by the foreign cluster, plus any an administrator added), or, while
    the Node does not exist yet, the labels its VirtualNode declares. `declared`: cluster id -> the
    VirtualNode's labels; `node_labels`: cluster id -> its Node's labels."""
    return {
        cluster_id: dict(node_labels.get(cluster_id) or virtual_node_labels(cluster_id, labels))
        for cluster_id, labels in declared.items()
    }


def virtual_node_taints(extra: list[Taint]) -> list[Taint]:
    base = Taint(key=names.VIRTUAL_NODE_TAINT_KEY, value=names.VIRTUAL_NODE_TAINT_VALUE, effect="NoExecute")
    return [base, *[t for t in extra if t.key != base.key]]


def selected_clusters(selector: NodeSelector, cluster_labels: Mapping[str, Mapping[str, str]]) -> list[str]:
    """The foreign cluster ids whose virtual-node labels the selector matches, in the given order."""
    return [cluster_id for cluster_id, labels in cluster_labels.items() if selector_matches(selector, labels)]


@dataclass(frozen=True)
class SharedResources:
    capacity: dict[str, str]
    rounded_to_zero: list[str]  # offered, but the share is less than one unit: made visible, not hidden


_MILLI_RESOURCES = {"cpu"}


def _format(resource: str, amount: Decimal) -> str:
    if resource in _MILLI_RESOURCES:
        millis = int((amount * 1000).to_integral_value(ROUND_FLOOR))
        return str(millis // 1000) if millis % 1000 == 0 else f"{millis}m"
    return str(int(amount.to_integral_value(ROUND_FLOOR)))


def shared_resources(
    available: Mapping[str, str], sharing_percentage: int, fixed: Mapping[str, str] | None = None
) -> SharedResources:
    """What a virtual node offers: percentage x available (docs/offloading.md), fixed amounts winning.

    Counts never become fractional (floor); cpu keeps millicores. 100 cpu at 90% -> "90";
    1 GPU at 90% -> 0, listed in `rounded_to_zero` so the caller can report it.
    """
    fixed = fixed or {}
    capacity: dict[str, str] = {}
    zeroed: list[str] = []
    for resource, quantity in available.items():
        if resource in fixed:
            continue
        amount = parse_quantity(quantity) or Decimal(0)
        share = amount * Decimal(sharing_percentage) / Decimal(100)
        text = _format(resource, share)
        capacity[resource] = text
        if amount > 0 and parse_quantity(text) == 0:
            zeroed.append(resource)
    for resource, quantity in fixed.items():
        parse_quantity(quantity)  # raises on a malformed quantity
        capacity[resource] = quantity
    return SharedResources(capacity=dict(sorted(capacity.items())), rounded_to_zero=sorted(zeroed))
