"""liqo-stack as a Pulumi package, used from Pulumi YAML (examples/package-yaml, docs/package.md): the
pinned pulumi CLI runs the YAML program with the YAML language host built by tools/; the engine starts the
package's component provider (package/pulumi-resource-liqo-stack). The program peers both foreign clusters,
offloads a namespace and runs a Deployment there; a second preview shows no change; a bad property fails
naming its path in the program and touches nothing; the policy pack and `liqo-stack preview` read the
component's properties as they read a Python stack's `liqo:` settings.
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from typing import Any

import pytest
from lightkube import Client
from lightkube.resources.apps_v1 import Deployment
from lightkube.resources.core_v1 import Pod
from pulumi import automation as auto

from liqo_stack.declaring.package.schema import STACK
from liqo_stack.dev.clusters import DevEnvironment
from liqo_stack.dev.external_runtime import ExternalRuntime
from liqo_stack.dev.pulumi_offline import PulumiEnvironment
from runtime.api import names
from tests.e2e.conftest import RuntimeSlot
from tests.support.cli import run_preview
from tests.support.kube import all_running, wait_phase, wait_until
from tests.support.packages import ROOT, project_from_example, resources_of

pytestmark = [pytest.mark.clusters, pytest.mark.pulumi]

EXAMPLE = ROOT / "examples" / "package-yaml"
POLICY_PACK = ROOT / "policies"
NAMESPACE = "yaml-apps"
FOREIGN = ["foreign-1", "foreign-2"]


@pytest.fixture(scope="module")
def installed(
    dev_env: DevEnvironment,
    pulumi_env: PulumiEnvironment,
    tmp_path_factory: pytest.TempPathFactory,
    webhook_port: int,
    runtime_slot: RuntimeSlot,
) -> Iterator[auto.Stack]:
    """The YAML program's stack (overrides conftest's: the runtime fixture runs against it), with no
    replicas yet: the runtime (outside the clusters) starts next, and its webhook places the pods."""
    stack = pulumi_env.stack_for_directory(
        project_from_example(EXAMPLE, tmp_path_factory.mktemp("package-yaml")), "dev"
    )
    stack.set_all_config(
        {
            "homeKubeconfig": auto.ConfigValue(str(dev_env.kubeconfig("home"))),
            "foreign1Kubeconfig": auto.ConfigValue(str(dev_env.kubeconfig("foreign-1"))),
            "foreign2Kubeconfig": auto.ConfigValue(str(dev_env.kubeconfig("foreign-2"))),
            "namespace": auto.ConfigValue(NAMESPACE),
            "webhookPort": auto.ConfigValue(str(webhook_port)),
            "replicas": auto.ConfigValue("0"),
        }
    )
    stack.up(on_output=print)
    try:
        yield stack
    finally:
        stack.destroy(on_output=print)  # while the module's runtime runs: it releases the VirtualNodes
        runtime_slot.release()
        stack.workspace.remove_stack("dev")


@pytest.fixture(scope="module")
def running(installed: auto.Stack, runtime: ExternalRuntime, home: Client) -> list[Any]:
    """The program's Deployment scaled to 2 by its config: its pods Running on the virtual nodes."""
    wait_phase(home, NAMESPACE, "Ready")
    installed.set_config("replicas", auto.ConfigValue("2"))
    installed.up(on_output=print)
    pods: list[Any] = wait_until(lambda: all_running(home, NAMESPACE, "web", 2), 120, "the program's 2 pods Running")
    return pods


def test_the_yaml_programs_deployment_runs_in_the_foreign_clusters(
    installed: auto.Stack, running: list[Any], foreign: dict[str, Client]
) -> None:
    assert {p.spec.nodeName for p in running} <= {names.virtual_node_name(c) for c in FOREIGN}
    twin = f"{NAMESPACE}-home"
    remote = [
        str(p.metadata.name) for client in foreign.values() for p in client.list(Pod, namespace=twin) if p.metadata
    ]
    assert sorted(remote) == sorted(p.metadata.name for p in running)

    resources = resources_of(installed)
    [component] = [r for r in resources.values() if r["type"] == STACK]
    children = [r for r in resources.values() if r.get("parent") == component["urn"]]
    assert {r["type"] for r in children} >= {"liqo-stack:index:HomeControlPlane", "liqo-stack:index:Peering"}
    assert installed.outputs()["virtualNodes"].value["foreign-1"]["virtualNode"] == names.virtual_node_name("foreign-1")


def test_a_preview_after_up_shows_no_change(installed: auto.Stack, running: list[Any]) -> None:
    result = installed.preview(on_output=print)
    changes = {str(getattr(op, "value", op)): n for op, n in result.change_summary.items() if n}
    assert set(changes) == {"same"}, changes


def test_a_bad_property_names_its_path_in_the_program_and_touches_nothing(
    installed: auto.Stack, running: list[Any], home: Client
) -> None:
    before = resources_of(installed)
    installed.set_config("namespace", auto.ConfigValue("Bad_Namespace"))
    try:
        for attempt in (installed.preview, installed.up):
            with pytest.raises(auto.CommandError) as failed:
                attempt(on_output=print)
            assert "resources.liqo.properties.namespaces[0].name" in str(failed.value)
            assert "Bad_Namespace" in str(failed.value)
    finally:
        installed.set_config("namespace", auto.ConfigValue(NAMESPACE))
    after = resources_of(installed)
    assert after.keys() == before.keys()
    assert all(after[urn].get("outputs") == before[urn].get("outputs") for urn in before)
    deployment = home.get(Deployment, "web", namespace=NAMESPACE)
    assert deployment.spec is not None and deployment.spec.replicas == 2


def test_the_policy_pack_and_liqo_stack_preview_read_the_components_properties(
    installed: auto.Stack, running: list[Any], pulumi_env: PulumiEnvironment
) -> None:
    # advisory: a namespace offloaded to every peered cluster, named by its path in the program
    result = installed.preview(policy_packs=[str(POLICY_PACK)], on_output=print)
    assert "liqo-namespace-without-cluster-selector" in result.stdout
    assert "resources.liqo.properties.namespaces[0]" in result.stdout

    # the effects of moving the program to another namespace: the running twins go, with their pods
    installed.set_config("namespace", auto.ConfigValue("yaml-other"))
    try:
        code, output = run_preview(installed, pulumi_env, "json")
    finally:
        installed.set_config("namespace", auto.ConfigValue(NAMESPACE))
    assert code == 2, output
    deleted = json.loads(output)["effects"]["twins_deleted"]
    assert sorted((t["namespace"], t["cluster"]) for t in deleted) == [(NAMESPACE, c) for c in FOREIGN]
    assert sum(t["pods"] for t in deleted) == 2
