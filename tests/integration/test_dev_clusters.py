"""The dev clusters are real control planes: workloads run on kwok nodes, foreign Nodes are left alone."""

from __future__ import annotations

import ipaddress
import json
import os
import re
import signal
import socket
import subprocess
import threading
import time
from pathlib import Path
from typing import Any, cast

import pytest
import yaml
from lightkube import Client
from lightkube.models.core_v1 import NodeCondition
from lightkube.models.meta_v1 import ObjectMeta
from lightkube.resources.coordination_v1 import Lease
from lightkube.resources.core_v1 import Namespace, Node, Pod, Service
from lightkube.types import PatchType

from liqo_stack.dev import clusters, ports
from liqo_stack.dev.clusters import KWOK_NODE_ANNOTATION, KWOKCTL_PORT_OPTIONS, ClusterLayout, DevEnvironment, env_name
from liqo_stack.dev.workloads import apply_deployment, example_deployment, wait_pods_running
from tests.support.cli import kubectl
from tests.support.kube import node_ready, wait_until

pytestmark = pytest.mark.clusters


def test_every_cluster_reports_the_pinned_kubernetes_version(dev_env: DevEnvironment, foreign_ids: list[str]) -> None:
    for cluster_id in ["home", *foreign_ids]:
        kubeconfig = str(dev_env.kubeconfig(cluster_id))
        command = [str(dev_env.bin_dir / "kubectl"), "--kubeconfig", kubeconfig, "version", "-o", "json"]
        out = subprocess.run(command, capture_output=True, text=True, check=True).stdout
        assert json.loads(out)["serverVersion"]["gitVersion"] == "v1.36.3", cluster_id


def test_each_control_plane_runs_single_instance_components(dev_env: DevEnvironment, home: Client) -> None:
    """No leader election (no Lease renewed every 2 s) and an etcd that does not fsync: a throwaway
    cluster's one instance of each. Its node lifecycle controller looks at the Nodes every 5 s, as
    Kubernetes' does by default (kwokctl's override of 25 s is replaced, not followed)."""
    args = dev_env.component_commands("home", ("etcd", "kube-scheduler", "kube-controller-manager"))
    assert "--leader-elect=false" in args["kube-scheduler"]
    assert "--leader-elect=false" in args["kube-controller-manager"]
    assert "--node-monitor-period=5s" in args["kube-controller-manager"]
    assert not any(arg.startswith("--node-monitor-period=25") for arg in args["kube-controller-manager"])
    assert "--unsafe-no-fsync=true" in args["etcd"]
    leases = {lease.metadata.name for lease in home.list(Lease, namespace="kube-system") if lease.metadata}
    assert not leases & {"kube-scheduler", "kube-controller-manager"}


def test_each_clusters_components_listen_on_ports_handed_out_to_it_alone(
    dev_env: DevEnvironment, foreign_ids: list[str]
) -> None:
    """The clusters start side by side: each component listens where liqo_stack.dev.ports said, not
    on a port kwokctl picked (two kwokctls started at once pick the same ones)."""
    handed_out: dict[str, set[int]] = {}
    for cluster_id in ["home", *foreign_ids]:
        config = yaml.safe_load_all((dev_env.state_dir / f"kwokctl-{cluster_id}.yaml").read_text())
        options = next(doc["options"] for doc in config if doc.get("kind") == "KwokctlConfiguration")
        handed_out[cluster_id] = {options[name] for name in KWOKCTL_PORT_OPTIONS}
        assert len(handed_out[cluster_id]) == len(KWOKCTL_PORT_OPTIONS), cluster_id
        recorded = (dev_env.kwok_workdir / "clusters" / cluster_id / "kwok.yaml").read_text()
        listening = {int(port) for port in re.findall(r"(?:127\.0\.0\.1:|--secure-port=)(\d+)", recorded)}
        assert listening == handed_out[cluster_id], cluster_id
        assert dev_env.api_server_address(cluster_id) == f"127.0.0.1:{options['kubeApiserverPort']}"
    assert sum(len(p) for p in handed_out.values()) == len(set().union(*handed_out.values())), "no port shared"


def test_deployment_in_each_foreign_cluster_runs_on_kwok_nodes(foreign: dict[str, Client], unique_name: str) -> None:
    for cluster_id, client in foreign.items():
        apply_deployment(client, example_deployment(unique_name, unique_name, replicas=4))
        pods = wait_pods_running(client, unique_name, {"app": unique_name}, count=4, timeout=90)
        assert len(pods) == 4
        for pod in pods:
            assert pod.spec and pod.spec.nodeName and pod.spec.nodeName.startswith(f"{cluster_id}-worker-")
            assert pod.status and pod.status.podIP, "kwok assigns pod IPs"
        client.delete(Namespace, unique_name)


def test_each_cluster_hands_out_pod_and_service_ips_from_its_own_ranges(
    dev_env: DevEnvironment, session_layout: ClusterLayout, unique_name: str
) -> None:
    for cluster_id in session_layout.cluster_ids():
        client = dev_env.client(cluster_id)
        apply_deployment(client, example_deployment(unique_name, unique_name, replicas=2))
        pods = wait_pods_running(client, unique_name, {"app": unique_name}, count=2, timeout=90)
        pod_range = ipaddress.ip_network(session_layout.pod_cidr(cluster_id))
        assert all(ipaddress.ip_address(p.status.podIP) in pod_range for p in pods if p.status and p.status.podIP)
        service: Any = Service.from_dict({
            "metadata": {"name": unique_name, "namespace": unique_name},
            "spec": {"selector": {"app": unique_name}, "ports": [{"port": 80}]},
        })  # fmt: skip
        created: Any = client.create(service)
        service_range = ipaddress.ip_network(session_layout.service_cidr(cluster_id))
        assert ipaddress.ip_address(created.spec.clusterIP) in service_range, cluster_id
        client.delete(Namespace, unique_name)
        wait_until_gone(client, unique_name)


def wait_until_gone(client: Client, namespace: str, timeout: float = 60) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if not [n for n in client.list(Namespace) if n.metadata and n.metadata.name == namespace]:
            return
        time.sleep(0.5)
    raise TimeoutError(f"namespace {namespace} still there after {timeout:.0f}s")


def test_waiting_for_pods_reports_them_as_they_turn_running(foreign: dict[str, Client], unique_name: str) -> None:
    client = foreign["foreign-1"]
    seen: list[str] = []
    apply_deployment(client, example_deployment(unique_name, unique_name, replicas=3))
    try:
        wait_pods_running(client, unique_name, {"app": unique_name}, count=3, timeout=90, report=seen.append)
    finally:
        client.delete(Namespace, unique_name)
    assert seen[-1] == "3/3 Running"
    assert len(seen) == len(set(seen)), "a summary is reported when it changes, not on every poll"
    assert all(line.split("/")[1].startswith("3 Running") for line in seen), seen


def test_fake_nodes_have_the_requested_capacity(foreign: dict[str, Client]) -> None:
    for client in foreign.values():
        nodes = [n for n in client.list(Node) if n.metadata and n.metadata.annotations]
        assert len(nodes) == 2
        for node in nodes:
            assert node.status and node.status.allocatable
            assert node.status.allocatable["cpu"] == "16"
            assert node.status.allocatable["memory"] == "64Gi"
            assert node.status.allocatable["pods"] == "110"


def test_kwok_leaves_nodes_without_its_marker_alone(home: Client, unique_name: str) -> None:
    """A Node registered by someone else (our virtual kubelet, later) keeps the status its creator writes."""
    node = Node(metadata=ObjectMeta(name=unique_name, labels={"liqo.io/type": "virtual-node"}))
    home.create(node)
    try:
        written = [
            NodeCondition(type="Ready", status="False", reason="WrittenByTest", message="not kwok's"),
        ]
        home.patch(
            Node.Status,
            unique_name,
            {"status": {"conditions": [c.to_dict() for c in written], "capacity": {"cpu": "3", "pods": "7"}}},
            patch_type=PatchType.MERGE,
        )
        pod_name = f"{unique_name}-pod"
        home.create(
            cast(
                Pod,
                Pod.from_dict(
                    {
                        "metadata": {"name": pod_name, "namespace": "default"},
                        "spec": {"nodeName": unique_name, "containers": [{"name": "c", "image": "nginx"}]},
                    }
                ),
            )
        )
        # a sentinel kwok does manage, created after: each of kwok's watches (Nodes, Pods) delivers
        # events in order, so once kwok has made this node Ready and run its pod, it has been handed
        # the unmarked node's status patch and its pod, and chose to leave them alone
        kwok_acted_on_sentinel(home, f"{unique_name}-kwok")
        seen = home.get(Node, unique_name)
        assert seen.metadata and KWOK_NODE_ANNOTATION not in (seen.metadata.annotations or {})
        assert seen.status and seen.status.conditions
        assert [(c.type, c.status, c.reason) for c in seen.status.conditions] == [("Ready", "False", "WrittenByTest")]
        assert seen.status.capacity == {"cpu": "3", "pods": "7"}
        pod = home.get(Pod, pod_name, namespace="default")
        assert pod.status is not None
        assert pod.status.phase == "Pending", "no kubelet of kwok's may run a pod bound to a foreign node"
        assert not pod.status.podIP
        home.delete(Pod, pod_name, namespace="default", grace_period=0)
    finally:
        home.delete(Node, unique_name)


def kwok_acted_on_sentinel(client: Client, name: str) -> None:
    """A Node marked for kwok and a pod bound to it: until kwok has made the node Ready and the pod
    Running; both are deleted again."""
    client.create(
        cast(Node, Node.from_dict({"metadata": {"name": name, "annotations": {KWOK_NODE_ANNOTATION: "fake"}}}))
    )
    pod = f"{name}-pod"
    try:
        body = {
            "metadata": {"name": pod, "namespace": "default"},
            "spec": {"nodeName": name, "containers": [{"name": "c", "image": "nginx"}]},
        }
        client.create(cast(Pod, Pod.from_dict(body)))
        wait_until(lambda: node_ready(client, name), 60, f"kwok made {name} Ready")
        wait_until(lambda: cast(Any, client.get(Pod, pod, namespace="default")).status.phase == "Running", 60, pod)
    finally:
        client.delete(Pod, pod, namespace="default", grace_period=0)
        client.delete(Node, name)


def test_dev_env_exports_drive_kubectl_by_context(dev_env: DevEnvironment, foreign_ids: list[str]) -> None:
    exports = dev_env.env_exports()
    for cluster_id in ["home", *foreign_ids]:
        assert any(line.startswith(f"export {env_name(cluster_id)}=") for line in exports)
    script = "\n".join(
        [*exports, "kubectl --context foreign-1 get nodes -o name", "kubectl --context home get ns default -o name"]
    )
    clean_path = {k: v for k, v in os.environ.items() if k != "KUBECONFIG"}
    out = subprocess.run(["bash", "-c", script], env=clean_path, capture_output=True, text=True, check=True).stdout
    assert "node/foreign-1-worker-0" in out
    assert "namespace/default" in out


def test_a_metrics_server_started_on_demand_serves_and_once_removed_leaves_discovery_whole(
    dev_env: DevEnvironment, foreign_ids: list[str]
) -> None:
    cluster_id = foreign_ids[-1]
    server, client = dev_env.metrics_server(cluster_id), dev_env.client(cluster_id)

    def api_groups() -> subprocess.CompletedProcess[str]:
        done = kubectl(dev_env.kubeconfig(cluster_id), "api-versions", timeout=30)
        return cast(subprocess.CompletedProcess[str], done)

    assert server.pid() is None, "the session's layout starts no metrics-server"
    assert "metrics.k8s.io/v1beta1" not in api_groups().stdout
    try:
        server.ensure(client)
        served = wait_until(
            lambda: (done := api_groups()).returncode == 0 and "metrics.k8s.io/v1beta1" in done.stdout,
            60,
            f"{cluster_id}'s API server serving metrics.k8s.io",
        )
        assert served and server.pid() is not None
    finally:
        server.remove(client)
    assert server.pid() is None
    after = api_groups()
    assert after.returncode == 0 and not after.stderr, after.stderr  # no "couldn't get resource list"
    assert "metrics.k8s.io/v1beta1" not in after.stdout


def test_up_again_keeps_the_running_control_planes(dev_env: DevEnvironment, session_layout: ClusterLayout) -> None:
    before = sorted(dev_env.processes())
    assert before, "the session's clusters run as processes under the dev state directory"
    messages: list[str] = []
    dev_env.up(session_layout, progress=messages.append)
    assert sorted(dev_env.processes()) == before
    running = [m for m in messages if "already running" in m]  # in any order: the clusters are looked at side by side
    assert sorted(running) == sorted(f"{c}: already running" for c in session_layout.cluster_ids())


def test_up_again_starts_a_controller_manager_that_had_exited(
    dev_env: DevEnvironment, session_layout: ClusterLayout, foreign: dict[str, Client], unique_name: str
) -> None:
    """kube-controller-manager exits for good when its API server is not healthy within 10 s of its
    start, which a loaded machine's was not: the cluster then made no pod for a Deployment. `up`
    finds it gone and starts it again."""
    pid_file = dev_env.kwok_workdir / "clusters" / "foreign-2" / "pids" / "kube-controller-manager.pid"
    os.kill(int(pid_file.read_text()), signal.SIGKILL)
    wait_until(lambda: not any(p == int(pid_file.read_text()) for p in dev_env.processes()), timeout=30)
    messages: list[str] = []
    dev_env.up(session_layout, progress=messages.append)
    assert any(m.startswith("foreign-2: kube-controller-manager had exited") for m in messages), messages
    client = foreign["foreign-2"]
    apply_deployment(client, example_deployment(unique_name, unique_name, replicas=2))
    try:
        assert len(wait_pods_running(client, unique_name, {"app": unique_name}, count=2, timeout=90)) == 2
    finally:
        client.delete(Namespace, unique_name)


def test_a_control_plane_stopped_twice_serves_again_each_time(
    dev_env: DevEnvironment, foreign: dict[str, Client]
) -> None:
    """The second stop kills components this process relaunched (its children): their main thread
    turns zombie while other threads still hold the ports, which the relaunch must wait out. While
    stopped, its port refuses connections, as a port nobody listens on does (a reset after accepting
    one is retried by Kubernetes' clients for 10 s and more), and is not handed out to a new cluster."""
    server = yaml.safe_load(dev_env.kubeconfig("foreign-2").read_text())["clusters"][0]["cluster"]["server"]
    port = int(server.rsplit(":", 1)[1])
    for _ in range(2):
        with dev_env.api_server_stopped("foreign-2"):
            with pytest.raises(ConnectionRefusedError):
                socket.create_connection((ports.LOOPBACK, port), timeout=5).close()
            assert not ports.is_unbound(port)
        assert foreign["foreign-2"].get(Namespace, "default").metadata is not None


def test_a_stopped_control_planes_ports_are_never_handed_out_as_it_dies(
    dev_env: DevEnvironment, foreign: dict[str, Client], monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    """Between the kill and the hold of its ports, another session's `hand_out` (their hand-out expired
    long ago) must not pick one: its listener, bound later, would find the relaunched component on it.
    Another session is a thread here, asking for the controller-manager's port once that has died."""
    cluster_dir = dev_env.kwok_workdir / "clusters" / "foreign-2"
    controller_manager = int((cluster_dir / "pids" / "kube-controller-manager.pid").read_text())
    command = dev_env.component_commands("foreign-2", ("kube-controller-manager",))["kube-controller-manager"]
    port = ports.secure_port(command)
    assert port is not None
    monkeypatch.setattr(ports, "HIGHEST_PORT", port)  # the other session looks at that port alone
    monkeypatch.setattr(ports, "LOWEST_PORT", port - 1)
    record = tmp_path / "ports-handed-out.json"  # empty: as if its hand-out had expired
    monkeypatch.setattr(ports, "_record", lambda: record)  # and the machine's record is left alone
    outcome: dict[str, object] = {}

    def another_session() -> None:
        try:
            outcome["handed out"] = ports.hand_out(1)
        except OSError as refused:
            outcome["refused"] = refused

    asking: list[threading.Thread] = []
    real_alive = clusters._alive

    def alive(pid: int) -> bool:
        found = real_alive(pid)
        if pid == controller_manager and not found and not asking:  # dead, its port not held yet
            asking.append(threading.Thread(target=another_session))
            asking[0].start()
            asking[0].join(timeout=30)
        return found

    monkeypatch.setattr(clusters, "_alive", alive)
    with dev_env.api_server_stopped("foreign-2"):
        pass
    assert asking, "the controller-manager was seen dead"
    assert "handed out" not in outcome, f"port {port} of the stopped controller-manager was handed out: {outcome}"
    assert foreign["foreign-2"].get(Namespace, "default").metadata is not None
