"""A stack made by the last release before pulumi-kubernetes upgrades with a plain `pulumi up`.

The release's program (its code taken from git at RELEASE_BEFORE_PULUMI_KUBERNETES) installs the
stack with its dynamic provider, the runtime offloads a Deployment's pods, then the current program
runs `pulumi up` on the same stack: every object is taken over in place (same uid), nothing is
deleted or recreated, the offloaded pods are not touched, and the state holds only pulumi-kubernetes
resources (with the stack, its components and providers).
"""

from __future__ import annotations

import shutil
import subprocess
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from lightkube import Client
from lightkube.resources.core_v1 import Pod
from pulumi import automation as auto

from liqo_stack.declaring.components.destroy_guard import TYPE as GUARD
from liqo_stack.dev.clusters import ClusterLayout, DevEnvironment
from liqo_stack.dev.external_runtime import ExternalRuntime
from liqo_stack.dev.pulumi_offline import PulumiEnvironment
from tests.e2e.conftest import RuntimeSlot
from tests.support.kube import all_running, deploy_running, wait_phase, wait_until

pytestmark = [pytest.mark.clusters, pytest.mark.pulumi]

# main's last commit whose stack declared its objects through liqo-stack's own dynamic provider
RELEASE_BEFORE_PULUMI_KUBERNETES = "0b97700"
REPO = Path(__file__).resolve().parents[2]
NAMESPACE = "upgrade-apps"
STACK = "upgrade"


@pytest.fixture(scope="module")
def release_checkout(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The release's code (liqo_stack, runtime and its program), from git."""
    target = tmp_path_factory.mktemp("release")
    archive = subprocess.run(
        [
            "git",
            "-C",
            str(REPO),
            "archive",
            RELEASE_BEFORE_PULUMI_KUBERNETES,
            "liqo_stack",
            "runtime",
            "Pulumi.yaml",
            "__main__.py",
        ],
        capture_output=True,
        check=True,
    )
    subprocess.run(["tar", "-x", "-C", str(target)], input=archive.stdout, check=True)
    return target


def workspace(pulumi_env: PulumiEnvironment, project: Path, pythonpath: Path | None) -> auto.Stack:
    options = pulumi_env.workspace_options(project)
    if pythonpath is not None:  # the program and its dynamic providers import the release's packages
        options.env_vars = {**(options.env_vars or {}), "PYTHONPATH": str(pythonpath)}
    return auto.create_or_select_stack(stack_name=STACK, work_dir=str(project), opts=options)


def with_program_of(project: Path, source: Path) -> None:
    for name in ("Pulumi.yaml", "__main__.py"):
        shutil.copy(source / name, project / name)


@pytest.fixture(scope="module")
def project(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return tmp_path_factory.mktemp("upgrade-project")


@pytest.fixture(scope="module")
def installed(
    dev_env: DevEnvironment,
    pulumi_env: PulumiEnvironment,
    release_checkout: Path,
    project: Path,
    webhook_port: int,
    session_layout: ClusterLayout,
    runtime_slot: RuntimeSlot,
) -> Iterator[auto.Stack]:
    """The stack as the release made it (overrides conftest's: the runtime fixture runs against it)."""
    with_program_of(project, release_checkout)
    stack = workspace(pulumi_env, project, release_checkout)
    config = {
        "home": {"clusterId": "home", "kubeconfigPath": str(dev_env.kubeconfig("home"))},
        "foreignClusters": [
            {
                "clusterId": cluster_id,
                "kubeconfigPath": str(dev_env.kubeconfig(cluster_id)),
                "podCIDR": session_layout.pod_cidr(cluster_id),
            }
            for cluster_id in ("foreign-1", "foreign-2")
        ],
        "namespaces": [{"name": NAMESPACE, "podOffloadingStrategy": "Remote"}],
        "runtime": {"mode": "external", "webhookPort": webhook_port},
    }
    pulumi_env.set_liqo_config(stack, config)
    stack.up(on_output=print)
    try:
        yield stack
    finally:
        with_program_of(project, REPO)
        workspace(pulumi_env, project, None).destroy(on_output=print)  # the runtime releases the VirtualNodes
        runtime_slot.release()
        stack.workspace.remove_stack(STACK)


def resources(stack: auto.Stack) -> list[dict[str, Any]]:
    deployment = stack.export_stack().deployment
    assert deployment is not None
    found: list[dict[str, Any]] = deployment["resources"]
    return found


def live_uids(clients: dict[str, Client], objects: list[tuple[str, str, str, str | None, str]]) -> dict[Any, str]:
    """uid of each (cluster, apiVersion, kind, namespace, name) as the cluster has it now."""
    from lightkube.codecs import resource_registry
    from lightkube.generic_resource import get_generic_resource, load_in_cluster_generic_resources

    for client in clients.values():
        load_in_cluster_generic_resources(client)  # the CRDs' kinds (VirtualNode, NamespaceOffloading, ...)
    uids = {}
    for cluster_id, api_version, kind, namespace, name in objects:
        resource = get_generic_resource(api_version, kind) or resource_registry.load(api_version, kind)  # type: ignore[no-untyped-call]
        assert resource is not None, (api_version, kind)
        found: Any = clients[cluster_id].get(resource, name, namespace=namespace)
        uids[(cluster_id, api_version, kind, namespace, name)] = found.metadata.uid
    return uids


def pod_uids(client: Client, namespace: str) -> dict[str, str]:
    found: list[Any] = list(client.list(Pod, namespace=namespace))
    return {p.metadata.name: p.metadata.uid for p in found}


def test_the_release_stack_upgrades_in_place(
    installed: auto.Stack,
    runtime: ExternalRuntime,
    pulumi_env: PulumiEnvironment,
    project: Path,
    home: Client,
    foreign: dict[str, Client],
) -> None:
    clients = {"home": home, **foreign}
    # pulumi-python:dynamic/liqo:KubeObject and .../liqo:TokenKubeconfig
    old = [r for r in resources(installed) if r["type"].startswith("pulumi-python:dynamic")]
    objects = [
        (r["outputs"]["cluster_id"], m["apiVersion"], m["kind"], m["metadata"].get("namespace"), m["metadata"]["name"])
        for r in old
        if isinstance(m := r["outputs"].get("manifest"), dict) and "apiVersion" in m  # not a secret's
    ]
    assert len(objects) > 30, "the release's stack holds its objects as dynamic resources"
    before = live_uids(clients, objects)

    wait_phase(home, NAMESPACE, "Ready")
    pods = deploy_running(home, NAMESPACE, "web", 4)
    twin = f"{NAMESPACE}-home"
    remote_before = {cluster_id: pod_uids(client, twin) for cluster_id, client in foreign.items()}
    assert sum(map(len, remote_before.values())) == len(pods)

    with_program_of(project, REPO)
    upgraded = workspace(pulumi_env, project, None)
    result = upgraded.up(on_output=print)
    changes = result.summary.resource_changes or {}
    assert set(changes) <= {"create", "delete", "same", "update"}, changes  # never a replace

    kinds = {r["type"] for r in resources(upgraded)}
    assert all(
        t.startswith(("kubernetes:", "pulumi:providers:kubernetes", "liqo-stack:index:"))
        or t in ("pulumi:pulumi:Stack", GUARD, "pulumi:providers:pulumi-python")
        for t in kinds
    ), sorted(kinds)
    assert live_uids(clients, objects) == before, "every object taken over in place"
    remote_after = {cluster_id: pod_uids(client, twin) for cluster_id, client in foreign.items()}
    assert remote_after == remote_before, "the offloaded pods were not touched"
    assert pod_uids(home, NAMESPACE) == {p.metadata.name: p.metadata.uid for p in pods}

    # and from now on a normal stack: nothing to change, the runtime still serving it
    # Refreshed first: what the cluster itself writes meanwhile on an object the stack declares is no
    # change the stack would make (once, under CI's load, the identity's token Secret's metadata changed
    # between the `up` and this preview: `~ metadata`, cause not pinned down). `diff`: a failure shows it.
    upgraded.preview(expect_no_changes=True, refresh=True, diff=True, on_output=print)
    wait_until(lambda: all_running(home, NAMESPACE, "web", len(pods)), 30, "the pods still Running")
