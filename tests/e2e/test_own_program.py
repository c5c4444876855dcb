"""The example of an infra team's own program in docs/stack.md (examples/own-program), run by the pinned pulumi
CLI: its own `kubernetes.Provider`s (no kubeconfig in the `liqo:` config), liqo-stack's components, and
its own pulumi_kubernetes ConfigMap and Deployment in a namespace the stack offloads. The Deployment's
pods run in the foreign clusters and the ConfigMap is reflected into the twin namespaces.
"""

from __future__ import annotations

import json
import shutil
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from lightkube import Client
from lightkube.resources.core_v1 import ConfigMap, Pod
from pulumi import automation as auto

from liqo_stack.dev.clusters import ClusterLayout, DevEnvironment
from liqo_stack.dev.external_runtime import ExternalRuntime
from liqo_stack.dev.pulumi_offline import PulumiEnvironment
from runtime.api import names
from tests.e2e.conftest import RuntimeSlot
from tests.support.kube import all_running, get_or_none, wait_phase, wait_until
from tests.support.kubeconfigs import server_of

pytestmark = [pytest.mark.clusters, pytest.mark.pulumi]

EXAMPLE = Path(__file__).resolve().parents[2] / "examples" / "own-program"
NAMESPACE = "own-program-apps"
CLUSTERS = ["home", "foreign-1", "foreign-2"]


@pytest.fixture(scope="module")
def installed(
    dev_env: DevEnvironment,
    pulumi_env: PulumiEnvironment,
    tmp_path_factory: pytest.TempPathFactory,
    webhook_port: int,
    session_layout: ClusterLayout,
    runtime_slot: RuntimeSlot,
) -> Iterator[auto.Stack]:
    """The example program's stack (overrides conftest's: the runtime fixture runs against it)."""
    project = tmp_path_factory.mktemp("own-program")
    for name in ("Pulumi.yaml", "__main__.py"):
        shutil.copy(EXAMPLE / name, project / name)
    stack = pulumi_env.stack_for_directory(project, "dev")
    liqo = {
        "home": {"clusterId": "home", "podCIDR": session_layout.pod_cidr("home")},
        "foreignClusters": [
            {
                "clusterId": cluster_id,
                "apiServerAddress": server_of(dev_env.kubeconfig(cluster_id)),
                "podCIDR": session_layout.pod_cidr(cluster_id),
            }
            for cluster_id in CLUSTERS[1:]
        ],
        "namespaces": [{"name": NAMESPACE, "podOffloadingStrategy": "Remote"}],
        "virtualKubelet": {"homeApiServerAddress": server_of(dev_env.kubeconfig("home"))},
        "runtime": {"mode": "external", "webhookPort": webhook_port},
    }
    pulumi_env.set_liqo_config(stack, liqo)
    kubeconfigs = {cluster_id: dev_env.kubeconfig(cluster_id).read_text() for cluster_id in CLUSTERS}
    stack.set_config("kubeconfigs", auto.ConfigValue(json.dumps(kubeconfigs), secret=True))
    stack.set_config("clusters", auto.ConfigValue(json.dumps(CLUSTERS)))
    stack.set_config("namespace", auto.ConfigValue(NAMESPACE))
    stack.set_config("app", auto.ConfigValue("false"))  # liqo-stack first: the runtime starts next
    stack.up(on_output=print)
    try:
        yield stack
    finally:
        stack.destroy(on_output=print)  # while the module's runtime runs: it releases the VirtualNodes
        runtime_slot.release()
        stack.workspace.remove_stack("dev")


def test_the_programs_deployment_runs_remotely_with_its_configmap_reflected(
    installed: auto.Stack, runtime: ExternalRuntime, home: Client, foreign: dict[str, Client]
) -> None:
    wait_phase(home, NAMESPACE, "Ready")
    installed.set_config("app", auto.ConfigValue("true"))
    installed.up(on_output=print)
    deployment = installed.export_stack().deployment
    assert deployment is not None
    kinds = {r["type"] for r in deployment["resources"]}
    assert "kubernetes:apps/v1:Deployment" in kinds and not any(t.startswith("pulumi-python:dynamic") for t in kinds)
    providers = {
        r["urn"].rpartition("::")[2] for r in deployment["resources"] if r["type"].startswith("pulumi:providers")
    }
    assert providers == set(CLUSTERS), "the program's own providers, one per cluster, and no other"

    pods: list[Any] = wait_until(lambda: all_running(home, NAMESPACE, "web", 2), 120, "the program's 2 pods Running")
    assert {p.spec.nodeName for p in pods} <= {names.virtual_node_name(c) for c in CLUSTERS[1:]}
    twin = f"{NAMESPACE}-home"
    remote: list[Any] = [p for client in foreign.values() for p in client.list(Pod, namespace=twin)]
    assert sorted(p.metadata.name for p in remote) == sorted(p.metadata.name for p in pods)
    for cluster_id in {p.spec.nodeName.removeprefix("liqo-") for p in pods}:
        client = foreign[cluster_id]

        def reflected_into(client: Client = client) -> Any:
            return get_or_none(client, ConfigMap, "web-settings", twin)

        reflected = wait_until(reflected_into, 60, f"web-settings reflected into {cluster_id}")
        assert reflected.data == {"greeting": "hello from home"}
