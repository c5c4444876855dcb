"""Namespace offloading end to end: the stack installed, the runtime running as local processes.

Seed 003's behaviour: twin namespaces per mapping strategy in the clusters the selector matches,
per-cluster status and phase, conflicts refused without touching the foreign namespace, unoffload
removing the twins; and a controller killed mid-offload converging after restart.
"""

from __future__ import annotations

import json
import subprocess
import sys
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest
from lightkube import ApiError, Client
from lightkube.models.meta_v1 import ObjectMeta
from lightkube.resources.core_v1 import ConfigMap, Namespace
from pulumi import automation as auto

from liqo_stack.dev.clusters import DevEnvironment
from liqo_stack.dev.pulumi_offline import PulumiEnvironment
from runtime.api import names
from runtime.kube.resources import NamespaceMapResource, NamespaceOffloadingResource

pytestmark = [pytest.mark.clusters, pytest.mark.pulumi]


def wait_until(condition: Callable[[], Any], timeout: float = 30, what: str = "condition") -> Any:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        value = condition()
        if value:
            return value
        time.sleep(0.2)
    raise TimeoutError(f"{what} not met after {timeout:.0f}s")


class Runtime:
    """The controller-manager and one foreign agent per foreign cluster, as local processes."""

    def __init__(self, dev_env: DevEnvironment, foreign_ids: list[str], logs: Path) -> None:
        self.dev_env = dev_env
        self.foreign_ids = foreign_ids
        self.logs = logs
        self.processes: dict[str, subprocess.Popen[bytes]] = {}

    def start(self, which: str) -> None:
        if which == "controller-manager":
            args = [
                "controller-manager",
                "--kubeconfig",
                str(self.dev_env.kubeconfig("home")),
                "--home-cluster-id",
                "home",
            ]
        else:
            args = ["foreign-agent", "--kubeconfig", str(self.dev_env.kubeconfig(which)), "--cluster-id", which]
        log = (self.logs / f"{which}.log").open("ab")
        self.processes[which] = subprocess.Popen([sys.executable, "-m", "runtime", *args], stdout=log, stderr=log)

    def start_all(self) -> None:
        self.start("controller-manager")
        for cluster_id in self.foreign_ids:
            self.start(cluster_id)

    def kill(self, which: str) -> None:
        process = self.processes.pop(which)
        process.kill()
        process.wait()

    def stop_all(self) -> None:
        for process in self.processes.values():
            process.terminate()
        for process in self.processes.values():
            process.wait(timeout=20)
        self.processes.clear()


@pytest.fixture(scope="module")
def installed(dev_env: DevEnvironment, pulumi_env: PulumiEnvironment, project_dir: Path) -> Iterator[auto.Stack]:
    """The stack with foreign-1 in region europe and foreign-2 in us-west + staging."""
    stack = pulumi_env.stack_for_directory(project_dir, "offloading")
    config = {
        "home": {"clusterId": "home", "kubeconfigPath": str(dev_env.kubeconfig("home"))},
        "foreignClusters": [
            {
                "clusterId": "foreign-1",
                "kubeconfigPath": str(dev_env.kubeconfig("foreign-1")),
                "labels": {"region": "europe"},
            },
            {
                "clusterId": "foreign-2",
                "kubeconfigPath": str(dev_env.kubeconfig("foreign-2")),
                "labels": {"region": "us-west", "staging": "true"},
            },
        ],
    }
    pulumi_env.set_liqo_config(stack, config)
    stack.up(on_output=print)
    try:
        yield stack
    finally:
        stack.destroy(on_output=print)
        stack.workspace.remove_stack("offloading")


@pytest.fixture(scope="module")
def runtime(
    installed: auto.Stack, dev_env: DevEnvironment, foreign_ids: list[str], tmp_path_factory: pytest.TempPathFactory
) -> Iterator[Runtime]:
    running = Runtime(dev_env, foreign_ids, tmp_path_factory.mktemp("runtime-logs"))
    running.start_all()
    try:
        yield running
    finally:
        # unoffload what the tests offloaded while the controllers still run (they hold finalizers)
        home = dev_env.client("home")
        for offloading in home.list(NamespaceOffloadingResource, namespace="*"):
            home.delete(NamespaceOffloadingResource, offloading.metadata.name, namespace=offloading.metadata.namespace)
        wait_until(lambda: not list(home.list(NamespaceOffloadingResource, namespace="*")), 60, "all unoffloaded")
        running.stop_all()


def offload(home: Client, namespace: str, spec: dict[str, Any]) -> None:
    home.create(Namespace(metadata=ObjectMeta(name=namespace)))
    home.create(
        NamespaceOffloadingResource.from_dict(
            {"metadata": {"name": names.NAMESPACE_OFFLOADING_NAME, "namespace": namespace}, "spec": spec}
        )
    )


def status_of(home: Client, namespace: str) -> dict[str, Any]:
    found = home.get(NamespaceOffloadingResource, names.NAMESPACE_OFFLOADING_NAME, namespace=namespace)
    return dict(found.get("status") or {})


def wait_phase(home: Client, namespace: str, phase: str, timeout: float = 40) -> dict[str, Any]:
    return dict(
        wait_until(
            lambda: (s := status_of(home, namespace)).get("offloadingPhase") == phase and s,
            timeout,
            f"{namespace} offloadingPhase {phase} (now {status_of(home, namespace).get('offloadingPhase')})",
        )
    )


def exists(client: Client, namespace: str) -> bool:
    try:
        found = client.get(Namespace, namespace)
    except ApiError as err:
        if err.status.code == 404:
            return False
        raise
    return found.metadata is None or found.metadata.deletionTimestamp is None


def twin_gone(client: Client, namespace: str) -> Callable[[], bool]:
    return lambda: not exists(client, namespace)


def unoffload(home: Client, namespace: str) -> None:
    home.delete(NamespaceOffloadingResource, names.NAMESPACE_OFFLOADING_NAME, namespace=namespace)
    wait_until(
        lambda: (
            not any(
                o.metadata.name == names.NAMESPACE_OFFLOADING_NAME
                for o in home.list(NamespaceOffloadingResource, namespace=namespace)
            )
        ),
        60,
        f"{namespace} unoffloaded",
    )


def test_default_name_twins_in_every_cluster(runtime: Runtime, home: Client, foreign: dict[str, Client]) -> None:
    offload(home, "shop", {})
    status = wait_phase(home, "shop", "Ready")
    assert status["remoteNamespaceName"] == "shop-home"
    assert set(status["remoteNamespacesConditions"]) == {"foreign-1", "foreign-2"}
    for client in foreign.values():
        twin: Any = client.get(Namespace, "shop-home")
        assert twin.metadata.labels[names.ORIGIN_LABEL] == "home"
    labels: Any = home.get(Namespace, "shop").metadata
    assert labels.labels[names.SCHEDULING_ENABLED_LABEL] == "true"


def test_seed_003_selector_examples(runtime: Runtime, home: Client, foreign: dict[str, Client]) -> None:
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
    runtime: Runtime, home: Client, foreign: dict[str, Client]
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


def test_unoffload_removes_twins_and_their_content(runtime: Runtime, home: Client, foreign: dict[str, Client]) -> None:
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
    runtime: Runtime, home: Client, foreign: dict[str, Client]
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
    runtime: Runtime, home: Client, foreign: dict[str, Client], dev_env: DevEnvironment
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
    runtime: Runtime, home: Client, foreign: dict[str, Client], dev_env: DevEnvironment
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


def test_info_shows_peerings_and_offloaded_namespaces(runtime: Runtime, home: Client, dev_env: DevEnvironment) -> None:
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
    assert "described" in text and "node not registered yet" in text
