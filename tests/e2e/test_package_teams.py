"""An application team's stack beside the platform's (docs/package.md): the team offloads its own
namespace with the package's `OffloadedNamespace` (examples/package-app-yaml, Pulumi YAML), given only a
provider of the home cluster, and learns the clusters on offer from the platform stack's outputs through a
StackReference. The platform here is the shared stack (a Python program: home, foreign-1 in region europe,
foreign-2), so the module makes one stack of its own: the team's.

Checked: its pods run in foreign-1 only; a second preview shows no change; a selector naming a cluster the
home does not peer fails the preview naming it and touches nothing; `liqo-stack preview` of the team's
stack foresees, from the home cluster alone, the twins and pods a move to foreign-2 deletes and creates;
the policy pack checks its OffloadedNamespace on its properties;
destroying the team's stack unoffloads its namespace (kept at home) and no other.
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from typing import Any

import pytest
from lightkube import Client
from lightkube.resources.core_v1 import Namespace, Pod
from pulumi import automation as auto

from liqo_stack.dev.clusters import DevEnvironment
from liqo_stack.dev.pulumi_offline import PulumiEnvironment
from runtime.api import names
from runtime.api.resources import NamespaceOffloadingResource
from tests.e2e.conftest import SHARED_STACK
from tests.support.cli import run_preview
from tests.support.kube import all_running, get_or_none, offload, unoffload, wait_phase, wait_until
from tests.support.packages import ROOT, assert_no_change, project_from_example, resources_of

pytestmark = [pytest.mark.clusters, pytest.mark.pulumi]

EXAMPLE = ROOT / "examples" / "package-app-yaml"
POLICY_PACK = ROOT / "policies"
NAMESPACE = "team-apps"
BYSTANDER = "team-bystander"  # offloaded by someone else: the team's stack never touches it
TWIN = f"{NAMESPACE}-home"


@pytest.fixture(scope="module")
def team_stack(
    installed: auto.Stack,
    runtime: Any,
    dev_env: DevEnvironment,
    pulumi_env: PulumiEnvironment,
    tmp_path_factory: pytest.TempPathFactory,
    home: Client,
) -> Iterator[auto.Stack]:
    """The team's stack, up with its Deployment's 2 pods Running; destroyed by the last test (else here)."""
    project = project_from_example(EXAMPLE, tmp_path_factory.mktemp("package-app-yaml"))
    stack = pulumi_env.stack_for_directory(project, "team")
    config = {
        "platformStack": f"organization/liqo-stack/{SHARED_STACK}",
        "homeKubeconfig": str(dev_env.kubeconfig("home")),
        "namespace": NAMESPACE,
        "replicas": "2",
    }
    stack.set_all_config({key: auto.ConfigValue(value) for key, value in config.items()})
    offload(home, BYSTANDER, {"clusterSelector": {"nodeSelectorTerms": []}})
    try:
        stack.up(on_output=print)
        yield stack
    finally:
        deployment = stack.export_stack().deployment or {}
        if deployment.get("resources"):  # the last test destroys it
            stack.destroy(on_output=print)
        stack.workspace.remove_stack(stack.name)
        unoffload(home, BYSTANDER)
        wait_until(lambda: get_or_none(home, NamespaceOffloadingResource, "offloading", BYSTANDER) is None, 60)
        home.delete(Namespace, BYSTANDER)
        home.delete(Namespace, NAMESPACE)


def test_the_teams_pods_run_in_the_cluster_it_selects_and_a_second_preview_changes_nothing(
    team_stack: auto.Stack, home: Client, foreign: dict[str, Client]
) -> None:
    wait_phase(home, NAMESPACE, "Ready")
    running = wait_until(lambda: all_running(home, NAMESPACE, "web", 2), 120, "the team's 2 pods Running")
    assert {p.spec and p.spec.nodeName for p in running} == {names.virtual_node_name("foreign-1")}
    remote = sorted(str(p.metadata and p.metadata.name) for p in foreign["foreign-1"].list(Pod, namespace=TWIN))
    assert remote == sorted(str(p.metadata and p.metadata.name) for p in running)
    assert get_or_none(foreign["foreign-2"], Namespace, TWIN) is None
    plan = team_stack.outputs()["plan"].value
    assert plan["clusters"] == {"foreign-1": {"twinNamespace": TWIN}}
    assert_no_change(team_stack)


def test_a_cluster_the_home_does_not_peer_fails_the_preview_naming_it(
    team_stack: auto.Stack, running_twin: None
) -> None:
    before = resources_of(team_stack)
    team_stack.set_config("cluster", auto.ConfigValue("foreign-9"))
    try:
        with pytest.raises(auto.CommandError) as failed:
            team_stack.preview(on_output=print)
    finally:
        team_stack.set_config("cluster", auto.ConfigValue("foreign-1"))
    assert "resources.apps.properties.clusterSelector: selects cluster foreign-9" in str(failed.value)
    assert "which home home does not peer" in str(failed.value)
    after = resources_of(team_stack)
    assert after.keys() == before.keys()


def test_liqo_stack_preview_foresees_the_teams_move_from_the_home_cluster(
    team_stack: auto.Stack, running_twin: None, pulumi_env: PulumiEnvironment, dev_env: DevEnvironment
) -> None:
    team_stack.set_config("cluster", auto.ConfigValue("foreign-2"))
    try:
        code, output = run_preview(
            team_stack, pulumi_env, "json", extra=["--home-kubeconfig", str(dev_env.kubeconfig("home"))]
        )
    finally:
        team_stack.set_config("cluster", auto.ConfigValue("foreign-1"))
    assert code == 2, output
    found = json.loads(output)["effects"]
    assert [(t["namespace"], t["cluster"], t["pods"]) for t in found["twins_deleted"]] == [(NAMESPACE, "foreign-1", 2)]
    assert [(t["namespace"], t["cluster"]) for t in found["twins_created"]] == [(NAMESPACE, "foreign-2")]
    assert len(found["pods_losing_node"]) == 2
    assert all(p["pod"].startswith(f"{NAMESPACE}/") for p in found["pods_losing_node"])


def test_the_policy_pack_checks_the_teams_offloaded_namespace_naming_its_property(
    team_stack: auto.Stack, running_twin: None
) -> None:
    # twins named `default` in the foreign clusters: a reserved name (mandatory), so the preview fails
    changed = {"namespace": "default", "mapping": "EnforceSameName"}
    for key, value in changed.items():
        team_stack.set_config(key, auto.ConfigValue(value))
    try:
        with pytest.raises(auto.CommandError) as denied:
            team_stack.preview(policy_packs=[str(POLICY_PACK)], on_output=print)
    finally:
        team_stack.set_config("namespace", auto.ConfigValue(NAMESPACE))
        team_stack.remove_config("mapping")
    assert "liqo-reserved-namespace-same-name" in str(denied.value)
    assert "resources.apps.properties.namespaceMappingStrategy: namespace default" in str(denied.value)


def test_destroying_the_teams_stack_unoffloads_its_namespace_and_no_other(
    team_stack: auto.Stack, running_twin: None, home: Client, foreign: dict[str, Client]
) -> None:
    team_stack.destroy(on_output=print)
    assert get_or_none(home, NamespaceOffloadingResource, "offloading", NAMESPACE) is None
    wait_until(lambda: get_or_none(foreign["foreign-1"], Namespace, TWIN) is None, 60, f"twin {TWIN} deleted")
    assert get_or_none(home, Namespace, NAMESPACE) is not None, "the team's namespace is kept"
    assert wait_phase(home, BYSTANDER, "Ready")["offloadingPhase"] == "Ready"
    for cluster in foreign.values():
        assert get_or_none(cluster, Namespace, f"{BYSTANDER}-home") is not None


@pytest.fixture
def running_twin(team_stack: auto.Stack, home: Client) -> None:
    wait_until(lambda: all_running(home, NAMESPACE, "web", 2), 120, "the team's 2 pods Running")
