"""Namespaces offloaded by label selector: `liqo-stack offload|unoffload namespaces --namespace-selector`, a
namespace labelled later, a label removed, an offloading made by hand left alone, and the stack's
`liqo:namespaceSelectors` through `pulumi up`."""

from __future__ import annotations

import subprocess
from typing import Any

import pytest
from click.testing import CliRunner
from lightkube import Client
from lightkube.resources.core_v1 import Event as CoreEvent
from pulumi import automation as auto

from liqo_stack.dev.clusters import DevEnvironment
from liqo_stack.dev.external_runtime import ExternalRuntime
from liqo_stack.dev.pulumi_offline import PulumiEnvironment
from liqo_stack.operating.cli import main
from runtime.api import names
from runtime.api.resources import NamespaceOffloadingResource, NamespaceOffloadingSelectorResource
from tests.support.kube import create_namespace, exists, get_or_none, twin_gone, wait_phase, wait_until

pytestmark = [pytest.mark.clusters, pytest.mark.pulumi]


def kubectl(dev_env: DevEnvironment, *args: str) -> str:
    command = [str(dev_env.bin_dir / "kubectl"), "--kubeconfig", str(dev_env.kubeconfig("home")), *args]
    return subprocess.run(command, capture_output=True, text=True, check=True).stdout


def offloading(home: Client, namespace: str) -> Any:
    return get_or_none(home, NamespaceOffloadingResource, names.NAMESPACE_OFFLOADING_NAME, namespace)


def owner(home: Client, namespace: str) -> str | None:
    found = offloading(home, namespace)
    return (found.metadata.labels or {}).get(names.OFFLOADING_SELECTOR_LABEL) if found is not None else None


def reasons(home: Client, namespace: str) -> set[str]:
    return {str(e.reason) for e in home.list(CoreEvent, namespace=namespace)}


def test_cli_selector_offloads_labelled_namespaces_later_ones_too_and_unoffloads_on_label_removal(
    runtime: ExternalRuntime, home: Client, foreign: dict[str, Client], dev_env: DevEnvironment, unique_name: str
) -> None:
    label = f"team={unique_name}"
    first, second, by_hand, later = (f"{unique_name[:50]}-{n}" for n in ("a", "b", "hand", "later"))
    for namespace in (first, second, by_hand):
        create_namespace(home, namespace, {"team": unique_name})
    home.create(  # offloaded by hand, to foreign-2 only: the selector must leave it as it is
        NamespaceOffloadingResource.from_dict(
            {
                "metadata": {"name": names.NAMESPACE_OFFLOADING_NAME, "namespace": by_hand},
                "spec": {"clusterSelector": {"nodeSelectorTerms": [{"matchExpressions": [
                    {"key": "region", "operator": "In", "values": ["us-west"]}]}]}},
            }
        )
    )  # fmt: skip
    kubeconfig = ["--kubeconfig", str(dev_env.kubeconfig("home"))]

    args = ["offload", "namespaces", "--namespace-selector", label, "--selector", "region=europe", *kubeconfig]
    result = CliRunner().invoke(main, args)
    assert result.exit_code == 0, result.output
    assert "2/2 namespaces Ready" in result.output
    assert f"left as they are (offloaded by hand or by another selector): {by_hand}" in result.output
    selector = kubectl(dev_env, "get", "namespaceoffloadingselectors", "-o", "name").split()
    [name] = [s.rpartition("/")[2] for s in selector if unique_name[:30] in s]
    for namespace in (first, second):
        assert owner(home, namespace) == name
        assert exists(foreign["foreign-1"], f"{namespace}-home") and not exists(
            foreign["foreign-2"], f"{namespace}-home"
        )
        # the selector controller writes the event after the offloading it reports
        wait_until(
            lambda: "OffloadedBySelector" in reasons(home, namespace),  # noqa: B023
            30,
            f"OffloadedBySelector in {namespace}",
        )
    assert owner(home, by_hand) is None and offloading(home, by_hand).spec["clusterSelector"]["nodeSelectorTerms"]

    # a namespace labelled after the selector exists is offloaded
    create_namespace(home, later, {"team": unique_name})
    wait_until(lambda: owner(home, later) == name, 30, f"{later} offloaded by {name}")
    wait_phase(home, later, "Ready")
    assert exists(foreign["foreign-1"], f"{later}-home")

    # its label removed: unoffloaded, the twin deleted, and the namespace's events say why
    kubectl(dev_env, "label", "namespace", first, "team-")
    wait_until(lambda: offloading(home, first) is None, 60, f"{first} unoffloaded")
    wait_until(twin_gone(foreign["foreign-1"], f"{first}-home"), 60, "its twin deleted")
    wait_until(lambda: "UnoffloadedBySelector" in reasons(home, first), 30, f"UnoffloadedBySelector in {first}")
    status = wait_until(
        lambda: (
            (s := home.get(NamespaceOffloadingSelectorResource, name).get("status") or {}).get("readyNamespaces") == 2
            and s
        ),
        30,
        "the selector's status counts",
    )
    assert (status["matchedNamespaces"], status["offloadedNamespaces"], status["notOwned"]) == (3, 2, [by_hand])

    # unoffload by selector: says what goes, asks first, then only the selector's namespaces go
    unoffload = ["unoffload", "namespaces", "--namespace-selector", label, *kubeconfig]
    refused = CliRunner().invoke(main, unoffload, input="n\n")
    assert refused.exit_code != 0
    assert f"{second}-home" in refused.output and f"{later}-home" in refused.output
    assert f"Left as they are (offloaded by hand): {by_hand}" in refused.output
    assert get_or_none(home, NamespaceOffloadingSelectorResource, name) is not None, "nothing deleted without a yes"
    result = CliRunner().invoke(main, ["unoffload", "namespaces", "--namespace-selector", label, "--yes", *kubeconfig])
    assert result.exit_code == 0, result.output
    assert f"NamespaceOffloadingSelector {name} removed: 2 namespaces unoffloaded" in result.output
    for namespace in (second, later):
        assert offloading(home, namespace) is None and not exists(foreign["foreign-1"], f"{namespace}-home")
    assert owner(home, by_hand) is None and offloading(home, by_hand) is not None


def test_stack_config_selector_through_pulumi_up(
    runtime: ExternalRuntime, installed: auto.Stack, home: Client, unique_name: str
) -> None:
    """One `up` adds the selector; the `installed` fixture's restoring `up` removes it again, which waits
    (the selector's finalizer) until its namespaces are unoffloaded: the same path as
    `unoffload namespaces` above, so no second `up` here."""
    namespace = f"{unique_name[:50]}-app"
    create_namespace(home, namespace, {"stack-selected": unique_name})
    config = PulumiEnvironment.liqo_config(installed)
    declared = {"name": "by-label", "selector": f"stack-selected={unique_name}", "podOffloadingStrategy": "Remote"}
    PulumiEnvironment.set_liqo_config(installed, {**config, "namespaceSelectors": [declared]})
    installed.up(on_output=print)
    selector: Any = home.get(NamespaceOffloadingSelectorResource, "by-label")
    assert (selector.metadata.labels or {})[names.MANAGED_BY_LABEL] == names.MANAGED_BY
    wait_until(lambda: owner(home, namespace) == "by-label", 30, f"{namespace} offloaded by the stack's selector")
    assert wait_phase(home, namespace, "Ready")["remoteNamespaceName"] == f"{namespace}-home"
    assert offloading(home, namespace).spec["podOffloadingStrategy"] == "Remote"

    # the stack's selector is the stack's: the CLI refuses to remove it and says where to
    kubeconfig = ["--kubeconfig", str(runtime.kubeconfigs["home"])]
    args = ["unoffload", "namespaces", "--namespace-selector", f"stack-selected={unique_name}", "--yes", *kubeconfig]
    refused = CliRunner().invoke(main, args)
    assert refused.exit_code == 1 and "liqo:namespaceSelectors" in refused.output
    assert offloading(home, namespace) is not None
