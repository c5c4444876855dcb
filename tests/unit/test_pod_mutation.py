"""Pod mutation per strategy, checked by where the mutated pod may schedule (tests/support/placement.py)."""

from __future__ import annotations

from typing import Any

import pytest

from runtime.api import PodOffloadingStrategy, names, parse_selector
from runtime.forging.pods import VIRTUAL_NODE_TOLERATION, fit_requirements, fits, mutate_pod
from tests.support.placement import EXPECTED, NODES, SELECTORS, schedulable


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
    original = pod(tolerations=[dict(VIRTUAL_NODE_TOLERATION)])
    mutated = mutate_pod(original, PodOffloadingStrategy.LOCAL_AND_REMOTE, parse_selector([]))
    assert mutated["spec"]["tolerations"] == [VIRTUAL_NODE_TOLERATION]
    assert "affinity" not in original["spec"]


def requesting(cpu: str, memory: str | None = None, runtime_class: bool = False) -> dict[str, Any]:
    requests = {"cpu": cpu, **({"memory": memory} if memory else {})}
    body = pod(runtime_class)
    body["spec"]["containers"][0]["resources"] = {"requests": requests}
    return body


@pytest.fixture
def foreign_2_too_small(monkeypatch: pytest.MonkeyPatch) -> None:
    """foreign-1 has a foreign node with 14.4 cpu and 8 GiB free, foreign-2 none with more than 3.6 cpu."""
    for node, cpu in (("foreign-1", "14400"), ("foreign-2", "3600")):
        labels, taints = NODES[node]
        largest = {names.LARGEST_POD_CPU_LABEL: cpu, names.LARGEST_POD_MEMORY_LABEL: str(8 << 30)}
        monkeypatch.setitem(NODES, node, ({**labels, **largest}, taints))


@pytest.mark.parametrize(("strategy", "runtime_class", "selector"), sorted(EXPECTED), ids=lambda v: str(v))
def test_with_the_move_unfit_policy_virtual_nodes_too_small_are_left_out(
    foreign_2_too_small: None, strategy: str, runtime_class: bool, selector: str
) -> None:
    """Every strategy and selector: what it allows, less the virtual node no foreign node of which
    fits 6 cpu; the physical node stays allowed where the strategy allows it."""
    mutated = mutate_pod(
        requesting("6", runtime_class=runtime_class),
        PodOffloadingStrategy(strategy),
        parse_selector(SELECTORS[selector]),
        move_unfit=True,
    )
    assert schedulable(mutated) == EXPECTED[(strategy, runtime_class, selector)] - {"foreign-2"}


@pytest.mark.parametrize(
    ("cpu", "memory", "allowed"),
    [
        ("3600m", None, {"foreign-1", "foreign-2"}),  # exactly what foreign-2's largest node has: fits
        ("3601m", None, {"foreign-1"}),
        ("1", "8Gi", {"foreign-1", "foreign-2"}),
        ("1", "9Gi", set()),  # no foreign node has that much memory free
    ],
)
def test_the_fit_requirement_is_on_each_requested_resource(
    foreign_2_too_small: None, cpu: str, memory: str | None, allowed: set[str]
) -> None:
    mutated = mutate_pod(requesting(cpu, memory), PodOffloadingStrategy.REMOTE, parse_selector([]), move_unfit=True)
    assert schedulable(mutated) == allowed


def test_without_the_policy_or_requests_no_fit_requirement_is_added(foreign_2_too_small: None) -> None:
    remote, anywhere = PodOffloadingStrategy.REMOTE, PodOffloadingStrategy.LOCAL_AND_REMOTE
    assert schedulable(mutate_pod(requesting("6"), remote, parse_selector([]))) == {"foreign-1", "foreign-2"}
    unrequested = mutate_pod(pod(), anywhere, parse_selector([]), move_unfit=True)
    assert "affinity" not in unrequested["spec"], "nothing to fit: the toleration alone, as without the policy"


def test_a_node_fits_when_its_largest_pod_labels_meet_the_requests() -> None:
    """The virtual kubelet moves a pod only off a node that does not fit it: its replacement cannot return."""
    needs = fit_requirements(requesting("6", "1Gi"))
    largest = {names.LARGEST_POD_CPU_LABEL: "6000", names.LARGEST_POD_MEMORY_LABEL: str(1 << 30)}
    assert fits(needs, largest)
    assert not fits(needs, {**largest, names.LARGEST_POD_CPU_LABEL: "5999"})
    assert not fits(needs, {}), "a node without the labels is no fit"
    assert fits(fit_requirements(pod()), {}), "a pod asking nothing fits anywhere"
