"""liqo-stack as a Pulumi package, used from Pulumi YAML (examples/package-yaml, docs/package.md): the
pinned pulumi CLI runs the YAML program with the YAML language host built by tools/; the engine starts the
package's component provider (package/pulumi-resource-liqo-stack). The program peers both foreign clusters,
offloads a namespace and runs a Deployment there; a second preview shows no change; a bad property fails
naming its path in the program and touches nothing; the policy pack and `liqo-stack preview` read the
component's settings as they read a Python stack's `liqo:` settings.
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from typing import Any

import pytest
from lightkube import Client
from pulumi import automation as auto

from liqo_stack.dev.clusters import DevEnvironment
from liqo_stack.dev.external_runtime import ExternalRuntime
from liqo_stack.dev.pulumi_offline import PulumiEnvironment
from tests.e2e.conftest import RuntimeSlot
from tests.support.cli import run_preview
from tests.support.packages import (
    ROOT,
    assert_no_change,
    assert_refused_untouched,
    assert_runs_through_the_component,
    program_installed,
    project_from_example,
    scaled_up,
)

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
    project = project_from_example(EXAMPLE, tmp_path_factory.mktemp("package-yaml"))
    config = {
        "homeKubeconfig": str(dev_env.kubeconfig("home")),
        "foreign1Kubeconfig": str(dev_env.kubeconfig("foreign-1")),
        "foreign2Kubeconfig": str(dev_env.kubeconfig("foreign-2")),
        "namespace": NAMESPACE,
        "webhookPort": str(webhook_port),
        "replicas": "0",
    }
    with program_installed(pulumi_env.stack_for_directory(project, "dev"), config, runtime_slot.release) as stack:
        yield stack


@pytest.fixture(scope="module")
def running(installed: auto.Stack, runtime: ExternalRuntime, home: Client) -> list[Any]:
    return scaled_up(installed, home, NAMESPACE)


def test_the_yaml_programs_deployment_runs_in_the_foreign_clusters(
    installed: auto.Stack, running: list[Any], foreign: dict[str, Client]
) -> None:
    assert sorted(foreign) == FOREIGN
    assert_runs_through_the_component(installed, running, foreign, NAMESPACE)


def test_a_preview_after_up_shows_no_change(installed: auto.Stack, running: list[Any]) -> None:
    assert_no_change(installed)


def test_a_bad_property_names_its_path_in_the_program_and_touches_nothing(
    installed: auto.Stack, running: list[Any], home: Client
) -> None:
    assert_refused_untouched(installed, home, NAMESPACE, [installed.preview, installed.up])


def test_the_policy_pack_and_liqo_stack_preview_read_the_components_settings(
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
