"""Node pools (issue 38, section 3), end to end: foreign-1 offered as a `gpu` pool and a `general`
pool through the stack config and `pulumi up`. Its two fake nodes are labelled as the two pools (and
the labels taken off after). The pools become two virtual nodes, served by the one virtual kubelet of
foreign-1; each shows the capacity of its own foreign node less that node's own pods, a pod that
selects the gpu virtual node at home runs on the gpu node there, and each virtual node's resource
metrics (what `kubectl top node` reads) count its own pods only. The config is put back after (by
the `installed` fixture).
"""

from __future__ import annotations

import functools
import json
from collections.abc import Iterator
from decimal import Decimal
from typing import Any, cast

import pytest
from lightkube import Client
from lightkube.resources.core_v1 import Node, Pod
from lightkube.utils.quantity import parse_quantity
from pulumi import automation as auto

from liqo_stack.dev.clusters import DevEnvironment
from liqo_stack.dev.external_runtime import ExternalRuntime
from liqo_stack.dev.pulumi_offline import PulumiEnvironment
from runtime.api import names
from tests.e2e.test_kubelet_api import kubelet_get
from tests.support.cli import kubectl, previewed
from tests.support.kube import (
    get_or_none,
    node_ready,
    offload,
    remote_pod,
    unoffload,
    wait_phase,
    wait_until,
)

pytestmark = [pytest.mark.clusters, pytest.mark.pulumi]

CLUSTER = "foreign-1"
POOL_LABEL = "e2e.liqo-stack.io/pool"  # on foreign-1's fake nodes, for the test's time only
POOLS = ("gpu", "general")
GPU_NODE, GENERAL_NODE = (names.virtual_node_name(CLUSTER, pool) for pool in POOLS)
LOCAL_CPU = 4  # what a pod of foreign-1's own holds on its gpu node


def foreign_nodes(foreign: Client) -> list[str]:
    """foreign-1's physical (kwok) nodes: the first is the gpu pool, the second the general one."""
    found = sorted(n.metadata.name for n in foreign.list(Node) if n.metadata and n.metadata.name)
    assert len(found) >= 2, found
    return found[:2]


def label_foreign_nodes(dev_env: DevEnvironment, pools: dict[str, str | None]) -> None:
    """`kubectl label node` in foreign-1, as its administrator would: node -> pool (None: unlabelled)."""
    for node, pool in pools.items():
        label = f"{POOL_LABEL}={pool}" if pool else f"{POOL_LABEL}-"
        done = kubectl(dev_env.kubeconfig(CLUSTER), "label", "node", node, label, "--overwrite")
        assert done.returncode == 0, done.stderr


def with_pools(config: dict[str, Any]) -> dict[str, Any]:
    pooled: dict[str, Any] = json.loads(json.dumps(config))
    for cluster in pooled["foreignClusters"]:
        if cluster["clusterId"] == CLUSTER:
            cluster["virtualNodes"] = [
                {"name": pool, "nodeSelector": {POOL_LABEL: pool}, "labels": {"pool": pool}} for pool in POOLS
            ]
    return pooled


@pytest.fixture
def pooled(
    dev_env: DevEnvironment, foreign: dict[str, Client], installed: auto.Stack, runtime: ExternalRuntime, home: Client
) -> Iterator[list[str]]:
    """foreign-1 as two pools, served with a kubelet API port each by the running virtual-kubelet
    process, which takes up the pools' VirtualNodes as `pulumi up` makes them (nobody restarts it).
    Yields its nodes (gpu, general). Put back by the `installed` fixture, as after any module that
    ran `pulumi up`: its `up` drains and deletes the pools' nodes, and the same process serves
    foreign-1's one virtual node again."""
    cluster = foreign[CLUSTER]
    nodes = foreign_nodes(cluster)
    declared = PulumiEnvironment.liqo_config(installed)
    label_foreign_nodes(dev_env, dict(zip(nodes, POOLS, strict=True)))
    try:
        PulumiEnvironment.set_liqo_config(installed, with_pools(declared))
        process = runtime.pid(f"kubelet-{CLUSTER}")
        installed.up(on_output=print)
        wait_until(lambda: all(node_ready(home, n) for n in (GPU_NODE, GENERAL_NODE)), 90, "both pools Ready")
        assert runtime.pid(f"kubelet-{CLUSTER}") == process, "served by the process that ran"
        yield nodes
    finally:
        label_foreign_nodes(dev_env, dict.fromkeys(nodes))


def cpu_of(node: Any) -> Decimal:
    return Decimal(str(parse_quantity((node.status.capacity or {})["cpu"])))


def own_requests(foreign: Client, node: str) -> Decimal:
    """The cpu requests of the pods foreign-1 runs for itself on `node` (offloaded ones carry an origin)."""
    pods: list[Any] = list(foreign.list(Pod, namespace="*", fields={"spec.nodeName": node}))
    return sum(
        (
            Decimal(str(parse_quantity(((c.resources and c.resources.requests) or {}).get("cpu", "0")) or 0))
            for p in pods
            if names.ORIGIN_LABEL not in (p.metadata.labels or {})
            and (p.status and p.status.phase) not in ("Succeeded", "Failed")
            for c in p.spec.containers
        ),
        Decimal(0),
    )


def pod_on_pool(name: str, namespace: str, pool: str) -> Pod:
    return cast(
        Pod,
        Pod.from_dict(
            {
                "metadata": {"name": name, "namespace": namespace},
                "spec": {"nodeSelector": {"pool": pool}, "containers": [{"name": "main", "image": "busybox"}]},
            }
        ),
    )


def running_there(foreign: Client, twin: str, name: str) -> Any:
    found: Any = remote_pod(foreign, twin, name)
    return found if found is not None and found.status.phase == "Running" else None


def metrics_pods(dev_env: DevEnvironment, home: Client, node: str) -> set[str]:
    """The pods a virtual node's `/metrics/resource` shows, asked as metrics-server asks it for
    `kubectl top node` (at the port the Node declares, with the API server's kubelet client certificate)."""
    declared: Any = home.get(Node, node)
    port = declared.status.daemonEndpoints.kubeletEndpoint.Port
    status, body = kubelet_get(port, "/metrics/resource", dev_env.pki_dir("home"), admin=True)
    assert status == 200, body
    return {
        line.split('pod="', 1)[1].split('"', 1)[0]
        for line in body.splitlines()
        if line.startswith("pod_memory_working_set_bytes{")
    }


@pytest.mark.usefixtures("metrics_servers")  # its nodes' /metrics/resource reads foreign-1's metrics API
def test_a_gpu_and_a_general_pool_are_two_virtual_nodes(
    pooled: list[str],
    dev_env: DevEnvironment,
    home: Client,
    foreign: dict[str, Client],
    unique_name: str,
) -> None:
    cluster, (gpu_there, general_there) = foreign[CLUSTER], pooled
    assert get_or_none(home, Node, names.virtual_node_name(CLUSTER)) is None, "the pools replace the one node"

    # capacity: each pool's own foreign node, less what foreign-1's own pods hold there, x 90 %
    local = cast(
        Pod,
        Pod.from_dict(
            {
                "metadata": {"name": unique_name, "namespace": "default"},
                "spec": {
                    "nodeName": gpu_there,
                    "containers": [
                        {"name": "main", "image": "busybox", "resources": {"requests": {"cpu": str(LOCAL_CPU)}}}
                    ],
                },
            }
        ),
    )
    cluster.create(local)
    try:

        def capacities_follow_the_pools() -> bool:
            expected = {
                virtual: (cpu_of(cluster.get(Node, there)) - own_requests(cluster, there)) * Decimal("0.9")
                for virtual, there in ((GPU_NODE, gpu_there), (GENERAL_NODE, general_there))
            }
            return all(cpu_of(home.get(Node, virtual)) == cpu for virtual, cpu in expected.items())

        wait_until(capacities_follow_the_pools, 60, "each pool's capacity: its node less its own pods, x 90 %")
        gpu_cpu, general_cpu = (cpu_of(home.get(Node, n)) for n in (GPU_NODE, GENERAL_NODE))
        assert general_cpu - gpu_cpu == LOCAL_CPU * Decimal("0.9"), "only the gpu pool lost the local pod's cpu"
    finally:
        cluster.delete(Pod, unique_name, namespace="default", grace_period=0)

    # placement: a pod that selects the gpu virtual node at home runs on the gpu node there
    offload(home, unique_name, {})
    wait_phase(home, unique_name, "Ready")
    twin = f"{unique_name}-home"
    try:
        for pool in POOLS:
            home.create(pod_on_pool(f"{pool}-job", unique_name, pool))
        for pool, virtual, there in (("gpu", GPU_NODE, gpu_there), ("general", GENERAL_NODE, general_there)):
            name = f"{pool}-job"
            running: Any = wait_until(functools.partial(running_there, cluster, twin, name), 60, f"{name} running")
            assert running.spec.nodeName == there, f"the {pool} pool's pod runs on its node only"
            assert running.spec.nodeSelector == {POOL_LABEL: pool}
            at_home: Any = home.get(Pod, f"{pool}-job", namespace=unique_name)
            assert at_home.spec.nodeName == virtual
            # `liqo-stack preview pod` shows the pod as it runs: on its own pool's nodes
            shown = previewed(dev_env, "-n", unique_name, name)[CLUSTER]
            assert shown["node"] == virtual and shown["remotePod"]["spec"]["nodeSelector"] == {POOL_LABEL: pool}

        # `kubectl top node`: each virtual node's resource metrics show its own pods only
        def each_its_own() -> dict[str, set[str]] | None:
            seen = {n: metrics_pods(dev_env, home, n) for n in (GPU_NODE, GENERAL_NODE)}
            return seen if all(seen.values()) else None

        seen = wait_until(each_its_own, 90, "both pools' pods measured")
        assert seen == {GPU_NODE: {"gpu-job"}, GENERAL_NODE: {"general-job"}}
    finally:
        for pool in POOLS:
            home.delete(Pod, f"{pool}-job", namespace=unique_name, grace_period=0)
        unoffload(home, unique_name)
