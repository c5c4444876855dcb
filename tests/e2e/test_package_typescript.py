"""liqo-stack as a Pulumi package, used from TypeScript (examples/package-typescript, docs/package.md): the
typed SDK generated from package/schema.json, the program's own kubernetes providers passed to the `Stack`,
run by the pinned pulumi CLI with the Node.js language host built by tools/. The program peers both foreign
clusters, offloads a namespace and runs a Deployment there; a second preview shows no change; a bad
property fails naming its path and touches nothing. (The policy pack and `liqo-stack preview` read the
component the same way in every language: tests/e2e/test_package.py checks them on the YAML program.)
"""

from __future__ import annotations

import json
import os
import subprocess
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import yaml
from lightkube import Client
from lightkube.resources.apps_v1 import Deployment
from lightkube.resources.core_v1 import Pod
from pulumi import automation as auto

from liqo_stack.declaring.package.schema import KUBERNETES_VERSION, STACK
from liqo_stack.dev.clusters import DevEnvironment
from liqo_stack.dev.external_runtime import ExternalRuntime
from liqo_stack.dev.pulumi_offline import PulumiEnvironment
from runtime.api import names
from tests.e2e.conftest import RuntimeSlot
from tests.support.kube import all_running, wait_phase, wait_until
from tests.support.packages import PACKAGE, project_from_example, resources_of

pytestmark = [pytest.mark.clusters, pytest.mark.pulumi]

EXAMPLE = Path(__file__).resolve().parents[2] / "examples" / "package-typescript"
NAMESPACE = "ts-apps"
CLUSTERS = ["home", "foreign-1", "foreign-2"]


def run(command: list[str], cwd: Path, env: dict[str, str]) -> str:
    """A command as a user types it in the project; its output is shown, a failure fails the test."""
    print("$", " ".join(command), flush=True)
    done = subprocess.run(command, cwd=cwd, env=env, capture_output=True, text=True, timeout=600)
    print(done.stdout, done.stderr, flush=True)
    assert done.returncode == 0, f"{command[0]} failed: {done.stderr or done.stdout}"
    return done.stdout


def typescript_project(directory: Path, pulumi_env: PulumiEnvironment) -> Path:
    """The example program as a user's project: the package's TypeScript SDK generated into sdks/ from the
    package's schema (and pulumi-kubernetes' schema, which it refers to), then `npm install`."""
    project_from_example(EXAMPLE, directory)
    env = {**os.environ, **pulumi_env.env_vars()}
    kubernetes = run(["pulumi", "package", "get-schema", f"kubernetes@{KUBERNETES_VERSION}"], directory, env)
    (directory / "kubernetes.json").write_text(kubernetes)
    schema = str(PACKAGE / "schema.json")
    sdk = str(directory / "sdks" / "liqo-stack")
    run(["pulumi-sdkgen", "--schema", schema, "--dependency", "kubernetes.json", "--out", sdk], directory, env)
    run(["npm", "install", "--no-audit", "--no-fund", "--prefer-offline"], directory, env)
    return directory


def server_of(kubeconfig: Path) -> str:
    server: str = yaml.safe_load(kubeconfig.read_text())["clusters"][0]["cluster"]["server"]
    return server


@pytest.fixture(scope="module")
def installed(
    dev_env: DevEnvironment,
    pulumi_env: PulumiEnvironment,
    tmp_path_factory: pytest.TempPathFactory,
    webhook_port: int,
    runtime_slot: RuntimeSlot,
) -> Iterator[auto.Stack]:
    """The TypeScript program's stack (overrides conftest's), with no replicas yet: the runtime (outside
    the clusters) starts next, and its webhook places the pods."""
    project = typescript_project(tmp_path_factory.mktemp("package-typescript"), pulumi_env)
    stack = pulumi_env.stack_for_directory(project, "dev")
    kubeconfigs = {cluster_id: dev_env.kubeconfig(cluster_id) for cluster_id in CLUSTERS}
    clusters = {cid: {"kubeconfig": str(path), "server": server_of(path)} for cid, path in kubeconfigs.items()}
    stack.set_all_config(
        {
            "clusters": auto.ConfigValue(json.dumps(clusters)),
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
    wait_phase(home, NAMESPACE, "Ready")
    installed.set_config("replicas", auto.ConfigValue("2"))
    installed.up(on_output=print)
    pods: list[Any] = wait_until(lambda: all_running(home, NAMESPACE, "web", 2), 120, "the program's 2 pods Running")
    return pods


def test_the_typescript_programs_deployment_runs_in_the_foreign_clusters(
    installed: auto.Stack, running: list[Any], foreign: dict[str, Client]
) -> None:
    assert {p.spec.nodeName for p in running} <= {names.virtual_node_name(c) for c in CLUSTERS[1:]}
    twin = f"{NAMESPACE}-home"
    remote = [str(p.metadata and p.metadata.name) for c in foreign.values() for p in c.list(Pod, namespace=twin)]
    assert sorted(remote) == sorted(p.metadata.name for p in running)

    resources = resources_of(installed)
    [component] = [r for r in resources.values() if r["type"] == STACK]
    providers = {r["urn"].rpartition("::")[2] for r in resources.values() if r["type"] == "pulumi:providers:kubernetes"}
    assert providers == set(CLUSTERS), "the program's own providers, one per cluster, and no other"
    children = [r for r in resources.values() if r.get("parent") == component["urn"]]
    assert {r["type"] for r in children} >= {"liqo-stack:index:HomeControlPlane", "liqo-stack:index:Peering"}
    assert installed.outputs()["virtualNodes"].value["foreign-2"]["virtualNode"] == names.virtual_node_name("foreign-2")


def test_a_preview_after_up_shows_no_change(installed: auto.Stack, running: list[Any]) -> None:
    result = installed.preview(on_output=print)
    changes = {str(getattr(op, "value", op)): n for op, n in result.change_summary.items() if n}
    assert set(changes) == {"same"}, changes


def test_a_bad_property_names_its_path_and_touches_nothing(
    installed: auto.Stack, running: list[Any], home: Client
) -> None:
    before = resources_of(installed)
    installed.set_config("namespace", auto.ConfigValue("Bad_Namespace"))
    try:
        with pytest.raises(auto.CommandError) as failed:
            installed.up(on_output=print)
    finally:
        installed.set_config("namespace", auto.ConfigValue(NAMESPACE))
    assert "resources.liqo.properties.namespaces[0].name" in str(failed.value)
    assert "Bad_Namespace" in str(failed.value)
    after = resources_of(installed)
    assert after.keys() == before.keys()
    assert all(after[urn].get("outputs") == before[urn].get("outputs") for urn in before)
    deployment = home.get(Deployment, "web", namespace=NAMESPACE)
    assert deployment.spec is not None and deployment.spec.replicas == 2
