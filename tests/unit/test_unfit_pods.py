"""Pods no foreign node fits (issue 38, section 4), the pure parts: a virtual node's largest-pod
labels, the move-unfit-pods-after policy's value, and when the foreign scheduler gave up."""

from __future__ import annotations

import datetime
from typing import Any

import pytest

from runtime.api import names
from runtime.api.advertisement import largest_pod_labels
from runtime.api.namespaceoffloading import move_unfit_after
from runtime.virtualkubelet.pods import unschedulable_since

CPU, MEMORY = names.LARGEST_POD_CPU_LABEL, names.LARGEST_POD_MEMORY_LABEL
SPEC: dict[str, Any] = {
    "resources": {"cpu": "8", "memory": "24Gi"},
    "nodes": [
        {"name": "a", "labels": {"pool": "gpu"}, "resources": {"cpu": "4", "memory": "16Gi"}},
        {"name": "b", "labels": {"pool": "general"}, "resources": {"cpu": "3500m", "memory": "8Gi"}},
    ],
}


def test_the_largest_pod_is_the_most_free_on_one_node_times_the_share() -> None:
    labels = largest_pod_labels(SPEC, None, 90, {"cpu": "7200m", "memory": "23192823398"})
    assert labels == {CPU: "3600", MEMORY: str(16 * 2**30 * 9 // 10)}, "cpu and memory each at their largest node"


def test_a_pool_counts_only_its_own_nodes() -> None:
    labels = largest_pod_labels(SPEC, {"pool": "general"}, 100, {"cpu": "3500m", "memory": str(8 << 30)})
    assert labels == {CPU: "3500", MEMORY: str(8 << 30)}


def test_never_above_the_capacity_and_the_capacity_without_per_node_figures() -> None:
    fixed = {"cpu": "2", "memory": "1Gi"}  # fixedResources below what one node has
    assert largest_pod_labels(SPEC, None, 100, fixed) == {CPU: "2000", MEMORY: str(1 << 30)}
    older_agent = {"resources": SPEC["resources"]}
    assert largest_pod_labels(older_agent, None, 50, {"cpu": "4", "memory": "12Gi"}) == {
        CPU: "4000",
        MEMORY: str(12 << 30),
    }


@pytest.mark.parametrize(
    ("annotations", "seconds"),
    [
        (None, None),
        ({}, None),
        ({names.MOVE_UNFIT_PODS_AFTER_ANNOTATION: "30"}, 30),
        ({names.MOVE_UNFIT_PODS_AFTER_ANNOTATION: "0"}, 0),
        ({names.MOVE_UNFIT_PODS_AFTER_ANNOTATION: "30s"}, None),
        ({names.MOVE_UNFIT_PODS_AFTER_ANNOTATION: "-1"}, None),
    ],
)
def test_the_policy_is_on_with_a_whole_number_of_seconds(
    annotations: dict[str, str] | None, seconds: int | None
) -> None:
    assert move_unfit_after(annotations) == seconds


def test_unschedulable_since_the_foreign_schedulers_condition() -> None:
    unschedulable = {
        "type": "PodScheduled",
        "status": "False",
        "reason": "Unschedulable",
        "message": "0/2 nodes are available: 2 Insufficient cpu.",
        "lastTransitionTime": "2026-11-26T22:00:00Z",
    }
    since = datetime.datetime(2026, 11, 26, 22, tzinfo=datetime.UTC)
    assert unschedulable_since({"conditions": [unschedulable]}) == (since, unschedulable["message"])
    assert unschedulable_since({"conditions": [{**unschedulable, "status": "True", "reason": None}]}) is None
    assert unschedulable_since({"conditions": [{**unschedulable, "reason": "SchedulingGated"}]}) is None
    assert unschedulable_since({}) is None
