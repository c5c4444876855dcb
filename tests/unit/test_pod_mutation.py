"""Pod mutation per strategy, checked by where the mutated pod may schedule among three nodes.

The nodes: one physical, the virtual node of foreign-1 (region europe) and of foreign-2
(region us-west, staging). Scheduling is evaluated with core semantics: taints need a
toleration, required node affinity terms are ORed and their expressions ANDed.
"""

from __future__ import annotations

from typing import Any

import pytest

from runtime.api import NodeSelectorRequirement, PodOffloadingStrategy, names, parse_selector
from runtime.api.plan import virtual_node_labels
from runtime.api.selectors import requirement_matches
from runtime.webhooks.podmutation import TOLERATION, mutate_pod

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


def pod(runtime_class: bool = False, **spec: Any) -> dict[str, Any]:
    body: dict[str, Any] = {"containers": [{"name": "c", "image": "nginx"}], **spec}
    if runtime_class:
        body["runtimeClassName"] = names.RUNTIME_CLASS_NAME
    return {"metadata": {"name": "p"}, "spec": body}


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


@pytest.mark.parametrize(("strategy", "runtime_class", "selector"), sorted(EXPECTED), ids=lambda v: str(v))
def test_where_the_mutated_pod_may_run(strategy: str, runtime_class: bool, selector: str) -> None:
    mutated = mutate_pod(pod(runtime_class), PodOffloadingStrategy(strategy), parse_selector(SELECTORS[selector]))
    assert schedulable(mutated) == EXPECTED[(strategy, runtime_class, selector)]


def test_the_pods_own_affinity_is_kept_and_anded() -> None:
    own = {"nodeAffinity": {"requiredDuringSchedulingIgnoredDuringExecution": {"nodeSelectorTerms": [
        {"matchExpressions": [{"key": "region", "operator": "In", "values": ["us-west"]}]}
    ]}}}  # fmt: skip
    mutated = mutate_pod(pod(affinity=own), PodOffloadingStrategy.REMOTE, parse_selector([]))
    assert schedulable(mutated) == {"foreign-2"}


def test_mutation_is_idempotent_for_the_toleration_and_leaves_the_input_alone() -> None:
    original = pod(tolerations=[dict(TOLERATION)])
    mutated = mutate_pod(original, PodOffloadingStrategy.LOCAL_AND_REMOTE, parse_selector([]))
    assert mutated["spec"]["tolerations"] == [TOLERATION]
    assert "affinity" not in original["spec"]
