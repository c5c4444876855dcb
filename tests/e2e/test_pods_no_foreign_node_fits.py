"""A pod that fits a virtual node's sum but no single foreign node behind it (issue 38, section 4):
the home pod shows the foreign scheduler's reason, as its PodScheduled condition and as the foreign
FailedScheduling event, reflected home; with its namespace's move-unfit-pods policy on, it is moved
once, and its replacement runs on a virtual node where one foreign node fits it.

foreign-2's two fake nodes are filled by pods of its own to 4 free CPUs each (taken away after): its
virtual node offers 90 % of 8, so a pod asking 6 CPUs is placed on it at home, and no node there
can run it.
"""

from __future__ import annotations

import subprocess
from collections.abc import Iterator
from decimal import Decimal
from typing import Any, cast

import pytest
from lightkube import Client
from lightkube.resources.apps_v1 import Deployment
from lightkube.resources.core_v1 import Event, Node, Pod
from lightkube.utils.quantity import parse_quantity
from pulumi import automation as auto

from liqo_stack.dev.clusters import DevEnvironment
from liqo_stack.dev.pulumi_offline import PulumiEnvironment
from runtime.api import names
from runtime.api.resources import VirtualNodeResource
from runtime.virtualkubelet.pods import UNFIT_REASON
from tests.support.kube import VIRTUAL_NODES, get_or_none, status_of, wait_until

pytestmark = [pytest.mark.clusters, pytest.mark.pulumi]

CLUSTER = "foreign-2"
FREE_CPU = 4  # left on each of its nodes
ASKED_CPU = 6  # more than any node has free, less than the virtual node offers
REPORTED_WITHIN = 30  # seconds from the pod's creation


def pod(name: str, namespace: str, cpu: int, **spec: Any) -> Pod:
    container = {"name": "main", "image": "busybox", "resources": {"requests": {"cpu": str(cpu)}}}
    return cast(
        Pod,
        Pod.from_dict(
            {"metadata": {"name": name, "namespace": namespace}, "spec": {**spec, "containers": [container]}}
        ),
    )


@pytest.fixture
def filled(foreign: dict[str, Client], home: Client, unique_name: str) -> Iterator[None]:
    """foreign-2's nodes with FREE_CPU each left, by pods of foreign-2's own; its virtual node offers
    90 % of their sum once the advertisement follows."""
    cluster = foreign[CLUSTER]
    nodes: list[Any] = list(cluster.list(Node))
    names = []
    try:
        for index, node in enumerate(nodes):
            allocatable = parse_quantity(node.status.allocatable["cpu"]) or Decimal(0)
            names.append(f"{unique_name}-{index}")
            cluster.create(pod(names[-1], "default", int(allocatable) - FREE_CPU, nodeName=node.metadata.name))
        offered = Decimal(FREE_CPU * len(nodes)) * Decimal("0.9")

        def offering() -> bool:
            node: Any = home.get(Node, VIRTUAL_NODES[CLUSTER])
            return parse_quantity(node.status.capacity["cpu"]) == offered

        wait_until(offering, 60, f"{VIRTUAL_NODES[CLUSTER]} offering {offered} cpu")
        yield
    finally:
        for name in names:
            cluster.delete(Pod, name, namespace="default", grace_period=0)


def test_the_home_pod_shows_why_no_foreign_node_runs_it(filled: None, offloaded: str, home: Client) -> None:
    home.create(pod("too-big", offloaded, ASKED_CPU, nodeSelector={"kubernetes.io/hostname": VIRTUAL_NODES[CLUSTER]}))
    try:

        def reported() -> tuple[Any, Any, Any] | None:
            found: Any = home.get(Pod, "too-big", namespace=offloaded)
            scheduled = next((c for c in found.status.conditions or [] if c.type == "PodScheduled"), None)
            events = [
                e
                for e in home.list(Event, namespace=offloaded, fields={"involvedObject.name": "too-big"})
                if e.reason == "FailedScheduling"
            ]
            return (found, scheduled, events[0]) if scheduled and scheduled.status == "False" and events else None

        found, scheduled, event = wait_until(reported, REPORTED_WITHIN, "the foreign scheduler's reason at home")
        assert found.spec.nodeName == VIRTUAL_NODES[CLUSTER], "placed on the virtual node at home"
        assert found.status.phase == "Pending"
        assert scheduled.reason == "Unschedulable" and "Insufficient cpu" in scheduled.message, scheduled
        assert event.type == "Warning" and "Insufficient cpu" in event.message, event
    finally:
        home.delete(Pod, "too-big", namespace=offloaded, grace_period=0)


MOVE_AFTER = 5  # seconds Unschedulable in the foreign cluster before the pod is moved


def kubectl(dev_env: DevEnvironment, *args: str) -> str:
    command = [str(dev_env.bin_dir / "kubectl"), "--kubeconfig", str(dev_env.kubeconfig("home")), *args]
    return subprocess.run(command, capture_output=True, text=True, check=True).stdout


def moved_events(home: Client, namespace: str) -> list[Any]:
    return [e for e in home.list(Event, namespace=namespace) if e.reason == UNFIT_REASON]


def test_with_the_policy_on_the_pod_moves_to_a_virtual_node_that_fits_it_once(
    filled: None, offloaded: str, home: Client, dev_env: DevEnvironment
) -> None:
    unfit_node, fitting_node = VIRTUAL_NODES[CLUSTER], VIRTUAL_NODES["foreign-1"]

    def largest_cpu() -> str | None:
        node: Any = home.get(Node, unfit_node)
        return cast(str | None, (node.metadata.labels or {}).get(names.LARGEST_POD_CPU_LABEL))

    # the most one foreign node behind it has free (4 cpu) times its 90 % share, in millicores
    wait_until(lambda: largest_cpu() == str(FREE_CPU * 900), 30, f"{unfit_node}'s largest pod at {FREE_CPU * 0.9} cpu")
    template = pod("unfit", offloaded, ASKED_CPU).to_dict()
    deployment = {
        "metadata": {"name": "unfit", "namespace": offloaded},
        "spec": {
            "replicas": 1,
            "selector": {"matchLabels": {"app": "unfit"}},
            "template": {"metadata": {"labels": {"app": "unfit"}}, "spec": template["spec"]},
        },
    }
    annotate = ["annotate", "namespaceoffloading", names.NAMESPACE_OFFLOADING_NAME, "-n", offloaded]
    kubectl(dev_env, "cordon", fitting_node)  # the first pod's only virtual node is the unfit one
    try:
        home.create(cast(Deployment, Deployment.from_dict(deployment)))

        def first_reported() -> Any | None:
            pods: list[Any] = list(home.list(Pod, namespace=offloaded, labels={"app": "unfit"}))
            scheduled = [
                p
                for p in pods
                if p.spec.nodeName == unfit_node
                and any(c.type == "PodScheduled" and c.status == "False" for c in p.status.conditions or [])
            ]
            return scheduled[0] if scheduled else None

        first = wait_until(first_reported, REPORTED_WITHIN, f"the pod on {unfit_node}, Unschedulable there")
        kubectl(dev_env, "uncordon", fitting_node)
        kubectl(dev_env, *annotate, f"{names.MOVE_UNFIT_PODS_AFTER_ANNOTATION}={MOVE_AFTER}")

        def replacement_running() -> Any | None:
            pods: list[Any] = list(home.list(Pod, namespace=offloaded, labels={"app": "unfit"}))
            running = [p for p in pods if p.metadata.uid != first.metadata.uid and p.status.phase == "Running"]
            return running[0] if running else None

        replacement = wait_until(replacement_running, REPORTED_WITHIN + MOVE_AFTER + 30, "the replacement Running")
        assert replacement.spec.nodeName == fitting_node, "the only virtual node with a foreign node that fits it"
        required = replacement.spec.affinity.nodeAffinity.requiredDuringSchedulingIgnoredDuringExecution
        virtual_terms = [t.matchExpressions for t in required.nodeSelectorTerms]
        assert all(
            any(
                r.key == names.LARGEST_POD_CPU_LABEL and r.operator == "Gt" and r.values == [str(ASKED_CPU * 1000 - 1)]
                for r in term
            )
            for term in virtual_terms
        ), virtual_terms
        events = moved_events(home, offloaded)
        assert [e.involvedObject.uid for e in events] == [first.metadata.uid], "moved once, the first pod only"
        assert "Insufficient cpu" in events[0].message and events[0].type == "Warning", events[0]
        assert wait_until(
            lambda: get_or_none(home, Pod, first.metadata.name, offloaded) is None, 30, "the first pod gone"
        )
        pods: list[Any] = list(home.list(Pod, namespace=offloaded, labels={"app": "unfit"}))
        assert [p.metadata.uid for p in pods] == [replacement.metadata.uid], "no further replacement"
    finally:
        kubectl(dev_env, "uncordon", fitting_node)
        kubectl(dev_env, *annotate, f"{names.MOVE_UNFIT_PODS_AFTER_ANNOTATION}-")
        home.delete(Deployment, "unfit", namespace=offloaded)


def test_stack_wide_a_bare_pod_no_foreign_node_runs_is_failed(
    filled: None, offloaded: str, home: Client, foreign: dict[str, Client], installed: auto.Stack
) -> None:
    """virtualKubelet.moveUnfitPodsAfterSeconds, set with `pulumi up` while the pod waits: every
    VirtualNode carries it, and the bare pod is failed, its remote pod removed."""
    unfit_node = VIRTUAL_NODES[CLUSTER]
    home.create(pod("bare", offloaded, ASKED_CPU, nodeSelector={"kubernetes.io/hostname": unfit_node}))
    try:

        def unschedulable() -> bool:
            found: Any = home.get(Pod, "bare", namespace=offloaded)
            return any(c.type == "PodScheduled" and c.status == "False" for c in found.status.conditions or [])

        wait_until(unschedulable, REPORTED_WITHIN, "the bare pod Unschedulable in foreign-2")
        config = PulumiEnvironment.liqo_config(installed)
        virtual_kubelet = {**config.get("virtualKubelet", {}), "moveUnfitPodsAfterSeconds": f"{MOVE_AFTER}s"}
        PulumiEnvironment.set_liqo_config(installed, {**config, "virtualKubelet": virtual_kubelet})
        installed.up(on_output=print)
        for name in VIRTUAL_NODES.values():
            vn: Any = home.get(VirtualNodeResource, name, namespace=names.LIQO_NAMESPACE)
            assert (vn.metadata.annotations or {}).get(names.MOVE_UNFIT_PODS_AFTER_ANNOTATION) == str(MOVE_AFTER)

        def failed() -> Any | None:
            found: Any = home.get(Pod, "bare", namespace=offloaded)
            return found if found.status.phase == "Failed" else None

        found = wait_until(failed, MOVE_AFTER + 30, "the bare pod Failed")
        assert found.status.reason == UNFIT_REASON and "Insufficient cpu" in found.status.message, found.status
        events = [e for e in moved_events(home, offloaded) if e.involvedObject.name == "bare"]
        assert len(events) == 1 and events[0].type == "Warning", events
        twin = status_of(home, offloaded)["remoteNamespaceName"]
        wait_until(lambda: get_or_none(foreign[CLUSTER], Pod, "bare", twin) is None, 30, "its remote pod removed")
    finally:
        home.delete(Pod, "bare", namespace=offloaded, grace_period=0)
