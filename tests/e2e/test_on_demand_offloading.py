"""On-demand offloading: a namespace labelled `liqo-stack.io/on-demand-offloading=true` is offloaded when
a pod asks for a virtual node, its waiting pods then run remotely by themselves, and it is unoffloaded
once no pod has been on a virtual node for the namespace's grace period. Prints each pod's time from
creation to Running in the foreign cluster."""

from __future__ import annotations

import json
import subprocess
import time
from functools import partial
from typing import Any

import pytest
from lightkube import Client
from lightkube.resources.core_v1 import Event as CoreEvent
from lightkube.resources.core_v1 import Node, Pod

from liqo_stack.declaring.config import OnDemandConfig
from liqo_stack.dev.clusters import DevEnvironment
from liqo_stack.dev.external_runtime import ExternalRuntime
from runtime.api import names
from runtime.api.advertisement import available_by_node, loads_of
from runtime.api.resources import NamespaceOffloadingResource
from runtime.controllers.ondemand import WATCHED_METRIC
from tests.support.kube import create_namespace, get_or_none, metric_samples, remote_pod, twin_gone, wait_until

pytestmark = [pytest.mark.clusters, pytest.mark.pulumi]


def kubectl(dev_env: DevEnvironment, *args: str, stdin: str | None = None) -> str:
    command = [str(dev_env.bin_dir / "kubectl"), "--kubeconfig", str(dev_env.kubeconfig("home")), *args]
    done = subprocess.run(command, input=stdin, capture_output=True, text=True, check=False)
    assert done.returncode == 0, f"kubectl {' '.join(args)}: {done.stderr}"
    return done.stdout


def pod_manifest(namespace: str, name: str, spec: dict[str, Any]) -> str:
    container = {"name": "app", "image": "registry.k8s.io/pause:3.9"}
    pod = {"apiVersion": "v1", "kind": "Pod", "metadata": {"name": name, "namespace": namespace}}
    return json.dumps({**pod, "spec": {"containers": [container], **spec}})


def reasons(home: Client, namespace: str) -> list[str]:
    events: list[Any] = list(home.list(CoreEvent, namespace=namespace))
    return [e.reason for e in events if e.involvedObject.kind == "Namespace"]


def offloading(home: Client, namespace: str) -> Any:
    return get_or_none(home, NamespaceOffloadingResource, names.NAMESPACE_OFFLOADING_NAME, namespace)


def running_remotely(home: Client, foreign: dict[str, Client], namespace: str, name: str) -> bool:
    pod: Any = get_or_none(home, Pod, name, namespace)
    twin = ((offloading(home, namespace) or {}).get("status") or {}).get("remoteNamespaceName")
    node = pod.spec.nodeName if pod is not None else None
    cluster = next((c for c in foreign if node == names.virtual_node_name(c)), None)
    if cluster is None or not twin:
        return False
    remote = remote_pod(foreign[cluster], twin, name)
    return remote is not None and remote.status is not None and remote.status.phase == "Running"


def on_demand_namespace(home: Client, dev_env: DevEnvironment, namespace: str) -> None:
    create_namespace(home, namespace, {names.ON_DEMAND_LABEL: "true"})
    kubectl(dev_env, "annotate", "namespace", namespace, f"{names.ON_DEMAND_GRACE_PERIOD_ANNOTATION}=2s")


def opt_out(dev_env: DevEnvironment, *namespaces: str) -> None:
    """Without the label nothing offloads them again (the fixture unoffloads what a failed test leaves)."""
    for namespace in namespaces:
        kubectl(dev_env, "label", "namespace", namespace, f"{names.ON_DEMAND_LABEL}-")


def test_the_pods_at_home_are_watched_only_while_a_namespace_is_on_demand(
    runtime: ExternalRuntime, home: Client, dev_env: DevEnvironment, unique_name: str
) -> None:
    """The controller-manager decodes no pod event of the cluster for on-demand offloading while no
    namespace is opted in and no offloading of its own remains (first in the module: the others leave
    their namespaces opted out, but a failed one may leave an offloading in use)."""
    url = wait_until(lambda: runtime.probes_url("controller-manager"), 60, "the controller-manager's probes")

    def watched() -> float | None:
        return metric_samples(url, WATCHED_METRIC).get(())

    wait_until(lambda: watched() == 0, 60, "no namespace on demand: the pods at home not watched")
    namespace = unique_name[:40]
    on_demand_namespace(home, dev_env, namespace)
    try:
        wait_until(lambda: watched() == 1, 30, "a namespace opted in: the pods at home watched")
    finally:
        opt_out(dev_env, namespace)
    wait_until(lambda: watched() == 0, 30, "the namespace opted out: the watches stopped")


def test_a_pod_asking_for_a_virtual_node_offloads_its_namespace_until_unused(
    runtime: ExternalRuntime, home: Client, foreign: dict[str, Client], dev_env: DevEnvironment, unique_name: str
) -> None:
    # a nodeSelector alone: unschedulable, the virtual nodes' taint not tolerated outside offloaded namespaces
    # (admitted before the offloading exists, so the controller gives it the toleration: PodsPlacedOnDemand);
    # runtimeClassName liqo: bound to a virtual node at once, backing off there until the namespace is offloaded.
    # One namespace each: the pod webhook refuses pods while a namespace's offloading is InProgress
    # (docs/offloading.md).
    pods: dict[str, dict[str, Any]] = {
        "by-node-selector": {"nodeSelector": {names.TYPE_LABEL: names.VIRTUAL_NODE_TYPE}},
        "by-runtime-class": {"runtimeClassName": names.RUNTIME_CLASS_NAME},
    }
    namespaces = {name: f"{unique_name[:30]}-{name}" for name in pods}  # its twin's name adds `-home`
    for namespace in namespaces.values():
        on_demand_namespace(home, dev_env, namespace)
    assert all(offloading(home, ns) is None for ns in namespaces.values())  # the label alone offloads nothing
    try:
        created = {}
        for name, spec in pods.items():
            created[name] = time.monotonic()
            kubectl(dev_env, "apply", "-f", "-", stdin=pod_manifest(namespaces[name], name, spec))
        for namespace in namespaces.values():
            made = wait_until(partial(offloading, home, namespace), 30, f"the on-demand offloading of {namespace}")
            assert (made.metadata.labels or {}).get(names.OFFLOADED_ON_DEMAND_LABEL) == "true"
            assert made["spec"]["podOffloadingStrategy"] == "LocalAndRemote"  # the stack's default
        for name, namespace in namespaces.items():
            running = partial(running_remotely, home, foreign, namespace, name)
            wait_until(running, 60, f"pod {name} Running in a foreign cluster")
            print(f"on-demand: pod {name}: created -> Running remotely in {time.monotonic() - created[name]:.1f} s")
        # the controller-manager writes its events after the offloading and the toleration it reports
        placed = namespaces["by-node-selector"]
        wait_until(lambda: "PodsPlacedOnDemand" in reasons(home, placed), 30, f"PodsPlacedOnDemand in {placed}")
        wait_until(
            lambda: all("OffloadedOnDemand" in reasons(home, ns) for ns in namespaces.values()),
            30,
            "OffloadedOnDemand in both namespaces",
        )

        # an idle namespace is unoffloaded after its grace period; one whose pod runs remotely keeps its offloading
        idle, busy = namespaces["by-node-selector"], namespaces["by-runtime-class"]
        twin = offloading(home, idle)["status"]["remoteNamespaceName"]
        kubectl(dev_env, "delete", "pod", "by-node-selector", "-n", idle, "--wait=true")
        wait_until(lambda: offloading(home, idle) is None, 60, "the idle offloading removed")
        wait_until(lambda: "UnoffloadedOnDemand" in reasons(home, idle), 30, f"UnoffloadedOnDemand in {idle}")
        for client in foreign.values():
            wait_until(twin_gone(client, twin), 30, f"twin namespace {twin} gone")
        assert offloading(home, busy) is not None  # offloaded before the idle one, its grace long passed
        assert "UnoffloadedOnDemand" not in reasons(home, busy)
        kubectl(dev_env, "delete", "pod", "by-runtime-class", "-n", busy, "--wait=true")
        wait_until(lambda: offloading(home, busy) is None, 60, "the other offloading removed once idle")
    finally:
        opt_out(dev_env, *namespaces.values())


def test_a_pod_with_no_room_at_home_offloads_its_namespace_when_a_virtual_node_fits_it(
    runtime: ExternalRuntime, home: Client, foreign: dict[str, Client], dev_env: DevEnvironment, unique_name: str
) -> None:
    namespace, fillers = unique_name[:40], f"{unique_name[:40]}-fill"
    on_demand_namespace(home, dev_env, namespace)
    create_namespace(home, fillers)  # not on demand: its pods fill the home nodes, leaving 1 CPU free on each
    nodes: list[Any] = list(home.list(Node))
    free = available_by_node("home", nodes, loads_of(home.list(Pod, namespace="*")))
    try:
        for node, resources in free.items():
            fill = {"cpu": f"{int((resources['cpu'] - 1) * 1000)}m"}
            spec = {"nodeSelector": {names.HOSTNAME_LABEL: node}}
            manifest = json.loads(pod_manifest(fillers, f"fill-{node}", spec))
            manifest["spec"]["containers"][0]["resources"] = {"requests": fill}
            kubectl(dev_env, "apply", "-f", "-", stdin=json.dumps(manifest))
        wait_until(lambda: all_running(home, fillers, len(free)), 60, "the home nodes filled")

        created = time.monotonic()
        manifest = json.loads(pod_manifest(namespace, "big", {}))  # asks for no virtual node: 2 CPU fit no home node
        manifest["spec"]["containers"][0]["resources"] = {"requests": {"cpu": "2"}}
        kubectl(dev_env, "apply", "-f", "-", stdin=json.dumps(manifest))
        made = wait_until(lambda: offloading(home, namespace), 30, "the on-demand offloading")
        assert (made.metadata.labels or {}).get(names.OFFLOADED_ON_DEMAND_LABEL) == "true"
        wait_until(partial(running_remotely, home, foreign, namespace, "big"), 60, "pod big Running remotely")
        print(
            f"on-demand: pod big (no room at home): created -> Running remotely in {time.monotonic() - created:.1f} s"
        )
        wait_until(
            lambda: {"OffloadedOnDemand", "PodsPlacedOnDemand"} <= set(reasons(home, namespace)),
            30,
            f"OffloadedOnDemand and PodsPlacedOnDemand in {namespace}",
        )
        kubectl(dev_env, "delete", "pod", "big", "-n", namespace, "--wait=true")
        wait_until(lambda: offloading(home, namespace) is None, 60, "the idle offloading removed")
    finally:
        kubectl(dev_env, "delete", "namespace", fillers, "--wait=false")
        opt_out(dev_env, namespace)


def all_running(home: Client, namespace: str, count: int) -> bool:
    pods: list[Any] = list(home.list(Pod, namespace=namespace))
    return len(pods) == count and all(p.status and p.status.phase == "Running" for p in pods)


def test_the_external_runtime_starts_the_controller_manager_with_the_stacks_on_demand_defaults(
    runtime: ExternalRuntime,
) -> None:
    """In external mode the controller-manager runs here, not from its Deployment (scaled to zero):
    it starts with the settings the stack declares there, `liqo:onDemand` (left at its defaults)."""
    command = runtime.command("controller-manager")
    declared = OnDemandConfig().args()
    assert declared and all(arg in command for arg in declared), command
    # what the Deployment says for the cluster is said here for the local process, once
    assert not any(arg.startswith(("--home-cluster-id=", "--webhook-port=", "--webhook-address=")) for arg in command)
