"""Pods no foreign node fits (issue 38, section 4), the pure parts: a virtual node's largest-pod
labels, the move-unfit-pods-after policy's value, and when the foreign scheduler gave up."""

from __future__ import annotations

import datetime
from typing import Any

import pytest

from runtime.api import names
from runtime.api.advertisement import largest_pod_labels
from runtime.api.namespaceoffloading import move_unfit_after, stack_move_unfit_after
from runtime.forging.pods import unschedulable_since

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


def virtual_node(annotations: dict[str, str] | None, deleting: bool = False) -> Any:
    from lightkube.models.meta_v1 import ObjectMeta

    gone = datetime.datetime(2026, 11, 26, 22, tzinfo=datetime.UTC) if deleting else None
    meta = ObjectMeta(annotations=annotations, deletionTimestamp=gone)
    return type("VirtualNode", (), {"metadata": meta})()


def test_the_stack_wide_policy_is_the_virtual_nodes_annotation_and_a_namespace_overrides_it() -> None:
    on = {names.MOVE_UNFIT_PODS_AFTER_ANNOTATION: "60"}
    assert stack_move_unfit_after([virtual_node(None), virtual_node(on)]) == 60
    assert stack_move_unfit_after([virtual_node(on, deleting=True), virtual_node({})]) is None
    assert move_unfit_after({names.MOVE_UNFIT_PODS_AFTER_ANNOTATION: "5"}, stack_default=60) == 5
    assert move_unfit_after({}, stack_default=60) == 60


def test_the_stack_config_reaches_every_virtual_node_as_the_annotation() -> None:
    from liqo_stack.declaring import manifests
    from liqo_stack.declaring.config import parse
    from runtime.api import VirtualNodeSpec

    raw = {
        "home": {"clusterId": "home", "kubeconfigPath": "/dev/null"},
        "foreignClusters": [{"clusterId": "foreign-1", "kubeconfigPath": "/dev/null"}],
        "virtualKubelet": {"moveUnfitPodsAfterSeconds": "2m"},
    }
    seconds = parse(raw).virtual_kubelet.move_unfit_pods_after_seconds
    assert seconds == 120
    spec = VirtualNodeSpec.model_validate({"clusterID": "foreign-1", "kubeconfigSecretRef": {"name": "c"}})
    annotated = manifests.virtual_node(spec, move_unfit_pods_after=seconds)
    assert annotated["metadata"]["annotations"] == {names.MOVE_UNFIT_PODS_AFTER_ANNOTATION: "120"}
    assert "annotations" not in manifests.virtual_node(spec)["metadata"], "off: nothing written"


def test_the_webhook_applies_the_stack_wide_policy_unless_the_namespace_sets_its_own() -> None:
    import base64
    import json

    from runtime.webhooks import admit_pod

    offloading: dict[str, Any] = {
        "metadata": {"name": "offloading", "namespace": "apps", "generation": 1},
        "spec": {"podOffloadingStrategy": "Remote"},
        "status": {"observedGeneration": 1, "offloadingPhase": "Ready"},
    }
    container = {"name": "c", "image": "nginx", "resources": {"requests": {"cpu": "6"}}}
    request = {"uid": "u", "namespace": "apps", "operation": "CREATE", "object": {"spec": {"containers": [container]}}}

    def fit_asked(stack_wide: int | None) -> bool:
        answer = admit_pod(request, {"apps": offloading}.get, lambda: stack_wide)["response"]
        return CPU in json.dumps(json.loads(base64.b64decode(answer["patch"])))

    assert fit_asked(60) and not fit_asked(None)
    offloading["metadata"]["annotations"] = {names.MOVE_UNFIT_PODS_AFTER_ANNOTATION: "5"}
    assert fit_asked(None)
