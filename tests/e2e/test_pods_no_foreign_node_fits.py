"""A pod that fits a virtual node's sum but no single foreign node behind it (issue 38, section 4,
its visibility part): the home pod shows the foreign scheduler's reason, as its PodScheduled
condition and as the foreign FailedScheduling event, reflected home.

foreign-2's two fake nodes are filled by pods of its own to 4 free CPUs each (taken away after): its
virtual node offers 90 % of 8, so a pod asking 6 CPUs is placed on it at home, and no node there
can run it.
"""

from __future__ import annotations

from collections.abc import Iterator
from decimal import Decimal
from typing import Any, cast

import pytest
from lightkube import Client
from lightkube.resources.core_v1 import Event, Node, Pod
from lightkube.utils.quantity import parse_quantity

from tests.support.kube import VIRTUAL_NODES, wait_until

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
