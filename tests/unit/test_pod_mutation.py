"""Pod mutation per strategy, checked by where the mutated pod may schedule (tests/support/placement.py)."""

from __future__ import annotations

from typing import Any

import pytest

from runtime.api import PodOffloadingStrategy, names, parse_selector
from runtime.webhooks.podmutation import TOLERATION, mutate_pod
from tests.support.placement import EXPECTED, SELECTORS, schedulable


def pod(runtime_class: bool = False, **spec: Any) -> dict[str, Any]:
    body: dict[str, Any] = {"containers": [{"name": "c", "image": "nginx"}], **spec}
    if runtime_class:
        body["runtimeClassName"] = names.RUNTIME_CLASS_NAME
    return {"metadata": {"name": "p"}, "spec": body}


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
