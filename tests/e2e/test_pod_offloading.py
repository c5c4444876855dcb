"""Pods offloaded through the virtual nodes, end to end (seeds 002 and 004).

The vanilla scheduler places pods on the virtual nodes; the virtual kubelets turn them into
ShadowPods in the twin namespaces; the foreign agents run them; status comes back home.
"""

from __future__ import annotations

import time
from typing import Any, cast

import pytest
from lightkube import ApiError, Client
from lightkube.resources.core_v1 import Node, Pod

from liqo_stack.dev.external_runtime import ExternalRuntime
from liqo_stack.dev.workloads import apply_deployment, example_deployment
from runtime.api import names
from tests.e2e.harness import offload, wait_phase, wait_until

pytestmark = [pytest.mark.clusters, pytest.mark.pulumi]

VIRTUAL_NODES = {"foreign-1": "liqo-foreign-1", "foreign-2": "liqo-foreign-2"}


def node_ready(home: Client, name: str) -> bool:
    try:
        node = home.get(Node, name)
    except ApiError:
        return False
    conditions = (node.status.conditions if node.status else None) or []
    return any(c.type == "Ready" and c.status == "True" for c in conditions)


def home_pods(home: Client, namespace: str, app: str) -> list[Pod]:
    return list(home.list(Pod, namespace=namespace, labels={"app": app}))


def all_running(home: Client, namespace: str, app: str, count: int) -> list[Pod] | None:
    pods = home_pods(home, namespace, app)
    running = [p for p in pods if p.status and p.status.phase == "Running" and not p.metadata.deletionTimestamp]  # type: ignore[union-attr]
    return running if len(running) == count else None


def remote_pod(foreign: Client, twin: str, name: str) -> Pod | None:
    try:
        return foreign.get(Pod, name, namespace=twin)
    except ApiError as err:
        if err.status.code == 404:
            return None
        raise


def restarts(pod: Pod) -> int:
    statuses = (pod.status.containerStatuses if pod.status else None) or []
    return sum(s.restartCount for s in statuses)


@pytest.fixture(scope="module")
def offloaded(runtime: ExternalRuntime, home: Client) -> str:
    wait_until(lambda: all(node_ready(home, n) for n in VIRTUAL_NODES.values()), 60, "virtual nodes Ready")
    offload(home, "remote-apps", {"podOffloadingStrategy": "Remote"})
    wait_phase(home, "remote-apps", "Ready")
    return "remote-apps"


def test_virtual_nodes_show_the_shared_capacity(offloaded: str, home: Client, foreign: dict[str, Client]) -> None:
    for cluster_id, name in VIRTUAL_NODES.items():
        node = home.get(Node, name)
        assert node.metadata and node.metadata.labels
        assert node.metadata.labels[names.TYPE_LABEL] == names.VIRTUAL_NODE_TYPE
        assert node.metadata.labels[names.REMOTE_CLUSTER_ID_LABEL] == cluster_id
        assert node.spec and any(t.key == names.VIRTUAL_NODE_TAINT_KEY for t in node.spec.taints or [])
        assert node.status and node.status.capacity and int(node.status.capacity["pods"]) > 0
        kinds = {c.type for c in node.status.conditions or []}
        assert {"Ready", "MemoryPressure", "DiskPressure", "PIDPressure"} <= kinds


def test_the_scheduler_spreads_pods_over_both_virtual_nodes_and_they_run_remotely(
    offloaded: str, home: Client, foreign: dict[str, Client]
) -> None:
    apply_deployment(home, example_deployment("spread", offloaded, 6))
    running = wait_until(lambda: all_running(home, offloaded, "spread", 6), 90, "6 offloaded pods Running at home")
    placed = {cast(Any, p.spec).nodeName for p in running}
    assert placed == set(VIRTUAL_NODES.values())
    for pod in running:
        cluster_id = cast(Any, pod.spec).nodeName.removeprefix("liqo-")
        remote = remote_pod(foreign[cluster_id], f"{offloaded}-home", cast(Any, pod.metadata).name)
        assert remote is not None and remote.status and remote.status.phase == "Running"
        assert cast(Any, remote.metadata).labels[names.ORIGIN_LABEL] == "home"
        assert cast(Any, pod.status).podIP == remote.status.podIP


def test_a_remote_pod_deleted_by_hand_comes_back_and_counts_as_a_restart(
    offloaded: str, home: Client, foreign: dict[str, Client]
) -> None:
    apply_deployment(home, example_deployment("resilient", offloaded, 1))
    pod = wait_until(lambda: all_running(home, offloaded, "resilient", 1), 90, "pod Running")[0]
    name, cluster_id = pod.metadata.name, pod.spec.nodeName.removeprefix("liqo-")
    twin_client, twin = foreign[cluster_id], f"{offloaded}-home"
    first = remote_pod(twin_client, twin, name)
    assert first is not None and restarts(pod) == 0
    twin_client.delete(Pod, name, namespace=twin, grace_period=0)

    def recreated() -> bool:
        again: Any = remote_pod(twin_client, twin, name)
        return bool(again and again.metadata.uid != cast(Any, first).metadata.uid and again.status.phase == "Running")

    wait_until(recreated, 60, "remote pod recreated")
    wait_until(lambda: restarts(home.get(Pod, name, namespace=offloaded)) == 1, 30, "home restart count 1")


def test_deleting_the_home_pod_deletes_the_remote_one(offloaded: str, home: Client, foreign: dict[str, Client]) -> None:
    apply_deployment(home, example_deployment("leaving", offloaded, 1))
    pod = wait_until(lambda: all_running(home, offloaded, "leaving", 1), 90, "pod Running")[0]
    name, cluster_id = pod.metadata.name, pod.spec.nodeName.removeprefix("liqo-")
    home.delete(Pod, name, namespace=offloaded)
    wait_until(lambda: remote_pod(foreign[cluster_id], f"{offloaded}-home", name) is None, 60, "remote pod deleted")
    wait_until(lambda: not any(p.metadata.name == name for p in home_pods(home, offloaded, "leaving")), 60, "gone")  # type: ignore[union-attr]


def test_a_pod_forced_onto_a_virtual_node_of_a_namespace_not_offloaded_backs_off(home: Client, offloaded: str) -> None:
    toleration = {"key": names.VIRTUAL_NODE_TAINT_KEY, "operator": "Exists", "effect": "NoExecute"}
    body = {
        "metadata": {"name": "forced", "namespace": "default"},
        "spec": {
            "nodeName": VIRTUAL_NODES["foreign-1"],
            "tolerations": [toleration],
            "containers": [{"name": "app", "image": "nginx"}],
        },
    }
    home.create(cast(Pod, Pod.from_dict(body)))
    try:
        wait_until(
            lambda: (
                (s := home.get(Pod, "forced", namespace="default").status) is not None
                and s.reason == "OffloadingBackOff"
                and s.phase == "Pending"
            ),
            30,
            "pod Pending with reason OffloadingBackOff",
        )
    finally:
        home.delete(Pod, "forced", namespace="default", grace_period=0)


def test_a_restarted_virtual_kubelet_keeps_every_remote_pod(
    offloaded: str, runtime: ExternalRuntime, home: Client, foreign: dict[str, Client]
) -> None:
    apply_deployment(home, example_deployment("steady", offloaded, 100))
    wait_until(lambda: all_running(home, offloaded, "steady", 100), 240, "100 pods Running at home")
    twin = f"{offloaded}-home"

    def remote_uids() -> dict[str, str]:
        return {
            f"{cluster_id}/{cast(Any, p).metadata.name}": str(cast(Any, p).metadata.uid)
            for cluster_id, client in foreign.items()
            for p in client.list(Pod, namespace=twin, labels={"app": "steady"})
        }

    before = remote_uids()
    assert len(before) == 100
    for cluster_id in VIRTUAL_NODES:
        runtime.kill(f"kubelet-{cluster_id}")
    time.sleep(2)
    for cluster_id in VIRTUAL_NODES:
        runtime.start(f"kubelet-{cluster_id}")
    time.sleep(10)  # long enough for a restarted kubelet to have done damage, were it to do any
    assert remote_uids() == before
    assert all_running(home, offloaded, "steady", 100) is not None
