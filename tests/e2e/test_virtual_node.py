"""The virtual nodes themselves, end to end: what they show, and how they follow the foreign cluster.

Capacity is the foreign cluster's advertisement x the sharing percentage (docs/offloading.md), so it moves
when a foreign node comes or goes; health follows the foreign API server (the `installed` stack
checks every 2 s and gives up after 2 failures).
"""

from __future__ import annotations

import time
from decimal import Decimal
from typing import Any, cast

import pytest
from lightkube import Client
from lightkube.resources.core_v1 import Node, Pod
from lightkube.utils.quantity import parse_quantity

from liqo_stack.dev.clusters import DevEnvironment, NodeShape, fake_node_manifest
from runtime.api import names
from runtime.api.resources import VirtualNodeResource
from tests.support.kube import VIRTUAL_NODES, all_running, deploy_running, node_ready, remote_pod, restarts, wait_until

pytestmark = [pytest.mark.clusters, pytest.mark.pulumi]

HEALTH_CHECK_INTERVAL, FAILURE_THRESHOLD = 2, 2  # as the `installed` stack configures them


def test_virtual_nodes_show_the_shared_capacity(offloaded: str, home: Client) -> None:
    for cluster_id, name in VIRTUAL_NODES.items():
        node = home.get(Node, name)
        assert node.metadata and node.metadata.labels
        assert node.metadata.labels[names.TYPE_LABEL] == names.VIRTUAL_NODE_TYPE
        assert node.metadata.labels[names.REMOTE_CLUSTER_ID_LABEL] == cluster_id
        assert node.spec and any(t.key == names.VIRTUAL_NODE_TAINT_KEY for t in node.spec.taints or [])
        assert node.status and node.status.capacity and int(node.status.capacity["pods"]) > 0
        kinds = {c.type for c in node.status.conditions or []}
        assert {"Ready", "MemoryPressure", "DiskPressure", "PIDPressure"} <= kinds


def capacity(home: Client, node_name: str, resource: str) -> Decimal:
    node = home.get(Node, node_name)
    return parse_quantity(cast(Any, node.status).capacity[resource]) or Decimal(0)


def test_capacity_follows_a_foreign_node_added_and_removed(
    offloaded: str, home: Client, foreign: dict[str, Client]
) -> None:
    node_name = VIRTUAL_NODES["foreign-1"]
    virtual_node = home.get(VirtualNodeResource, node_name, namespace=names.LIQO_NAMESPACE)
    share = Decimal(virtual_node["spec"].get("sharingPercentage", 90)) / 100
    before = {r: capacity(home, node_name, r) for r in ("cpu", "memory")}
    extra = fake_node_manifest("foreign-1", 9, NodeShape(cpu="10", memory="20Gi"))
    foreign["foreign-1"].create(cast(Node, Node.from_dict(extra)))
    added = {"cpu": Decimal(10) * share, "memory": Decimal(20 * 2**30) * share}
    try:
        wait_until(
            lambda: all(abs(capacity(home, node_name, r) - (before[r] + added[r])) < 1 for r in added),
            30,
            f"{node_name} capacity grown by 90% of the added node",
        )
    finally:
        foreign["foreign-1"].delete(Node, cast(Any, extra["metadata"])["name"])
    wait_until(lambda: all(capacity(home, node_name, r) == before[r] for r in before), 30, f"{node_name} capacity back")


def test_a_stopped_foreign_api_server_turns_the_node_not_ready_and_its_pods_keep_running(
    offloaded: str, home: Client, foreign: dict[str, Client], dev_env: DevEnvironment
) -> None:
    running = deploy_running(home, offloaded, "survivors", 4)
    twin = f"{offloaded}-home"
    on_foreign_2 = [p for p in running if cast(Any, p.spec).nodeName == VIRTUAL_NODES["foreign-2"]]
    assert on_foreign_2, "the scheduler spreads 4 pods over both virtual nodes"

    def remote_uids() -> dict[str, str]:
        remote: list[Any] = list(foreign["foreign-2"].list(Pod, namespace=twin, labels={"app": "survivors"}))
        return {p.metadata.name: p.metadata.uid for p in remote if p.status.phase == "Running"}

    before = remote_uids()
    assert len(before) == len(on_foreign_2)
    with dev_env.api_server_stopped("foreign-2"):
        stopped = time.monotonic()
        bound = HEALTH_CHECK_INTERVAL * (FAILURE_THRESHOLD + 1) + 5  # a check's own timeout, and writing the node
        wait_until(lambda: not node_ready(home, VIRTUAL_NODES["foreign-2"]), bound, "liqo-foreign-2 NotReady")
        print(f"liqo-foreign-2 NotReady {time.monotonic() - stopped:.1f}s after its API server stopped")
        assert node_ready(home, VIRTUAL_NODES["foreign-1"])
        # the home pods stay as they were: eviction is the not-ready taint's business (300 s by default)
        assert all_running(home, offloaded, "survivors", 4) is not None
    wait_until(lambda: node_ready(home, VIRTUAL_NODES["foreign-2"]), 30, "liqo-foreign-2 Ready again")
    assert remote_uids() == before
    assert all_running(home, offloaded, "survivors", 4) is not None


def test_the_foreign_agent_keeps_remote_pods_while_the_home_cluster_is_unreachable(
    offloaded: str, home: Client, foreign: dict[str, Client], dev_env: DevEnvironment
) -> None:
    running = deploy_running(home, offloaded, "homeless", 2)
    twin = f"{offloaded}-home"
    placed = {cast(Any, p).metadata.name: cast(Any, p).spec.nodeName.removeprefix("liqo-") for p in running}

    def remote_uid(name: str) -> str | None:
        remote = remote_pod(foreign[placed[name]], twin, name)
        return cast(Any, remote).metadata.uid if remote and cast(Any, remote).status.phase == "Running" else None

    with dev_env.api_server_stopped("home"):
        first = {name: remote_uid(name) for name in placed}
        for name, cluster_id in placed.items():
            foreign[cluster_id].delete(Pod, name, namespace=twin, grace_period=0)
        wait_until(
            lambda: all(remote_uid(name) not in (None, first[name]) for name in placed), 60, "remote pods recreated"
        )
    # what failed to reach home meanwhile is retried at its API server's first answer, not after a backoff
    # grown to a minute (Reachability.on_answer_again): 30 s, the bound for statuses after a partition
    wait_until(
        lambda: all(restarts(home.get(Pod, name, namespace=offloaded)) == 1 for name in placed),
        30,
        "home pods back in touch, one restart each",
    )
    assert all_running(home, offloaded, "homeless", 2) is not None
