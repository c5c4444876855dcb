"""Where a pod of an offloaded namespace may run (docs/offloading.md), as constraints added to the pod.

- LocalAndRemote: the pod tolerates the virtual-node taint, so the scheduler may choose; with a
  cluster selector, virtual nodes outside it are excluded (physical nodes stay allowed).
- Local: nothing added: the taint keeps the pod on physical nodes.
- Remote: the pod tolerates the taint and must land on a virtual node the selector matches.
- `runtimeClassName: liqo` means Remote whatever the namespace's strategy.
- While the namespace is being unoffloaded, pods are admitted as local ones, untouched: docs/offloading.md's
  unoffload reschedules the offloaded pods locally, so their controllers' replacements must not fail.
The pod's own required node affinity is kept: each of its terms is ANDed with each of ours.
With the namespace's move-unfit-pods policy on (runtime.api.namespaceoffloading.move_unfit_after),
each virtual-node term also asks, by `Gt` on its largest-pod labels, for a virtual node with one
foreign node that fits the pod's cpu and memory requests: a pod moved off a virtual node none of
whose foreign nodes could run it does not come back to it while that holds (physical terms are
left alone, so Local and LocalAndRemote pods may still run at home).
"""

from __future__ import annotations

import copy
from collections.abc import Mapping
from typing import Any

from lightkube.resources.core_v1 import Pod

from runtime.api import NodeSelector, NodeSelectorRequirement, OffloadingPhase, PodOffloadingStrategy, names
from runtime.api.advertisement import LARGEST_POD_LABELS, pod_requests
from runtime.api.namespaceoffloading import effective_strategy
from runtime.api.selectors import requirement_matches

VIRTUAL = {"key": names.TYPE_LABEL, "operator": "In", "values": [names.VIRTUAL_NODE_TYPE]}
PHYSICAL = {"key": names.TYPE_LABEL, "operator": "DoesNotExist"}
TOLERATION = {
    "key": names.VIRTUAL_NODE_TAINT_KEY,
    "operator": "Equal",
    "value": names.VIRTUAL_NODE_TAINT_VALUE,
    "effect": names.VIRTUAL_NODE_TAINT_EFFECT,
}


def fit_requirements(pod: dict[str, Any]) -> list[dict[str, Any]]:
    """A virtual node one of whose foreign nodes fits the pod's requests: `Gt` (request - 1) on its
    largest-pod label per requested resource (`Gt` is strict, the labels are whole units)."""
    requests = pod_requests(Pod.from_dict({"metadata": {}, **pod}))
    return [
        {"key": label, "operator": "Gt", "values": [str(int(requests[resource] * unit) - 1)]}
        for resource, (label, unit) in LARGEST_POD_LABELS.items()
        if requests.get(resource, 0) > 0
    ]


def fits(requirements: list[dict[str, Any]], labels: Mapping[str, str]) -> bool:
    """Whether a node with these labels meets the fit requirements (a pod moved off a node that does
    could be placed there again)."""
    return all(requirement_matches(NodeSelectorRequirement.model_validate(r), labels) for r in requirements)


def _virtual_terms(selector: NodeSelector, fits: list[dict[str, Any]]) -> list[list[dict[str, Any]]]:
    """Virtual nodes the selector allows, one list of ANDed requirements per ORed term."""
    if not selector.node_selector_terms:
        return [[VIRTUAL, *fits]]
    return [
        [VIRTUAL, *[r.to_wire() for r in term.match_expressions or []], *fits]
        for term in selector.node_selector_terms
        if term.match_expressions
    ] or [[VIRTUAL, {"key": names.TYPE_LABEL, "operator": "NotIn", "values": [names.VIRTUAL_NODE_TYPE]}]]


def allowed_terms(
    strategy: PodOffloadingStrategy, selector: NodeSelector, fits: list[dict[str, Any]] | None = None
) -> list[list[dict[str, Any]]] | None:
    """Node selector terms the pod must satisfy, or None when nothing needs adding; `fits`: ANDed
    with every virtual-node term (the move-unfit-pods policy)."""
    fits = fits or []
    if strategy is PodOffloadingStrategy.LOCAL:
        return None
    if strategy is PodOffloadingStrategy.REMOTE:
        return _virtual_terms(selector, fits)
    if not selector.node_selector_terms and not fits:
        return None  # toleration alone: any node, physical or virtual
    return [[PHYSICAL], *_virtual_terms(selector, fits)]


def mutate_pod(
    pod: dict[str, Any], strategy: PodOffloadingStrategy, selector: NodeSelector, *, move_unfit: bool = False
) -> dict[str, Any]:
    """The pod with the constraints of its namespace's offloading added (`move_unfit`: its policy of
    moving pods no foreign node fits is on). The input is not changed:
    what changes (the spec, its tolerations and affinity) is copied, the rest shared, since every
    pod created in an offloaded namespace waits on this (a whole copy was most of its cost)."""
    spec = dict(pod.get("spec") or {})
    mutated = {**pod, "spec": spec}
    effective = effective_strategy(pod, strategy)
    if effective is PodOffloadingStrategy.LOCAL:
        return mutated
    tolerations = list(spec.get("tolerations") or [])
    if TOLERATION not in tolerations:
        tolerations.append(dict(TOLERATION))
    spec["tolerations"] = tolerations
    ours = allowed_terms(effective, selector, fit_requirements(pod) if move_unfit else None)
    if ours is None:
        return mutated
    affinity = copy.deepcopy(spec.get("affinity") or {})
    spec["affinity"] = affinity
    required = affinity.setdefault("nodeAffinity", {}).setdefault("requiredDuringSchedulingIgnoredDuringExecution", {})
    theirs = required.get("nodeSelectorTerms") or []
    if theirs:
        required["nodeSelectorTerms"] = [
            {**term, "matchExpressions": [*(term.get("matchExpressions") or []), *extra]}
            for term in theirs
            for extra in ours
        ]
    else:
        required["nodeSelectorTerms"] = [{"matchExpressions": extra} for extra in ours]
    return mutated


def unoffloading(offloading: Any | None) -> bool:
    """The namespace's offloading is being deleted: its pods are admitted as local ones, unchanged."""
    return offloading is not None and bool((offloading.get("metadata") or {}).get("deletionTimestamp"))


def not_ready_reason(namespace: str, offloading: Any | None) -> str | None:
    """Why a pod of a `liqo.io/scheduling-enabled=true` namespace can't be admitted yet (docs/offloading.md:
    pod creations are rejected until pod offloading is possible); None when it can."""
    if offloading is None:
        return (
            f"namespace {namespace} is labelled {names.SCHEDULING_ENABLED_LABEL}=true but has no "
            f"NamespaceOffloading yet: offload it (liqo-stack offload namespace {namespace}); "
            "controllers retry the pod by themselves"
        )
    meta = offloading.get("metadata") or {}
    status = offloading.get("status") or {}
    phase = status.get("offloadingPhase")
    if status.get("observedGeneration") != meta.get("generation") or phase in (None, OffloadingPhase.IN_PROGRESS):
        return f"the offloading of namespace {namespace} is not ready yet (phase {phase or 'pending'}); retry shortly"
    return None
