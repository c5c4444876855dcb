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
from lightkube.resources.core_v1 import Pod

from liqo_stack.dev.clusters import DevEnvironment
from liqo_stack.dev.external_runtime import ExternalRuntime
from runtime.api import names
from runtime.api.resources import NamespaceOffloadingResource
from tests.support.kube import create_namespace, get_or_none, remote_pod, twin_gone, wait_until

pytestmark = [pytest.mark.clusters, pytest.mark.pulumi]


def kubectl(dev_env: DevEnvironment, *args: str, stdin: str | None = None) -> str:
    command = [str(dev_env.bin_dir / "kubectl"), "--kubeconfig", str(dev_env.kubeconfig("home")), *args]
    return subprocess.run(command, input=stdin, capture_output=True, text=True, check=True).stdout


def pod_manifest(namespace: str, name: str, spec: dict[str, Any]) -> str:
    container = {"name": "app", "image": "registry.k8s.io/pause:3.9"}
    pod = {"apiVersion": "v1", "kind": "Pod", "metadata": {"name": name, "namespace": namespace}}
    return json.dumps({**pod, "spec": {"containers": [container], **spec}})


def reasons(home: Client, namespace: str) -> list[str]:
    events: list[Any] = list(home.list(CoreEvent, namespace=namespace))
    return [e.reason for e in events if e.involvedObject.kind == "Namespace"]


def offloading(home: Client, namespace: str) -> Any:
    return get_or_none(home, NamespaceOffloadingResource, names.NAMESPACE_OFFLOADING_NAME, namespace)


def test_a_pod_asking_for_a_virtual_node_offloads_its_namespace_until_unused(
    runtime: ExternalRuntime, home: Client, foreign: dict[str, Client], dev_env: DevEnvironment, unique_name: str
) -> None:
    namespace = unique_name[:60]
    create_namespace(home, namespace, {names.ON_DEMAND_LABEL: "true"})
    kubectl(dev_env, "annotate", "namespace", namespace, f"{names.ON_DEMAND_GRACE_PERIOD_ANNOTATION}=2s")
    assert offloading(home, namespace) is None  # the label alone offloads nothing

    # a nodeSelector alone: unschedulable, the virtual nodes' taint not tolerated outside offloaded namespaces
    # (admitted before the offloading exists, so the controller gives it the toleration: PodsPlacedOnDemand);
    # runtimeClassName liqo: bound to a virtual node at once, backing off there until the namespace is offloaded
    pods: dict[str, dict[str, Any]] = {
        "by-node-selector": {"nodeSelector": {names.TYPE_LABEL: names.VIRTUAL_NODE_TYPE}},
        "by-runtime-class": {"runtimeClassName": names.RUNTIME_CLASS_NAME},
    }
    created = {}
    for name, spec in pods.items():
        created[name] = time.monotonic()
        kubectl(dev_env, "apply", "-f", "-", stdin=pod_manifest(namespace, name, spec))

    made = wait_until(lambda: offloading(home, namespace), 30, "the on-demand offloading")
    assert (made.metadata.labels or {}).get(names.OFFLOADED_ON_DEMAND_LABEL) == "true"
    assert made["spec"]["podOffloadingStrategy"] == "LocalAndRemote"  # the stack's default

    def running_remotely(name: str) -> bool:
        pod: Any = get_or_none(home, Pod, name, namespace)
        twin = ((offloading(home, namespace) or {}).get("status") or {}).get("remoteNamespaceName")
        node = pod.spec.nodeName if pod is not None else None
        cluster = next((c for c in foreign if node == names.virtual_node_name(c)), None)
        if cluster is None or not twin:
            return False
        remote = remote_pod(foreign[cluster], twin, name)
        return remote is not None and remote.status is not None and remote.status.phase == "Running"

    for name in pods:
        wait_until(partial(running_remotely, name), 60, f"pod {name} Running in a foreign cluster")
        print(f"on-demand: pod {name}: created -> Running remotely in {time.monotonic() - created[name]:.1f} s")
    assert {"OffloadedOnDemand", "PodsPlacedOnDemand"} <= set(reasons(home, namespace))

    twin = offloading(home, namespace)["status"]["remoteNamespaceName"]
    # while one pod still runs remotely the offloading stays; once none does, it goes after the grace period
    kubectl(dev_env, "delete", "pod", "by-node-selector", "-n", namespace, "--wait=true")
    assert offloading(home, namespace) is not None
    assert "UnoffloadedOnDemand" not in reasons(home, namespace)
    kubectl(dev_env, "delete", "pod", "by-runtime-class", "-n", namespace, "--wait=true")
    wait_until(lambda: offloading(home, namespace) is None, 60, "the idle offloading removed")
    assert "UnoffloadedOnDemand" in reasons(home, namespace)
    for client in foreign.values():
        wait_until(twin_gone(client, twin), 30, f"twin namespace {twin} gone")
