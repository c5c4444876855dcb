"""Where a pod may schedule among three nodes: one physical, the virtual node of foreign-1 (region
europe) and of foreign-2 (region us-west, staging), evaluated with core semantics: taints need a
toleration, required node affinity terms are ORed and their expressions ANDed.

EXPECTED is docs/offloading.md's table of strategies x `runtimeClassName: liqo` x cluster selector; the unit
tests check the mutation logic against it, the e2e tests the pods the real API server stores.
"""

from __future__ import annotations

from typing import Any

from runtime.api import NodeSelectorRequirement, names
from runtime.api.plan import virtual_node_labels
from runtime.api.selectors import requirement_matches

TAINT = {"key": names.VIRTUAL_NODE_TAINT_KEY, "value": "true", "effect": "NoExecute"}
NODES: dict[str, tuple[dict[str, str], list[dict[str, str]]]] = {
    "physical": ({"kubernetes.io/hostname": "physical"}, []),
    "foreign-1": (virtual_node_labels("foreign-1", {"region": "europe"}), [TAINT]),
    "foreign-2": (virtual_node_labels("foreign-2", {"region": "us-west", "staging": "true"}), [TAINT]),
}
SELECTORS = {
    "none-matches": ["region in (asia)"],
    "one-matches": ["region in (europe,us-west), !staging"],
    "two-match": ["region in (europe,us-west)"],
    "empty": [],
}


def schedulable(pod: dict[str, Any]) -> set[str]:
    spec = pod.get("spec") or {}
    tolerations = spec.get("tolerations") or []
    terms = (
        ((spec.get("affinity") or {}).get("nodeAffinity") or {}).get("requiredDuringSchedulingIgnoredDuringExecution")
        or {}
    ).get("nodeSelectorTerms")
    allowed = set()
    for name, (labels, taints) in NODES.items():
        if any(
            not any(t.get("key") == taint["key"] and t.get("effect") == taint["effect"] for t in tolerations)
            for taint in taints
        ):
            continue
        if any(labels.get(key) != value for key, value in (spec.get("nodeSelector") or {}).items()):
            continue
        if terms is not None and not any(
            term.get("matchExpressions")
            and all(
                requirement_matches(NodeSelectorRequirement.model_validate(r), labels) for r in term["matchExpressions"]
            )
            for term in terms
        ):
            continue
        allowed.add(name)
    return allowed


EXPECTED = {
    # (strategy, runtime class, selector) -> nodes the pod may land on
    ("LocalAndRemote", False, "empty"): {"physical", "foreign-1", "foreign-2"},
    ("LocalAndRemote", False, "none-matches"): {"physical"},
    ("LocalAndRemote", False, "one-matches"): {"physical", "foreign-1"},
    ("LocalAndRemote", False, "two-match"): {"physical", "foreign-1", "foreign-2"},
    ("Local", False, "empty"): {"physical"},
    ("Local", False, "none-matches"): {"physical"},
    ("Local", False, "one-matches"): {"physical"},
    ("Local", False, "two-match"): {"physical"},
    ("Remote", False, "empty"): {"foreign-1", "foreign-2"},
    ("Remote", False, "none-matches"): set(),
    ("Remote", False, "one-matches"): {"foreign-1"},
    ("Remote", False, "two-match"): {"foreign-1", "foreign-2"},
}
for (strategy, _, selector), _nodes in list(EXPECTED.items()):
    # the liqo RuntimeClass sends the pod to virtual nodes whatever the strategy; the selector still applies
    EXPECTED[(strategy, True, selector)] = EXPECTED[("Remote", False, selector)]
