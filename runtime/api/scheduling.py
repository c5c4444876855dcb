"""What the scheduler checks of a pod against a node before it binds it there: the pod's nodeSelector,
its required node affinity, and the node's taints against its tolerations (the rules of kube-scheduler's
NodeAffinity and TaintToleration filters). Read by the on-demand controller (a virtual node that would
fit a pod starved at home) and by `liqo-stack preview pod` (where a pod not yet bound may go).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from runtime.api.core import NodeSelectorRequirement
from runtime.api.selectors import requirement_matches

# Taint effects that keep a pod off a node (PreferNoSchedule only weighs against it).
BLOCKING_EFFECTS = ("NoSchedule", "NoExecute")


def affinity_mismatch(spec: Mapping[str, Any], node_name: str, labels: Mapping[str, str]) -> str | None:
    """Why the pod's nodeSelector or required node affinity keeps it off the node; None: they allow it.
    Terms are ORed; in a term, expressions on the node's labels and fields on its name are ANDed, and a
    term with neither matches no node. Raises pydantic.ValidationError on a requirement the API
    server would refuse (an unknown operator)."""
    unmatched = [f"{k}={v}" for k, v in (spec.get("nodeSelector") or {}).items() if labels.get(k) != v]
    if unmatched:
        return f"its nodeSelector {', '.join(unmatched)} is not among the labels of {node_name}"
    required = ((spec.get("affinity") or {}).get("nodeAffinity") or {}).get(
        "requiredDuringSchedulingIgnoredDuringExecution"
    )
    if required is not None and not any(
        _term_matches(term, node_name, labels) for term in required.get("nodeSelectorTerms") or []
    ):
        return f"its required node affinity matches no label of {node_name}"
    return None


def _term_matches(term: Mapping[str, Any], node_name: str, labels: Mapping[str, str]) -> bool:
    expressions = [NodeSelectorRequirement.model_validate(r) for r in term.get("matchExpressions") or []]
    fields = [NodeSelectorRequirement.model_validate(r) for r in term.get("matchFields") or []]
    if not expressions and not fields:
        return False
    node_fields = {"metadata.name": node_name}
    return all(requirement_matches(r, labels) for r in expressions) and all(
        requirement_matches(r, node_fields) for r in fields
    )


def tolerates(toleration: Mapping[str, Any], taint: Mapping[str, Any]) -> bool:
    """The effect (empty: any), then Exists on the key (empty: any key) or Equal (the default) on key
    and value; any other operator tolerates nothing."""
    if toleration.get("effect") and toleration.get("effect") != taint.get("effect"):
        return False
    operator = toleration.get("operator") or "Equal"
    if operator == "Exists":
        return not toleration.get("key") or toleration.get("key") == taint.get("key")
    if operator != "Equal":
        return False
    return toleration.get("key") == taint.get("key") and (toleration.get("value") or "") == (taint.get("value") or "")


def untolerated_taint(
    tolerations: Sequence[Mapping[str, Any]], taints: Sequence[Mapping[str, Any]]
) -> Mapping[str, Any] | None:
    """The first of the node's taints that keeps the pod off it: NoSchedule or NoExecute, tolerated by none."""
    return next(
        (
            taint
            for taint in taints
            if taint.get("effect") in BLOCKING_EFFECTS and not any(tolerates(t, taint) for t in tolerations)
        ),
        None,
    )
