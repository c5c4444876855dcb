"""The package's example programs (examples/package-*) as a user's own project: copied to a directory of
their own, with the package named by its absolute path (in the checkout, `../../package`)."""

from __future__ import annotations

import shutil
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import pytest
from lightkube import Client
from lightkube.resources.apps_v1 import Deployment
from lightkube.resources.core_v1 import Pod
from pulumi import automation as auto

from liqo_stack.declaring.package.schema import STACK
from runtime.api import names
from tests.support.kube import all_running, wait_phase, wait_until

ROOT = Path(__file__).resolve().parents[2]
PACKAGE = ROOT / "package"


def project_from_example(example: Path, directory: Path) -> Path:
    for source in example.iterdir():
        if source.is_file():
            shutil.copy(source, directory / source.name)
    manifest = directory / "Pulumi.yaml"
    text = manifest.read_text()
    assert "liqo-stack: ../../package" in text, f"{example}: Pulumi.yaml names the package by ../../package"
    manifest.write_text(text.replace("../../package", str(PACKAGE)))
    return directory


def resources_of(stack: auto.Stack) -> dict[str, Any]:
    """The stack's resources in its state, by URN."""
    deployment = stack.export_stack().deployment
    assert deployment is not None
    return {r["urn"]: r for r in deployment["resources"]}


@contextmanager
def program_installed(stack: auto.Stack, config: dict[str, str], release: Callable[[], None]) -> Iterator[auto.Stack]:
    """The program's stack up with `config`; destroyed afterwards while the module's runtime still runs (it
    releases the VirtualNodes), then `release` stops that runtime."""
    stack.set_all_config({key: auto.ConfigValue(value) for key, value in config.items()})
    stack.up(on_output=print)
    try:
        yield stack
    finally:
        stack.destroy(on_output=print)
        release()
        stack.workspace.remove_stack(stack.name)


def scaled_up(stack: auto.Stack, home: Client, namespace: str) -> list[Any]:
    """The program's Deployment `web` scaled from 0 to 2 by its config once the namespace is offloaded
    (the runtime, started after the first `up`, places its pods): its pods once Running."""
    wait_phase(home, namespace, "Ready")
    stack.set_config("replicas", auto.ConfigValue("2"))
    stack.up(on_output=print)
    pods: list[Any] = wait_until(lambda: all_running(home, namespace, "web", 2), 120, "the program's 2 pods Running")
    return pods


def assert_no_change(stack: auto.Stack) -> None:
    result = stack.preview(on_output=print)
    changes = {str(getattr(op, "value", op)): n for op, n in result.change_summary.items() if n}
    assert set(changes) == {"same"}, changes


def assert_refused_untouched(
    stack: auto.Stack, home: Client, namespace: str, attempts: list[Callable[..., Any]]
) -> None:
    """A bad namespace name (config `namespace`) fails each attempt (`pulumi preview`, `up`) naming the
    property's path in the program, and leaves the state and the live Deployment as they were."""
    before = resources_of(stack)
    stack.set_config("namespace", auto.ConfigValue("Bad_Namespace"))
    try:
        for attempt in attempts:
            with pytest.raises(auto.CommandError) as failed:
                attempt(on_output=print)
            assert "resources.liqo.properties.namespaces[0].name" in str(failed.value)
            assert "Bad_Namespace" in str(failed.value)
    finally:
        stack.set_config("namespace", auto.ConfigValue(namespace))
    after = resources_of(stack)
    assert after.keys() == before.keys()
    assert all(after[urn].get("outputs") == before[urn].get("outputs") for urn in before)
    deployment = home.get(Deployment, "web", namespace=namespace)
    assert deployment.spec is not None and deployment.spec.replicas == 2


def assert_runs_through_the_component(
    stack: auto.Stack, running: list[Any], foreign: dict[str, Client], namespace: str
) -> None:
    """The program's pods run on the virtual nodes and in the twin namespaces of the foreign clusters,
    and the stack's resources are the `Stack` component's children."""
    assert {p.spec.nodeName for p in running} <= {names.virtual_node_name(c) for c in foreign}
    twin = f"{namespace}-home"
    remote = [str(p.metadata and p.metadata.name) for c in foreign.values() for p in c.list(Pod, namespace=twin)]
    assert sorted(remote) == sorted(p.metadata.name for p in running)
    resources = resources_of(stack)
    [component] = [r for r in resources.values() if r["type"] == STACK]
    children = {r["type"] for r in resources.values() if r.get("parent") == component["urn"]}
    assert children >= {"liqo-stack:index:HomeControlPlane", "liqo-stack:index:Peering"}
    plan = stack.outputs()["virtualNodes"].value
    assert {cid: node["virtualNode"] for cid, node in plan.items()} == {c: names.virtual_node_name(c) for c in foreign}
