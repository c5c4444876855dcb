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
from lightkube import Client
from pulumi import automation as auto

from liqo_stack.declaring.package.schema import (
    FOREIGN_SIDE,
    HOME,
    KUBERNETES_VERSION,
    OFFLOADED_NAMESPACE,
    PEERING,
    STACK,
)
from liqo_stack.dev.clusters import DevEnvironment
from liqo_stack.dev.external_runtime import ExternalRuntime
from liqo_stack.dev.pulumi_offline import PulumiEnvironment
from tests.e2e.conftest import RuntimeSlot
from tests.support.kubeconfigs import server_of
from tests.support.packages import (
    PACKAGE,
    assert_no_change,
    assert_refused_untouched,
    assert_runs_through_the_component,
    program_installed,
    project_from_example,
    resources_of,
    scaled_up,
)

pytestmark = [pytest.mark.clusters, pytest.mark.pulumi]

EXAMPLE = Path(__file__).resolve().parents[2] / "examples" / "package-typescript"
NAMESPACE = "ts-apps"
# what `pulumi package get-schema` lists: the Stack and the four parts (docs/package.md)
COMPONENTS = [STACK, HOME, PEERING, FOREIGN_SIDE, OFFLOADED_NAMESPACE]
CLUSTERS = ["home", "foreign-1", "foreign-2"]
TRANSPILE_ONLY = "PULUMI_NODEJS_TRANSPILE_ONLY"  # @pulumi/pulumi's run.js: ts-node without its type check


def run(command: list[str], cwd: Path, env: dict[str, str]) -> str:
    """A command as a user types it in the project; its output is shown, a failure fails the test."""
    print("$", " ".join(command), flush=True)
    done = subprocess.run(command, cwd=cwd, env=env, capture_output=True, text=True, timeout=600)
    print(done.stdout, done.stderr, flush=True)
    assert done.returncode == 0, f"{command[0]} failed: {done.stderr or done.stdout}"
    return done.stdout


def typescript_project(directory: Path, pulumi_env: PulumiEnvironment, example: Path = EXAMPLE) -> Path:
    """The example program as a user's project: the package's TypeScript SDK generated into sdks/ from the
    package's schema (and pulumi-kubernetes' schema, which it refers to), then `npm install`."""
    project_from_example(example, directory)
    env = {**os.environ, **pulumi_env.env_vars()}
    kubernetes = run(["pulumi", "package", "get-schema", f"kubernetes@{KUBERNETES_VERSION}"], directory, env)
    (directory / "kubernetes.json").write_text(kubernetes)
    # the package's schema as the engine gets it from the provider: its five components
    served = run(["pulumi", "package", "get-schema", str(PACKAGE / "pulumi-resource-liqo-stack")], directory, env)
    assert sorted(json.loads(served)["resources"]) == sorted(COMPONENTS)
    (directory / "liqo-stack.json").write_text(served)
    schema = str(directory / "liqo-stack.json")
    sdk = str(directory / "sdks" / "liqo-stack")
    run(["pulumi-sdkgen", "--schema", schema, "--dependency", "kubernetes.json", "--out", sdk], directory, env)
    run(["npm", "install", "--no-audit", "--no-fund", "--prefer-offline"], directory, env)
    # The program type-checked against the generated SDK once, as a user's build step does (what ts-node
    # checks: the program and the SDK, not the libraries' declarations); the engine then transpiles only.
    run(["npx", "tsc", "--noEmit", "--skipLibCheck"], directory, env)
    return directory


def typescript_stack(pulumi_env: PulumiEnvironment, project: Path, stack: str) -> auto.Stack:
    """A stack of a project made by `typescript_project`: its engine runs skip ts-node's type check (about
    9 CPU-seconds each here; tsc checked the program once)."""
    selected = pulumi_env.stack_for_directory(project, stack)
    selected.workspace.env_vars = {**selected.workspace.env_vars, TRANSPILE_ONLY: "true"}
    return selected


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
    kubeconfigs = {cluster_id: dev_env.kubeconfig(cluster_id) for cluster_id in CLUSTERS}
    clusters = {cid: {"kubeconfig": str(path), "server": server_of(path)} for cid, path in kubeconfigs.items()}
    config = {
        "clusters": json.dumps(clusters),
        "namespace": NAMESPACE,
        "webhookPort": str(webhook_port),
        "replicas": "0",
    }
    with program_installed(typescript_stack(pulumi_env, project, "dev"), config, runtime_slot.release) as stack:
        yield stack


@pytest.fixture(scope="module")
def running(installed: auto.Stack, runtime: ExternalRuntime, home: Client) -> list[Any]:
    return scaled_up(installed, home, NAMESPACE)


def test_the_typescript_programs_deployment_runs_in_the_foreign_clusters(
    installed: auto.Stack, running: list[Any], foreign: dict[str, Client]
) -> None:
    assert_runs_through_the_component(installed, running, foreign, NAMESPACE)
    resources = resources_of(installed).values()
    providers = {r["urn"].rpartition("::")[2] for r in resources if r["type"] == "pulumi:providers:kubernetes"}
    assert providers == set(CLUSTERS), "the program's own providers, one per cluster, and no other"


def test_a_preview_after_up_shows_no_change(installed: auto.Stack, running: list[Any]) -> None:
    assert_no_change(installed)


def test_a_bad_property_names_its_path_and_touches_nothing(
    installed: auto.Stack, running: list[Any], home: Client
) -> None:
    assert_refused_untouched(installed, home, NAMESPACE, [installed.up])
