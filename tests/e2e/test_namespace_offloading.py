"""Namespace offloading end to end: the stack installed, the runtime running as local processes.

Seed 003's behaviour: twin namespaces per mapping strategy in the clusters the selector matches,
per-cluster status and phase, conflicts refused without touching the foreign namespace, unoffload
removing the twins; and a controller killed mid-offload converging after restart.
"""

from __future__ import annotations

import json
import time
from typing import Any

import pytest
from lightkube import Client
from lightkube.models.meta_v1 import ObjectMeta
from lightkube.resources.core_v1 import ConfigMap, Namespace, Node
from lightkube.types import PatchType

from liqo_stack.dev.clusters import DevEnvironment
from liqo_stack.dev.external_runtime import ExternalRuntime
from runtime.api import names
from runtime.kube.resources import NamespaceMapResource
from tests.e2e.harness import exists, offload, twin_gone, unoffload, wait_phase, wait_until

pytestmark = [pytest.mark.clusters, pytest.mark.pulumi]


def test_default_name_twins_in_every_cluster(
    runtime: ExternalRuntime, home: Client, foreign: dict[str, Client]
) -> None:
    offload(home, "shop", {})
    status = wait_phase(home, "shop", "Ready")
    assert status["remoteNamespaceName"] == "shop-home"
    assert set(status["remoteNamespacesConditions"]) == {"foreign-1", "foreign-2"}
    for client in foreign.values():
        twin: Any = client.get(Namespace, "shop-home")
        assert twin.metadata.labels[names.ORIGIN_LABEL] == "home"
    labels: Any = home.get(Namespace, "shop").metadata
    assert labels.labels[names.SCHEDULING_ENABLED_LABEL] == "true"


def test_seed_003_selector_examples(runtime: ExternalRuntime, home: Client, foreign: dict[str, Client]) -> None:
    # one selector: region in (europe, us-west) AND not staging -> foreign-1 only
    offload(home, "anded", {"clusterSelector": {"nodeSelectorTerms": [{"matchExpressions": [
        {"key": "region", "operator": "In", "values": ["europe", "us-west"]},
        {"key": "staging", "operator": "DoesNotExist"},
    ]}]}})  # fmt: skip
    status = wait_phase(home, "anded", "Ready")
    assert set(status["remoteNamespacesConditions"]) == {"foreign-1"}
    assert exists(foreign["foreign-1"], "anded-home") and not exists(foreign["foreign-2"], "anded-home")
    # two selectors: region in (...) OR not staging -> both
    offload(home, "ored", {"clusterSelector": {"nodeSelectorTerms": [
        {"matchExpressions": [{"key": "region", "operator": "In", "values": ["europe", "us-west"]}]},
        {"matchExpressions": [{"key": "staging", "operator": "DoesNotExist"}]},
    ]}})  # fmt: skip
    assert set(wait_phase(home, "ored", "Ready")["remoteNamespacesConditions"]) == {"foreign-1", "foreign-2"}
    # nothing matches
    offload(home, "nowhere", {"clusterSelector": {"nodeSelectorTerms": [
        {"matchExpressions": [{"key": "region", "operator": "In", "values": ["asia"]}]},
    ]}})  # fmt: skip
    wait_phase(home, "nowhere", "NoClusterSelected")


def test_enforce_same_name_refuses_a_foreign_namespace_it_did_not_create(
    runtime: ExternalRuntime, home: Client, foreign: dict[str, Client]
) -> None:
    theirs = foreign["foreign-2"]
    theirs.create(Namespace(metadata=ObjectMeta(name="payments", labels={"team": "payments"})))
    theirs.create(ConfigMap(metadata=ObjectMeta(name="precious", namespace="payments"), data={"keep": "me"}))
    offload(home, "payments", {"namespaceMappingStrategy": "EnforceSameName"})
    status = wait_phase(home, "payments", "SomeFailed")
    failed = {c["type"]: c for c in status["remoteNamespacesConditions"]["foreign-2"]}["Ready"]
    assert failed["status"] == "False" and "was not created for home cluster home" in failed["message"]
    assert exists(foreign["foreign-1"], "payments")
    unoffload(home, "payments")
    # theirs is untouched: same labels, same content, still there
    ns: Any = theirs.get(Namespace, "payments")
    assert ns.metadata.labels.get("team") == "payments" and names.ORIGIN_LABEL not in ns.metadata.labels
    assert theirs.get(ConfigMap, "precious", namespace="payments").data == {"keep": "me"}
    wait_until(lambda: not exists(foreign["foreign-1"], "payments"), 60, "our twin of payments deleted")


def test_unoffload_removes_twins_and_their_content(
    runtime: ExternalRuntime, home: Client, foreign: dict[str, Client]
) -> None:
    offload(home, "leaving", {})
    wait_phase(home, "leaving", "Ready")
    foreign["foreign-1"].create(ConfigMap(metadata=ObjectMeta(name="data", namespace="leaving-home"), data={"a": "b"}))
    unoffload(home, "leaving")
    for client in foreign.values():
        wait_until(twin_gone(client, "leaving-home"), 60, "twin deleted")
        maps = client.get(NamespaceMapResource, "home", namespace=names.tenant_namespace("home"))
        assert "leaving" not in ((maps.get("spec") or {}).get("desiredMapping") or {})
    ns: Any = home.get(Namespace, "leaving")
    assert names.SCHEDULING_ENABLED_LABEL not in (ns.metadata.labels or {})


def test_controller_killed_mid_offload_converges_without_duplicates(
    runtime: ExternalRuntime, home: Client, foreign: dict[str, Client]
) -> None:
    runtime.kill("controller-manager")
    offload(home, "restart", {})
    time.sleep(1)
    runtime.start("controller-manager")
    time.sleep(0.5)
    runtime.kill("controller-manager")  # mid-offload, again
    runtime.start("controller-manager")
    wait_phase(home, "restart", "Ready")
    for client in foreign.values():
        twins = [
            n
            for n in client.list(Namespace, labels={names.ORIGIN_LABEL: "home"})
            if n.metadata and n.metadata.name == "restart-home"
        ]
        assert len(twins) == 1
        maps = client.get(NamespaceMapResource, "home", namespace=names.tenant_namespace("home"))
        assert maps["spec"]["desiredMapping"]["restart"] == "restart-home"


def test_cli_offload_waits_for_ready_and_unoffload_cleans_up(
    runtime: ExternalRuntime, home: Client, foreign: dict[str, Client], dev_env: DevEnvironment
) -> None:
    from click.testing import CliRunner

    from liqo_stack.cli import main

    kubeconfig = ["--kubeconfig", str(dev_env.kubeconfig("home"))]
    home.create(Namespace(metadata=ObjectMeta(name="cli-apps")))
    result = CliRunner().invoke(main, ["offload", "namespace", "cli-apps", "--selector", "region=europe", *kubeconfig])
    assert result.exit_code == 0, result.output
    assert "offloaded: Ready, twin cli-apps-home in foreign-1" in result.output
    assert exists(foreign["foreign-1"], "cli-apps-home") and not exists(foreign["foreign-2"], "cli-apps-home")

    refused = CliRunner().invoke(main, ["unoffload", "namespace", "cli-apps", *kubeconfig], input="n\n")
    assert refused.exit_code != 0 and exists(foreign["foreign-1"], "cli-apps-home"), "nothing deleted without a yes"
    result = CliRunner().invoke(main, ["unoffload", "namespace", "cli-apps", "--yes", *kubeconfig])
    assert result.exit_code == 0, result.output
    wait_until(twin_gone(foreign["foreign-1"], "cli-apps-home"), 60, "twin deleted")


def test_cli_offload_reports_failures_and_exits_non_zero(
    runtime: ExternalRuntime, home: Client, foreign: dict[str, Client], dev_env: DevEnvironment
) -> None:
    from click.testing import CliRunner

    from liqo_stack.cli import main

    for client in foreign.values():
        client.create(Namespace(metadata=ObjectMeta(name="taken")))
    home.create(Namespace(metadata=ObjectMeta(name="taken")))
    args = ["offload", "namespace", "taken", "--namespace-mapping-strategy", "EnforceSameName"]
    result = CliRunner().invoke(main, [*args, "--kubeconfig", str(dev_env.kubeconfig("home"))])
    assert result.exit_code == 1
    assert "AllFailed" in result.output and "foreign-1: namespace taken already exists" in result.output


def test_info_shows_peerings_and_offloaded_namespaces(
    runtime: ExternalRuntime, home: Client, dev_env: DevEnvironment
) -> None:
    from click.testing import CliRunner

    from liqo_stack.cli import main

    offload(home, "described", {})
    wait_phase(home, "described", "Ready")
    kubeconfig = ["--kubeconfig", str(dev_env.kubeconfig("home"))]
    result = CliRunner().invoke(main, ["info", "-o", "json", *kubeconfig])
    assert result.exit_code == 0, result.output
    data = json.loads(result.output)
    assert [p["clusterId"] for p in data["peerings"]] == ["foreign-1", "foreign-2"]
    assert data["peerings"][1]["labels"]["staging"] == "true"
    described = next(ns for ns in data["namespaces"] if ns["namespace"] == "described")
    assert described["phase"] == "Ready" and described["twin"] == "described-home"
    assert described["clusters"] == {
        "foreign-1": {"OffloadingRequired": "True", "Ready": "True"},
        "foreign-2": {"OffloadingRequired": "True", "Ready": "True"},
    }
    text = CliRunner().invoke(main, ["info", *kubeconfig]).output
    assert "described" in text and "node Ready=True, cpu " in text


def test_selector_follows_labels_added_to_virtual_nodes_at_home(
    runtime: ExternalRuntime, home: Client, foreign: dict[str, Client], dev_env: DevEnvironment
) -> None:
    """Seed 003: the selector sees the virtual Nodes' labels, an administrator's included, and
    re-selects when they change (issue: `kubectl label node liqo-foreign-2 team=ml`)."""
    from click.testing import CliRunner

    from liqo_stack.cli import main
    from tests.e2e.harness import VIRTUAL_NODES, node_ready

    wait_until(lambda: all(node_ready(home, n) for n in VIRTUAL_NODES.values()), 60, "virtual nodes Ready")

    def label(node: str, value: str | None) -> None:
        home.patch(Node, node, {"metadata": {"labels": {"team": value}}}, patch_type=PatchType.MERGE)

    label("liqo-foreign-2", "ml")
    try:
        home.create(Namespace(metadata=ObjectMeta(name="train")))
        args = ["offload", "namespace", "train", "--selector", "team=ml", "--timeout", "60"]
        result = CliRunner().invoke(main, [*args, "--kubeconfig", str(dev_env.kubeconfig("home"))])
        assert result.exit_code == 0, result.output
        assert exists(foreign["foreign-2"], "train-home") and not exists(foreign["foreign-1"], "train-home")
        assert wait_phase(home, "train", "Ready")["remoteNamespacesConditions"]["foreign-2"]

        label("liqo-foreign-1", "ml")  # a label added selects that cluster too
        wait_until(lambda: exists(foreign["foreign-1"], "train-home"), 30, "twin created in foreign-1")
        wait_phase(home, "train", "Ready")
        label("liqo-foreign-2", None)  # a label removed deselects it: the twin goes, as in unoffload
        wait_until(twin_gone(foreign["foreign-2"], "train-home"), 60, "twin removed from foreign-2")
        label("liqo-foreign-1", None)
        wait_phase(home, "train", "NoClusterSelected", timeout=60)
        wait_until(twin_gone(foreign["foreign-1"], "train-home"), 60, "twin removed from foreign-1")
    finally:
        label("liqo-foreign-1", None)
        label("liqo-foreign-2", None)
