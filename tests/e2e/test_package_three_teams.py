"""Three teams, three stacks, three languages (docs/package.md): foreign-1's admins declare its half in
Pulumi YAML (`ForeignSide`, examples/package-foreign-yaml); the platform team declares the home and its
peerings in Python (`Home` + two `Peering`s, foreign-1 through the identity the admins' stack issued,
examples/package-platform-python); an application team offloads its namespace next to its Deployment in
TypeScript (`OffloadedNamespace`, examples/package-app-typescript), learning the clusters on offer from
the platform stack through a StackReference. Its pods run in foreign-1; its preview after `up` shows no
change; destroying the platform meanwhile is refused, naming the team's namespace (and one offloaded by
hand), and deletes nothing; destroying the team's stack unoffloads its namespace and no other.
"""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
from lightkube import Client
from lightkube.resources.core_v1 import Namespace, Pod
from pulumi import automation as auto

from liqo_stack.declaring.components.destroy_guard import CONSENT_VARIABLE
from liqo_stack.dev.clusters import DevEnvironment
from liqo_stack.dev.external_runtime import ExternalRuntime
from liqo_stack.dev.pulumi_offline import PulumiEnvironment
from runtime.api import names
from runtime.api.resources import NamespaceOffloadingResource, VirtualNodeResource
from tests.e2e.conftest import RuntimeSlot, wait_served
from tests.e2e.test_package_typescript import typescript_project, typescript_stack
from tests.support.kube import (
    all_running,
    get_or_none,
    listener_port,
    offload,
    unoffload,
    wait_phase,
    wait_until,
)
from tests.support.packages import ROOT, assert_no_change, project_from_example, resources_of

pytestmark = [pytest.mark.clusters, pytest.mark.pulumi]

EXAMPLES = ROOT / "examples"
NAMESPACE = "three-teams"
BYSTANDER = "three-teams-bystander"  # offloaded by hand: no team's stack touches it
TWIN = f"{NAMESPACE}-home"


@dataclass
class Teams:
    foreign_side: auto.Stack
    platform: auto.Stack
    app: auto.Stack


def python_project(example: Path, directory: Path) -> Path:
    """A Python program as a user's project (the language host runs the python3 of PATH: the .venv's)."""
    for source in example.iterdir():
        if source.is_file():
            (directory / source.name).write_text(source.read_text())
    return directory


@pytest.fixture(scope="module")
def teams(
    dev_env: DevEnvironment,
    pulumi_env: PulumiEnvironment,
    runtime_slot: RuntimeSlot,
    tmp_path_factory: pytest.TempPathFactory,
    home: Client,
) -> Iterator[Teams]:
    runtime_slot.release()  # this module's platform is served by a runtime of its own
    folder = tmp_path_factory.mktemp("three-teams")
    organization = "organization"
    side = pulumi_env.stack_for_directory(
        project_from_example(EXAMPLES / "package-foreign-yaml", _mkdir(folder / "foreign")), "foreign-1"
    )
    side.set_all_config({"kubeconfig": auto.ConfigValue(str(dev_env.kubeconfig("foreign-1")))})
    platform = pulumi_env.stack_for_directory(
        python_project(EXAMPLES / "package-platform-python", _mkdir(folder / "platform")), "prod"
    )
    webhook = listener_port()
    platform.set_all_config(
        {
            "foreignSideStack": auto.ConfigValue(f"{organization}/liqo-foreign/foreign-1"),
            "homeKubeconfig": auto.ConfigValue(str(dev_env.kubeconfig("home"))),
            "foreign2Kubeconfig": auto.ConfigValue(str(dev_env.kubeconfig("foreign-2"))),
            "webhookPort": auto.ConfigValue(str(webhook)),
        }
    )
    app = typescript_stack(
        pulumi_env, typescript_project(_mkdir(folder / "app"), pulumi_env, EXAMPLES / "package-app-typescript"), "team"
    )
    app.set_all_config(
        {
            "platformStack": auto.ConfigValue(f"{organization}/liqo-platform/prod"),
            "homeKubeconfig": auto.ConfigValue(str(dev_env.kubeconfig("home"))),
            "namespace": auto.ConfigValue(NAMESPACE),
        }
    )
    runtime = ExternalRuntime(
        {cid: dev_env.kubeconfig(cid) for cid in ("home", "foreign-1", "foreign-2")},
        "home",
        webhook_port=webhook,
        kubelet_ports={"foreign-1": listener_port(), "foreign-2": listener_port()},
        state_dir=folder / "runtime",
    )
    up: list[auto.Stack] = []
    try:
        for stack in (side, platform):
            stack.up(on_output=print)
            up.append(stack)
        runtime.start_all()
        wait_served(home, runtime)
        offload(home, BYSTANDER, {"clusterSelector": {"nodeSelectorTerms": []}})
        app.up(on_output=print)
        up.append(app)
        yield Teams(side, platform, app)
    finally:
        if platform in up and get_or_none(home, Namespace, BYSTANDER) is not None:
            # unoffloaded while the platform's controller-manager runs: it releases the offloading's finalizer
            if get_or_none(home, NamespaceOffloadingResource, names.NAMESPACE_OFFLOADING_NAME, BYSTANDER) is not None:
                unoffload(home, BYSTANDER)
            wait_until(
                lambda: (
                    get_or_none(home, NamespaceOffloadingResource, names.NAMESPACE_OFFLOADING_NAME, BYSTANDER) is None
                ),
                60,
                "the bystander unoffloaded",
            )
        for stack in reversed(up):  # the platform destroyed while its runtime runs (finalizers)
            if (stack.export_stack().deployment or {}).get("resources"):
                stack.destroy(on_output=print)
            stack.workspace.remove_stack(stack.name)
        runtime.stop_all()
        for namespace in (NAMESPACE, BYSTANDER):
            if get_or_none(home, Namespace, namespace) is not None:
                home.delete(Namespace, namespace)


def _mkdir(path: Path) -> Path:
    path.mkdir(parents=True, exist_ok=True)
    return path


def test_three_teams_in_three_languages(teams: Teams, home: Client, foreign: dict[str, Client]) -> None:
    # the platform's peerings: foreign-1 through the identity its admins issued, nothing declared there
    platform = resources_of(teams.platform).values()
    assert not any(r["type"] == "liqo-stack:index:ForeignAgent" and r["urn"].endswith("::foreign-1") for r in platform)
    assert {r["urn"].rpartition("::")[2] for r in platform if r["type"] == "liqo-stack:index:Peering"} >= {
        "foreign-1",
        "foreign-2",
    }

    # the application team's pods run in foreign-1, the cluster it selected among those on offer
    wait_phase(home, NAMESPACE, "Ready")
    running: list[Any] = wait_until(lambda: all_running(home, NAMESPACE, "web", 2), 120, "the team's 2 pods Running")
    assert {p.spec and p.spec.nodeName for p in running} == {names.virtual_node_name("foreign-1")}
    remote = sorted(str(p.metadata and p.metadata.name) for p in foreign["foreign-1"].list(Pod, namespace=TWIN))
    assert remote == sorted(str(p.metadata and p.metadata.name) for p in running)
    assert teams.app.outputs()["plan"].value["clusters"] == {"foreign-1": {"twinNamespace": TWIN}}
    assert_no_change(teams.app)

    # destroying the platform while the team's stack (and a hand-made offloading) still offload: refused,
    # naming both, and nothing deleted (its guards go first: liqo_stack/declaring/components/destroy_guard.py)
    before = resources_of(teams.platform)
    with pytest.raises(auto.CommandError) as refused:
        teams.platform.destroy(on_output=print)
    said = str(refused.value)
    assert f"{NAMESPACE} (twins in foreign-1)" in said, said
    assert f"{BYSTANDER} (twins in foreign-1, foreign-2)" in said
    assert f"{CONSENT_VARIABLE}={NAMESPACE},{BYSTANDER}" in said, "it says how to go on"
    assert resources_of(teams.platform).keys() == before.keys()
    for cluster_id in ("foreign-1", "foreign-2"):
        node = names.virtual_node_name(cluster_id)
        assert get_or_none(home, VirtualNodeResource, node, names.LIQO_NAMESPACE) is not None
    still: list[Any] = all_running(home, NAMESPACE, "web", 2) or []
    assert {p.metadata.uid for p in still} == {p.metadata.uid for p in running}, "the team's pods untouched"
    assert get_or_none(foreign["foreign-1"], Namespace, TWIN) is not None
    twins = {cid: get_or_none(foreign[cid], Namespace, f"{BYSTANDER}-home") for cid in ("foreign-1", "foreign-2")}
    assert all(twins.values()), "the bystander's twins are still there"

    # destroying the team's stack unoffloads its namespace (kept at home) and no other
    teams.app.destroy(on_output=print)
    assert get_or_none(home, NamespaceOffloadingResource, names.NAMESPACE_OFFLOADING_NAME, NAMESPACE) is None
    wait_until(lambda: get_or_none(foreign["foreign-1"], Namespace, TWIN) is None, 60, f"twin {TWIN} deleted")
    assert get_or_none(home, Namespace, NAMESPACE) is not None
    assert wait_phase(home, BYSTANDER, "Ready")["offloadingPhase"] == "Ready"
