"""The stack installed on the dev clusters (once per test module), and the runtime running against it."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from lightkube import ApiError, Client
from lightkube.resources.core_v1 import Node
from pulumi import automation as auto

from liqo_stack.dev.clusters import ClusterLayout, DevEnvironment
from liqo_stack.dev.external_runtime import ExternalRuntime
from liqo_stack.dev.pulumi_offline import PulumiEnvironment
from runtime.api import names
from runtime.kube.resources import NamespaceOffloadingResource
from tests.support.kube import VIRTUAL_NODES, free_port, get_or_none, node_ready, offload, wait_phase, wait_until

# negotiated for both peerings: `liqo` claims get the default one (test_storage.py provisions it)
STORAGE_CLASSES = [{"storageClassName": "fast-ssd"}, {"storageClassName": "local-static", "default": True}]


@pytest.fixture(scope="session")
def webhook_port() -> int:
    return free_port()


# Module scope: test_stack.py installs and destroys its own stack on the same clusters.
@pytest.fixture(scope="module")
def installed(
    dev_env: DevEnvironment,
    pulumi_env: PulumiEnvironment,
    project_dir: Path,
    webhook_port: int,
    session_layout: ClusterLayout,
) -> Iterator[auto.Stack]:
    """The stack with foreign-1 in region europe and foreign-2 in us-west + staging; their pod
    ranges are declared, so foreign-2's (the same as foreign-1's) is remapped at home."""
    stack = pulumi_env.stack_for_directory(project_dir, "offloading")
    config = {
        "home": {
            "clusterId": "home",
            "kubeconfigPath": str(dev_env.kubeconfig("home")),
            "podCIDR": session_layout.pod_cidr("home"),
        },
        "foreignClusters": [
            {
                "clusterId": "foreign-1",
                "kubeconfigPath": str(dev_env.kubeconfig("foreign-1")),
                "labels": {"region": "europe"},
                "podCIDR": session_layout.pod_cidr("foreign-1"),
                "storageClasses": STORAGE_CLASSES,
            },
            {
                "clusterId": "foreign-2",
                "kubeconfigPath": str(dev_env.kubeconfig("foreign-2")),
                "labels": {"region": "us-west", "staging": "true"},
                "podCIDR": session_layout.pod_cidr("foreign-2"),
                "storageClasses": STORAGE_CLASSES,
            },
        ],
        "runtime": {"mode": "external", "webhookPort": webhook_port},
        "virtualKubelet": {"healthCheckIntervalSeconds": 2, "failureThreshold": 2},
    }
    pulumi_env.set_liqo_config(stack, config)
    stack.up(on_output=print)
    try:
        yield stack
    finally:
        stack.destroy(on_output=print)
        stack.workspace.remove_stack("offloading")


@pytest.fixture(scope="module")
def runtime(
    installed: auto.Stack,
    dev_env: DevEnvironment,
    foreign_ids: list[str],
    tmp_path_factory: pytest.TempPathFactory,
    webhook_port: int,
    request: pytest.FixtureRequest,
) -> Iterator[ExternalRuntime]:
    kubeconfigs = {cluster_id: dev_env.kubeconfig(cluster_id) for cluster_id in ["home", *foreign_ids]}
    state = tmp_path_factory.mktemp("runtime")
    kubelet_ports = {cluster_id: free_port() for cluster_id in foreign_ids}  # never a port someone else has
    running = ExternalRuntime(
        kubeconfigs,
        "home",
        webhook_port=webhook_port,
        kubelet_ports=kubelet_ports,
        state_dir=state,
        leader_election=getattr(request.module, "LEADER_ELECTION", False),  # the failover tests' replicas
    )
    running.start_all()
    home = dev_env.client("home")

    def served_by_this_runtime(cluster_id: str) -> bool:
        """The virtual Node outlives the stack of the previous module (nothing deletes it), still
        Ready with its old kubelet port for a while: wait until this runtime's kubelet owns it."""
        node: Any = get_or_none(home, Node, names.virtual_node_name(cluster_id))
        endpoint = node and node.status and node.status.daemonEndpoints and node.status.daemonEndpoints.kubeletEndpoint
        return bool(endpoint and endpoint.Port == kubelet_ports[cluster_id] and node_ready(home, node.metadata.name))

    wait_until(lambda: all(map(served_by_this_runtime, foreign_ids)), 90, "the virtual nodes served by this runtime")
    try:
        yield running
    finally:
        # unoffload what the tests offloaded while the controllers still run (they hold finalizers)
        home = dev_env.client("home")

        def offloadings() -> list[Any] | None:
            """None while a restarted API server still says its custom resources are (re)initializing."""
            try:
                return list(home.list(NamespaceOffloadingResource, namespace="*"))
            except ApiError as err:
                if err.status.code == 429:
                    return None
                raise

        served = wait_until(lambda: (found := offloadings()) is not None and (found,), 60, "custom resources served")
        for offloading in served[0]:
            home.delete(NamespaceOffloadingResource, offloading.metadata.name, namespace=offloading.metadata.namespace)
        wait_until(lambda: offloadings() == [], 60, "all unoffloaded")
        running.stop_all()


@pytest.fixture(scope="module")
def offloaded(runtime: ExternalRuntime, home: Client, request: pytest.FixtureRequest) -> str:
    """A namespace named after the test module, offloaded with the Remote strategy to both clusters."""
    namespace: str = request.module.__name__.rpartition(".")[2].removeprefix("test_").replace("_", "-")
    wait_until(lambda: all(node_ready(home, n) for n in VIRTUAL_NODES.values()), 60, "virtual nodes Ready")
    offload(home, namespace, {"podOffloadingStrategy": "Remote"})
    wait_phase(home, namespace, "Ready")
    return namespace
