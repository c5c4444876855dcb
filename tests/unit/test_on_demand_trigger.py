"""On-demand offloading's pure rules: which pods ask for a virtual node and wait for their namespace's
offloading, what keeps an offloading in use, and the namespace's settings with bad values named."""

from __future__ import annotations

from typing import Any

import pytest
from lightkube.resources.core_v1 import Node, Pod

from liqo_stack.declaring.config import ConfigError, parse
from runtime.__main__ import build_parser
from runtime.api import PodOffloadingStrategy, names
from runtime.api.ondemand import (
    VIRTUAL_NODE_TOLERATION,
    OnDemandDefaults,
    asks_for_virtual_node,
    claim_is_remote,
    free_on_virtual_nodes,
    lacks_toleration,
    runs_on_virtual_node,
    settings_for,
    starved_at_home,
    virtual_node_fitting,
    waits_for_offloading,
)
from tests.unit.test_config import config, problem_at

VIRTUAL = {"liqo-foreign-1"}
VIRTUAL_TERM = {"key": names.TYPE_LABEL, "operator": "In", "values": [names.VIRTUAL_NODE_TYPE]}


def pod(spec: dict[str, Any], status: dict[str, Any] | None = None) -> dict[str, Any]:
    return {"metadata": {"name": "p"}, "spec": spec, "status": status or {"phase": "Pending"}}


def unschedulable() -> dict[str, Any]:
    return {"phase": "Pending", "conditions": [{"type": "PodScheduled", "status": "False", "reason": "Unschedulable"}]}


def affinity(*terms: list[dict[str, Any]]) -> dict[str, Any]:
    required = {"nodeSelectorTerms": [{"matchExpressions": term} for term in terms]}
    return {"affinity": {"nodeAffinity": {"requiredDuringSchedulingIgnoredDuringExecution": required}}}


@pytest.mark.parametrize(
    ("spec", "asks"),
    [
        ({"runtimeClassName": "liqo"}, True),
        ({"runtimeClassName": "gvisor"}, False),
        ({"nodeSelector": {names.TYPE_LABEL: names.VIRTUAL_NODE_TYPE}}, True),
        ({"nodeSelector": {"disk": "ssd"}}, False),
        (affinity([VIRTUAL_TERM, {"key": "zone", "operator": "In", "values": ["a"]}]), True),
        (affinity([VIRTUAL_TERM], [{"key": "zone", "operator": "In", "values": ["a"]}]), False),  # or a home node
        (affinity([{**VIRTUAL_TERM, "operator": "NotIn"}]), False),
        ({}, False),
    ],
)
def test_which_pods_ask_for_a_virtual_node(spec: dict[str, Any], asks: bool) -> None:
    assert asks_for_virtual_node(pod(spec)) is asks


def test_a_pod_waits_when_backing_off_on_a_virtual_node_or_unschedulable() -> None:
    bound = {"runtimeClassName": "liqo", "nodeName": "liqo-foreign-1"}
    assert waits_for_offloading(pod(bound, {"phase": "Pending", "reason": "OffloadingBackOff"}), VIRTUAL)
    assert not waits_for_offloading(pod(bound, {"phase": "Running"}), VIRTUAL)
    assert not waits_for_offloading(pod(bound), VIRTUAL)  # not backing off (yet)
    on_home = {"runtimeClassName": "liqo", "nodeName": "home-node"}
    assert not waits_for_offloading(pod(on_home, {"phase": "Pending", "reason": "OffloadingBackOff"}), VIRTUAL)
    selector = {"nodeSelector": {names.TYPE_LABEL: names.VIRTUAL_NODE_TYPE}}
    assert waits_for_offloading(pod(selector, unschedulable()), VIRTUAL)
    assert not waits_for_offloading(pod({}, unschedulable()), VIRTUAL)  # asks for no virtual node
    going = {**pod(selector, unschedulable()), "metadata": {"name": "p", "deletionTimestamp": "2026-01-01T00:00:00Z"}}
    assert not waits_for_offloading(going, VIRTUAL)


def test_what_keeps_an_offloading_in_use() -> None:
    assert runs_on_virtual_node(pod({"nodeName": "liqo-foreign-1"}, {"phase": "Running"}), VIRTUAL)
    assert not runs_on_virtual_node(pod({"nodeName": "liqo-foreign-1"}, {"phase": "Succeeded"}), VIRTUAL)
    assert not runs_on_virtual_node(pod({"nodeName": "home-node"}, {"phase": "Running"}), VIRTUAL)
    claim = {"metadata": {"annotations": {names.SELECTED_NODE_ANNOTATION: "liqo-foreign-1"}}}
    assert claim_is_remote(claim, VIRTUAL)
    assert not claim_is_remote({"metadata": {"annotations": {names.SELECTED_NODE_ANNOTATION: "home"}}}, VIRTUAL)
    assert not claim_is_remote({"metadata": {}}, VIRTUAL)


def test_only_unscheduled_pods_without_the_toleration_need_it() -> None:
    assert lacks_toleration(pod({}))
    assert not lacks_toleration(pod({"tolerations": [VIRTUAL_NODE_TOLERATION]}))
    assert not lacks_toleration(pod({"nodeName": "liqo-foreign-1"}))


def test_settings_from_annotations_override_the_defaults() -> None:
    defaults = OnDemandDefaults(cluster_selector=["region=eu"], grace_period_seconds=60)
    settings, problems = settings_for({}, defaults)
    assert problems == [] and settings is not None
    assert settings.spec.pod_offloading_strategy is PodOffloadingStrategy.LOCAL_AND_REMOTE
    assert settings.grace_period_seconds == 60
    [term] = settings.spec.cluster_selector.node_selector_terms or []
    assert [(r.key, r.values) for r in term.match_expressions or []] == [("region", ["eu"])]
    annotations = {
        names.ON_DEMAND_STRATEGY_ANNOTATION: "Remote",
        names.ON_DEMAND_CLUSTER_SELECTOR_ANNOTATION: "",
        names.ON_DEMAND_GRACE_PERIOD_ANNOTATION: "2m",
    }
    settings, problems = settings_for(annotations, defaults)
    assert settings is not None
    assert settings.spec.pod_offloading_strategy is PodOffloadingStrategy.REMOTE
    assert not settings.spec.cluster_selector.node_selector_terms  # empty: every cluster
    assert settings.grace_period_seconds == 120


def test_bad_annotations_are_each_named() -> None:
    annotations = {
        names.ON_DEMAND_STRATEGY_ANNOTATION: "Anywhere",
        names.ON_DEMAND_CLUSTER_SELECTOR_ANNOTATION: "region in eu",
        names.ON_DEMAND_GRACE_PERIOD_ANNOTATION: "0s",
    }
    settings, problems = settings_for(annotations, OnDemandDefaults())
    assert settings is None
    assert [p.partition(":")[0] for p in problems] == [
        f"annotation {names.ON_DEMAND_STRATEGY_ANNOTATION}",
        f"annotation {names.ON_DEMAND_CLUSTER_SELECTOR_ANNOTATION}",
        f"annotation {names.ON_DEMAND_GRACE_PERIOD_ANNOTATION}",
    ]


def test_the_stack_defaults_become_the_controller_managers_flags() -> None:
    stack = parse(
        config(
            onDemand={"podOffloadingStrategy": "Remote", "clusterSelector": ["region=eu"], "gracePeriodSeconds": "2m"}
        )
    )
    args = stack.on_demand.args()
    assert args == [
        "--on-demand-pod-offloading-strategy=Remote",
        "--on-demand-cluster-selector=region=eu",
        "--on-demand-grace-period=120",
    ]
    parsed = build_parser().parse_args(["controller-manager", "--home-cluster-id", "home", *args])
    assert parsed.on_demand_grace_period == 120 and parsed.on_demand_cluster_selector == ["region=eu"]


@pytest.mark.parametrize(
    ("setting", "path"),
    [
        ({"gracePeriodSeconds": "0s"}, "liqo:onDemand.gracePeriodSeconds"),
        ({"clusterSelector": ["region in eu"]}, "liqo:onDemand.clusterSelector"),
        ({"podOffloadingStrategy": "Anywhere"}, "liqo:onDemand.podOffloadingStrategy"),
    ],
)
def test_bad_stack_defaults_are_named_by_field(setting: dict[str, Any], path: str) -> None:
    with pytest.raises(ConfigError) as caught:
        parse(config(onDemand=setting))
    assert problem_at(caught.value, path)


def starved(message: str = "0/3 nodes are available: 2 Insufficient cpu, 1 node(s) had untolerated taint") -> Any:
    condition = {"type": "PodScheduled", "status": "False", "reason": "Unschedulable", "message": message}
    return {"phase": "Pending", "conditions": [condition]}


def test_a_pod_starved_at_home_is_one_left_unscheduled_for_lack_of_resources() -> None:
    assert starved_at_home(pod({}, starved()))
    assert not starved_at_home(pod({}, starved("0/2 nodes are available: 2 node(s) didn't match Pod's node affinity")))
    assert not starved_at_home(pod({"nodeName": "home-1"}, starved()))
    assert not starved_at_home(pod({"runtimeClassName": "liqo"}, starved()))  # the other trigger's


def node(name: str, cpu: str, labels: dict[str, str] | None = None, ready: str = "True") -> Any:
    return Node.from_dict(
        {
            "metadata": {"name": name, "labels": {names.TYPE_LABEL: names.VIRTUAL_NODE_TYPE, **(labels or {})}},
            "status": {"allocatable": {"cpu": cpu, "pods": "110"}, "conditions": [{"type": "Ready", "status": ready}]},
        }
    )


def requesting(cpu: str, spec: dict[str, Any] | None = None, phase: str = "Pending") -> Any:
    container = {"name": "c", "resources": {"requests": {"cpu": cpu}}}
    return Pod.from_dict(
        {"metadata": {"name": "p"}, "spec": {"containers": [container], **(spec or {})}, "status": {"phase": phase}}
    )


def test_a_virtual_node_fits_a_pod_when_its_free_resources_and_labels_allow() -> None:
    nodes: dict[str, Any] = {
        "liqo-a": node("liqo-a", "8", {"region": "eu"}),
        "liqo-b": node("liqo-b", "4"),
        "liqo-c": node("liqo-c", "64", ready="False"),
    }
    running = [requesting("5", {"nodeName": "liqo-a"}, "Running"), requesting("3", {"nodeName": "liqo-a"}, "Succeeded")]
    free = free_on_virtual_nodes(nodes.values(), running)
    assert set(free) == {"liqo-a", "liqo-b"}  # a NotReady node fits nothing
    assert free["liqo-a"]["cpu"] == 3  # a finished pod holds nothing
    assert virtual_node_fitting(requesting("3"), nodes, free) == "liqo-a"
    assert virtual_node_fitting(requesting("4"), nodes, free) == "liqo-b"
    assert virtual_node_fitting(requesting("5"), nodes, free) is None
    assert virtual_node_fitting(requesting("1", {"nodeSelector": {"region": "us"}}), nodes, free) is None
    home_only = affinity([{"key": names.TYPE_LABEL, "operator": "DoesNotExist"}])
    assert virtual_node_fitting(requesting("1", home_only), nodes, free) is None
