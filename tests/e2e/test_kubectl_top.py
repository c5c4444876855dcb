"""`kubectl top` through the virtual nodes, end to end: the home cluster's metrics-server scrapes each
virtual kubelet's `/metrics/resource`, which reads the foreign cluster's metrics API (its own
metrics-server over kwok's usage figures, set per pod by annotations) in the twin namespace.
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from lightkube import ApiError, Client
from lightkube.generic_resource import create_global_resource, create_namespaced_resource
from lightkube.utils.quantity import parse_quantity

from liqo_stack.dev.clusters import USAGE_CPU_ANNOTATION, USAGE_MEMORY_ANNOTATION, DevEnvironment
from liqo_stack.dev.external_runtime import ExternalRuntime
from tests.e2e.test_kubelet_api import granted, kubelet_get
from tests.support.cli import kubectl
from tests.support.kube import VIRTUAL_NODES, pod_on_each_virtual_node, wait_until

pytestmark = [pytest.mark.clusters, pytest.mark.pulumi, pytest.mark.usefixtures("metrics_servers")]

CLUSTERS = list(VIRTUAL_NODES)
CONTAINER = "main"
# what kwok says each pod uses (cpu, memory), as kubectl top prints it
USAGE = {"foreign-1": ("250m", "100Mi"), "foreign-2": ("120m", "64Mi")}
# two scrapes of kwok by the foreign metrics-server, then two of the virtual kubelet by the home one
# (10s resolution each), on a loaded machine
TOP_TIMEOUT = 150
# What `kubectl top` reads. The waits poll it through the API, and run kubectl once it answers: a
# kubectl process costs about 0.1 CPU-second, and two per poll for a minute slowed the other lanes.
PodMetrics = create_namespaced_resource("metrics.k8s.io", "v1beta1", "PodMetrics", "pods")
NodeMetrics = create_global_resource("metrics.k8s.io", "v1beta1", "NodeMetrics", "nodes")


@pytest.fixture(scope="module")
def pods(offloaded: str, home: Client) -> dict[str, str]:
    """One pod on each virtual node with its foreign usage set: cluster id -> pod name."""
    usage = {c: {USAGE_CPU_ANNOTATION: cpu, USAGE_MEMORY_ANNOTATION: memory} for c, (cpu, memory) in USAGE.items()}
    return pod_on_each_virtual_node(home, offloaded, "busy", CONTAINER, usage)


def memory_used(client: Client, kind: Any, name: str, namespace: str | None = None) -> Any:
    """The memory a pod's containers (or a node) use by its cluster's metrics API; None while it has none."""
    try:
        found: Any = client.get(kind, name, namespace=namespace) if namespace else client.get(kind, name)
    except ApiError as err:
        if err.status.code == 404:
            return None
        raise
    if kind is NodeMetrics:
        return parse_quantity(found["usage"]["memory"])
    containers = found.get("containers") or []
    return sum(parse_quantity(c["usage"]["memory"]) for c in containers) if containers else None


def top(kubeconfig: Path, *args: str) -> list[str] | None:
    """The columns of the one line `kubectl top ... --no-headers` prints, or None while it has nothing."""
    done = kubectl(kubeconfig, "top", *args, "--no-headers", timeout=30)
    return done.stdout.split() if done.returncode == 0 and done.stdout.strip() else None


@pytest.mark.parametrize("cluster_id", CLUSTERS)
def test_kubectl_top_pod_at_home_shows_the_foreign_usage(
    dev_env: DevEnvironment,
    home: Client,
    foreign: dict[str, Client],
    pods: dict[str, str],
    offloaded: str,
    cluster_id: str,
) -> None:
    name, (cpu, memory) = pods[cluster_id], USAGE[cluster_id]
    seen: dict[str, object] = {}

    def same() -> list[str] | None:
        used = memory_used(home, PodMetrics, name, offloaded)
        if used is None or used != memory_used(foreign[cluster_id], PodMetrics, name, f"{offloaded}-home"):
            return None
        at_home = top(dev_env.kubeconfig("home"), "pod", "-n", offloaded, name)
        direct = top(dev_env.kubeconfig(cluster_id), "pod", "-n", f"{offloaded}-home", name)
        seen.update(home=at_home, foreign=direct)
        return at_home if at_home is not None and at_home == direct else None

    found = wait_until(same, TOP_TIMEOUT, f"kubectl top pod equal at home and in {cluster_id} ({seen})")
    assert found[0] == name and found[2] == memory
    assert abs(int(found[1].removesuffix("m")) - int(cpu.removesuffix("m"))) <= 2, found  # kwok's rate, rounded


@pytest.mark.parametrize("cluster_id", CLUSTERS)
def test_kubectl_top_node_of_a_virtual_node_sums_its_pods(
    dev_env: DevEnvironment, home: Client, pods: dict[str, str], offloaded: str, cluster_id: str
) -> None:
    config = dev_env.kubeconfig("home")
    node = VIRTUAL_NODES[cluster_id]

    def matching() -> list[str] | None:
        if (
            memory_used(home, NodeMetrics, node) is None
            or memory_used(home, PodMetrics, pods[cluster_id], offloaded) is None
        ):
            return None
        pod, line = top(config, "pod", "-n", offloaded, pods[cluster_id]), top(config, "node", node)
        # NAME CPU(cores) CPU% MEMORY(bytes) MEMORY%: the node's only pod is this one
        return line if pod is not None and line is not None and [line[1], line[3]] == pod[1:3] else None

    line = wait_until(matching, TOP_TIMEOUT, f"kubectl top node {node} equal to its pod")
    assert line[0] == node and line[3] == USAGE[cluster_id][1]


ROLES = {"prober": "nodes/proxy", "scraper": "nodes/metrics"}


@pytest.fixture(scope="module")
def tokens(offloaded: str, dev_env: DevEnvironment) -> Iterator[dict[str, str]]:
    """Bearer tokens of home ServiceAccounts: `prober` may use nodes/proxy (not enough for metrics),
    `scraper` nodes/metrics (as metrics-server's role grants)."""
    config = dev_env.kubeconfig("home")
    for who, resource in ROLES.items():
        role = f"{offloaded}-{who}"
        for args in (
            ("create", "serviceaccount", who, "-n", offloaded),
            ("create", "clusterrole", role, "--verb=get", f"--resource={resource}"),
            ("create", "clusterrolebinding", role, f"--clusterrole={role}", f"--serviceaccount={offloaded}:{who}"),
        ):
            done = kubectl(config, *args)
            assert done.returncode == 0, done.stderr
        granted(config, offloaded, who, resource.removeprefix("nodes/"))
    yield {who: kubectl(config, "-n", offloaded, "create", "token", who).stdout.strip() for who in ROLES}
    for who in ROLES:
        for kind in ("clusterrolebinding", "clusterrole"):
            kubectl(config, "delete", kind, f"{offloaded}-{who}")


@pytest.mark.parametrize("cluster_id", CLUSTERS)
def test_the_resource_metrics_need_nodes_metrics(
    dev_env: DevEnvironment,
    runtime: ExternalRuntime,
    pods: dict[str, str],
    offloaded: str,
    tokens: dict[str, str],
    cluster_id: str,
) -> None:
    port, pki = runtime.kubelet_ports[cluster_id], dev_env.pki_dir("home")
    assert kubelet_get(port, "/metrics/resource", pki)[0] == 401
    status, body = kubelet_get(port, "/metrics/resource", pki, token=tokens["prober"])
    assert status == 403 and "metrics" in body, body
    labels = f'container="{CONTAINER}",namespace="{offloaded}",pod="{pods[cluster_id]}"'
    series = f"container_memory_working_set_bytes{{{labels}}}"

    def served() -> str | None:
        status, body = kubelet_get(port, "/metrics/resource", pki, token=tokens["scraper"])
        assert status == 200, body
        return body if series in body else None

    body = wait_until(served, TOP_TIMEOUT, f"{series} served")
    memory = {"100Mi": 100 << 20, "64Mi": 64 << 20}[USAGE[cluster_id][1]]
    assert f"{series} {memory} " in body
    assert "\nnode_cpu_usage_seconds_total " in body and "\nscrape_error 0" in body
    other = next(name for c, name in pods.items() if c != cluster_id)
    assert f'pod="{other}"' not in body  # only this node's pods
