"""Namespace offloading end to end: the stack installed, the runtime running as local processes.

docs/offloading.md's behaviour: twin namespaces per mapping strategy in the clusters the selector matches,
per-cluster status and phase, conflicts refused without touching the foreign namespace, unoffload
removing the twins; and a controller killed mid-offload converging after restart.
"""

from __future__ import annotations

import json
import re
import time
from typing import Any, cast

import pytest
from lightkube import ApiError, Client
from lightkube.models.meta_v1 import ObjectMeta
from lightkube.resources.core_v1 import ConfigMap, Namespace, Node, Pod, Service
from lightkube.resources.core_v1 import Event as CoreEvent
from lightkube.types import PatchType

from liqo_stack.dev.clusters import DevEnvironment
from liqo_stack.dev.external_runtime import ExternalRuntime
from runtime.api import names
from runtime.api.resources import NamespaceMapResource, NamespaceOffloadingResource
from tests.support.cli import liqo_stack_command
from tests.support.kube import (
    all_running,
    create_namespace,
    deploy_running,
    exists,
    get_or_none,
    offload,
    status_of,
    twin_gone,
    unoffload,
    wait_phase,
    wait_until,
)

pytestmark = [pytest.mark.clusters, pytest.mark.pulumi]


def selected(status: dict[str, Any]) -> set[str]:
    return {
        cluster_id
        for cluster_id, conditions in status["remoteNamespacesConditions"].items()
        if any(c["type"] == "OffloadingRequired" and c["status"] == "True" for c in conditions)
    }


def ready_condition(status: dict[str, Any], cluster_id: str) -> dict[str, Any]:
    return next(c for c in status["remoteNamespacesConditions"][cluster_id] if c["type"] == "Ready")


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
    assert selected(status) == {"foreign-1"}
    # docs/offloading.md: the status reports for each remote cluster whether it has been selected
    not_selected = status["remoteNamespacesConditions"]["foreign-2"]
    assert [(c["type"], c["status"], c["reason"]) for c in not_selected] == [
        ("OffloadingRequired", "False", "NotSelected")
    ]
    assert exists(foreign["foreign-1"], "anded-home") and not exists(foreign["foreign-2"], "anded-home")
    # two selectors: region in (...) OR not staging -> both
    offload(home, "ored", {"clusterSelector": {"nodeSelectorTerms": [
        {"matchExpressions": [{"key": "region", "operator": "In", "values": ["europe", "us-west"]}]},
        {"matchExpressions": [{"key": "staging", "operator": "DoesNotExist"}]},
    ]}})  # fmt: skip
    assert selected(wait_phase(home, "ored", "Ready")) == {"foreign-1", "foreign-2"}
    # nothing matches
    offload(home, "nowhere", {"clusterSelector": {"nodeSelectorTerms": [
        {"matchExpressions": [{"key": "region", "operator": "In", "values": ["asia"]}]},
    ]}})  # fmt: skip
    assert set(wait_phase(home, "nowhere", "NoClusterSelected")["remoteNamespacesConditions"]) == {
        "foreign-1",
        "foreign-2",
    }


def test_enforce_same_name_refuses_a_foreign_namespace_it_did_not_create(
    runtime: ExternalRuntime, home: Client, foreign: dict[str, Client]
) -> None:
    theirs = foreign["foreign-2"]
    theirs.create(Namespace(metadata=ObjectMeta(name="payments", labels={"team": "payments"})))
    theirs.create(ConfigMap(metadata=ObjectMeta(name="precious", namespace="payments"), data={"keep": "me"}))
    offload(home, "payments", {"namespaceMappingStrategy": "EnforceSameName"})
    status = wait_phase(home, "payments", "SomeFailed")
    failed = ready_condition(status, "foreign-2")
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
    runtime.start("controller-manager")

    def asked() -> bool:  # the restarted controller has asked a foreign cluster for the twin
        for client in foreign.values():
            found = get_or_none(client, NamespaceMapResource, "home", names.tenant_namespace("home"))
            if found is not None and "restart" in ((found.get("spec") or {}).get("desiredMapping") or {}):
                return True
        return False

    wait_until(asked, 60, "the offload begun")
    runtime.kill("controller-manager")  # mid-offload, again
    runtime.start("controller-manager")
    wait_phase(home, "restart", "Ready", timeout=90)  # two starts, each syncing its informers first
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

    from liqo_stack.operating.cli import main

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

    from liqo_stack.operating.cli import main

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

    from liqo_stack.operating.cli import main

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
    """docs/offloading.md: the selector sees the virtual Nodes' labels, an administrator's included, and
    re-selects when they change (issue: `kubectl label node liqo-foreign-2 team=ml`)."""
    from click.testing import CliRunner

    from liqo_stack.operating.cli import main
    from tests.support.kube import VIRTUAL_NODES, node_ready

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


def test_changing_the_cluster_selector_at_run_time_moves_the_twin(
    runtime: ExternalRuntime, home: Client, foreign: dict[str, Client]
) -> None:
    europe = {"nodeSelectorTerms": [{"matchExpressions": [{"key": "region", "operator": "In", "values": ["europe"]}]}]}
    offload(home, "moving", {"clusterSelector": europe})
    assert selected(wait_phase(home, "moving", "Ready")) == {"foreign-1"}
    us_west = {
        "nodeSelectorTerms": [{"matchExpressions": [{"key": "region", "operator": "In", "values": ["us-west"]}]}]
    }
    home.patch(
        NamespaceOffloadingResource,
        names.NAMESPACE_OFFLOADING_NAME,
        {"spec": {"clusterSelector": us_west}},
        namespace="moving",
        patch_type=PatchType.MERGE,
    )
    wait_until(lambda: exists(foreign["foreign-2"], "moving-home"), 30, "twin created in foreign-2")
    wait_until(twin_gone(foreign["foreign-1"], "moving-home"), 60, "twin withdrawn from foreign-1")
    # the status catches up a moment after the twins move: until then it still shows the old, Ready selection
    wait_until(
        lambda: (s := status_of(home, "moving")).get("offloadingPhase") == "Ready" and selected(s) == {"foreign-2"},
        30,
        "moving: Ready on foreign-2 only",
    )


def test_selected_name_twin_and_a_second_namespace_asking_for_it_is_refused(
    runtime: ExternalRuntime, home: Client, foreign: dict[str, Client]
) -> None:
    """docs/offloading.md's SelectedName end to end; two home namespaces never share one twin."""
    offload(home, "alpha", {"namespaceMappingStrategy": "SelectedName", "remoteNamespaceName": "shared-twin"})
    status = wait_phase(home, "alpha", "Ready")
    assert status["remoteNamespaceName"] == "shared-twin"
    assert all(exists(client, "shared-twin") for client in foreign.values())
    offload(home, "beta", {"namespaceMappingStrategy": "SelectedName", "remoteNamespaceName": "shared-twin"})
    refused = wait_phase(home, "beta", "AllFailed")
    for cluster_id in foreign:
        condition = ready_condition(refused, cluster_id)
        assert condition["reason"] == "CreationFailed"
        assert "already the twin of home namespace alpha" in condition["message"]
    assert wait_phase(home, "alpha", "Ready")  # the first keeps its twin
    unoffload(home, "beta")
    assert all(exists(client, "shared-twin") for client in foreign.values()), "beta's withdrawal left alpha's twin"
    unoffload(home, "alpha")
    for client in foreign.values():
        wait_until(twin_gone(client, "shared-twin"), 60, "shared-twin deleted with alpha")


def test_a_bad_twin_name_fails_only_its_own_mapping(
    runtime: ExternalRuntime, home: Client, foreign: dict[str, Client]
) -> None:
    """A request the foreign cluster cannot satisfy (here a name no namespace may have, written past the
    home webhook) is that mapping's failure; the other namespaces of the same NamespaceMap go on."""
    offload(home, "steady", {})
    wait_phase(home, "steady", "Ready")
    client = foreign["foreign-1"]
    tenant = names.tenant_namespace("home")
    client.patch(
        NamespaceMapResource, "home", {"spec": {"desiredMapping": {"broken": "Not_A_Namespace"}}},
        namespace=tenant, patch_type=PatchType.MERGE,
    )  # fmt: skip

    def reported() -> dict[str, Any]:
        found = client.get(NamespaceMapResource, "home", namespace=tenant)
        return dict((found.get("status") or {}).get("currentMapping") or {})

    broken = wait_until(lambda: reported().get("broken"), 30, "the bad mapping reported")
    assert broken["phase"] == "CreationFailed" and "DNS-1123" in broken["message"]
    assert reported()["steady"]["phase"] == "Accepted"
    offload(home, "after-broken", {})
    wait_phase(home, "after-broken", "Ready")  # the map still serves new requests
    client.patch(
        NamespaceMapResource, "home", {"spec": {"desiredMapping": {"broken": None}}},
        namespace=tenant, patch_type=PatchType.MERGE,
    )  # fmt: skip
    wait_until(lambda: "broken" not in reported(), 30, "the bad mapping withdrawn")


def test_the_home_api_server_refuses_a_twin_name_too_long(runtime: ExternalRuntime, home: Client) -> None:
    namespace = "n" * 60  # its DefaultName twin, n...n-home, would be 65 characters
    home.create(Namespace(metadata=ObjectMeta(name=namespace)))
    with pytest.raises(ApiError) as err:
        home.create(
            NamespaceOffloadingResource.from_dict(
                {"metadata": {"name": names.NAMESPACE_OFFLOADING_NAME, "namespace": namespace}, "spec": {}}
            )
        )
    assert "must be a DNS-1123 label" in str(err.value.status.message)
    assert "SelectedName with a shorter spec.remoteNamespaceName" in str(err.value.status.message)


def test_an_unreachable_foreign_cluster_fails_only_itself(
    runtime: ExternalRuntime, home: Client, foreign: dict[str, Client], dev_env: DevEnvironment
) -> None:
    """docs/offloading.md's per-cluster status: with foreign-2 down, offloads still reach foreign-1, report
    SomeFailed naming foreign-2, pods are admitted, and an unoffload withdraws from foreign-1 at
    once and from foreign-2 when it is back."""
    offload(home, "before-outage", {})
    wait_phase(home, "before-outage", "Ready")
    with dev_env.api_server_stopped("foreign-2"):
        offload(home, "during-outage", {})
        status = wait_until(
            lambda: (
                (s := status_of(home, "during-outage")).get("offloadingPhase") == "SomeFailed"
                and ready_condition(s, "foreign-1")["status"] == "True"
                and s
            ),
            60,
            "during-outage SomeFailed with its foreign-1 twin Ready",
        )
        down = ready_condition(status, "foreign-2")
        assert down["reason"] == "ClusterUnreachable" and "foreign-2 could not be reached" in down["message"]
        assert exists(foreign["foreign-1"], "during-outage-home")
        # the webhook admits pods: the offloading is settled, if partly failed
        home.create(ConfigMap(metadata=ObjectMeta(name="probe", namespace="during-outage")))
        pod: Any = Pod.from_dict({
            "metadata": {"name": "admitted", "namespace": "during-outage"},
            "spec": {"containers": [{"name": "main", "image": "busybox"}]},
        })  # fmt: skip
        home.create(pod)

        home.delete(NamespaceOffloadingResource, names.NAMESPACE_OFFLOADING_NAME, namespace="before-outage")
        wait_until(twin_gone(foreign["foreign-1"], "before-outage-home"), 60, "withdrawn from foreign-1 at once")
        # the status is written at the end of the controller's pass, which also asks the stopped foreign-2:
        # the twin in foreign-1 may be gone while it still says Ready
        terminating = wait_phase(home, "before-outage", "Terminating", timeout=60)
        assert "foreign-2 could not be reached" in terminating["remoteNamespacesConditions"]["foreign-2"][0]["message"]
    # foreign-2 back: the twin it missed is created, the withdrawal it missed is done
    wait_phase(home, "during-outage", "Ready", timeout=60)
    wait_until(twin_gone(foreign["foreign-2"], "before-outage-home"), 60, "withdrawn from foreign-2 once back")
    wait_until(
        lambda: not list(home.list(NamespaceOffloadingResource, namespace="before-outage")), 60, "finalizer released"
    )


# -- issue 35: the CLI on a live offloading, as a user types it ------------------------------------


def cli(dev_env: DevEnvironment, *args: str) -> Any:
    """`liqo-stack ARGS --kubeconfig <home>`; its stdin is not a terminal (CliRunner), as in a script."""
    from click.testing import CliRunner

    from liqo_stack.operating.cli import main

    return CliRunner().invoke(main, [*args, "--kubeconfig", str(dev_env.kubeconfig("home"))])


def in_a_terminal(dev_env: DevEnvironment, args: list[str], answer: str, timeout: float = 120) -> tuple[int, str]:
    """`liqo-stack ARGS` on a terminal (a pty): `answer` typed at its question. (exit code, what it printed)"""
    import os
    import pty
    import select
    import subprocess

    primary, secondary = pty.openpty()
    command = liqo_stack_command(dev_env, *args)
    process = subprocess.Popen(command, stdin=secondary, stdout=secondary, stderr=secondary, close_fds=True)
    os.close(secondary)
    seen, answered = b"", False
    deadline = time.monotonic() + timeout
    try:
        while time.monotonic() < deadline:
            ready, _, _ = select.select([primary], [], [], 1)
            if not ready:
                if process.poll() is not None:
                    break
                continue
            try:
                chunk = os.read(primary, 4096)
            except OSError:  # EIO: the command exited and closed the terminal
                break
            if not chunk:
                break
            seen += chunk
            if not answered and b"[y/N]" in seen:
                os.write(primary, answer.encode() + b"\n")
                answered = True
        code = process.wait(timeout=max(1.0, deadline - time.monotonic()))
    finally:
        if process.poll() is None:
            process.kill()
        os.close(primary)
    return code, seen.decode(errors="replace")


def pinned_pod(namespace: str, name: str, cluster_id: str) -> Any:
    return Pod.from_dict({
        "metadata": {"name": name, "namespace": namespace},
        "spec": {
            "containers": [{"name": "app", "image": "nginx"}],
            "nodeSelector": {names.REMOTE_CLUSTER_ID_LABEL: cluster_id},
        },
    })  # fmt: skip


def pod_running(home: Client, namespace: str, name: str) -> bool:
    pod: Any = get_or_none(home, Pod, name, namespace)
    return bool(pod and pod.status and pod.status.phase == "Running")


def test_cli_selector_matching_no_virtual_node_fails_listing_them(
    runtime: ExternalRuntime, home: Client, dev_env: DevEnvironment
) -> None:
    """Issue 35 (1): the old README example (now docs/offloading.md) selected nothing and still exited 0."""
    create_namespace(home, "cli-nowhere")
    result = cli(dev_env, "offload", "namespace", "cli-nowhere", "--selector", "region in (asia,mars), !staging")
    assert result.exit_code == 2, result.output
    assert "Invalid value for --selector" in result.output and "matches no virtual node" in result.output
    assert (
        "liqo-foreign-1 (foreign-1): liqo.io/remote-cluster-id=foreign-1, liqo.io/type=virtual-node, region=europe\n"
        in (result.output)
    )
    assert "region=europe" in result.output and "region=us-west" in result.output and "staging=true" in result.output
    assert not list(home.list(NamespaceOffloadingResource, namespace="cli-nowhere")), "nothing applied"


def test_cli_offload_again_keeps_what_is_not_given_and_prints_each_change(
    runtime: ExternalRuntime, home: Client, dev_env: DevEnvironment
) -> None:
    """Issue 35 (3): a plain `offload` turned Remote + selector into LocalAndRemote with no selector."""
    create_namespace(home, "cli-keep")
    first = cli(
        dev_env, "offload", "namespace", "cli-keep", "--pod-offloading-strategy", "Remote", "--selector", "region"
    )
    assert first.exit_code == 0, first.output
    assert "podOffloadingStrategy: Remote" in first.output and "clusterSelector: --selector 'region'" in first.output
    again = cli(dev_env, "offload", "namespace", "cli-keep")
    assert again.exit_code == 0, again.output
    assert "nothing to change" in again.output and "offloaded: Ready" in again.output
    spec = home.get(NamespaceOffloadingResource, names.NAMESPACE_OFFLOADING_NAME, namespace="cli-keep")["spec"]
    assert spec["podOffloadingStrategy"] == "Remote"
    assert spec["clusterSelector"] == {
        "nodeSelectorTerms": [{"matchExpressions": [{"key": "region", "operator": "Exists"}]}]
    }
    changed = cli(dev_env, "offload", "namespace", "cli-keep", "--pod-offloading-strategy", "LocalAndRemote")
    assert changed.exit_code == 0, changed.output
    assert "podOffloadingStrategy: Remote -> LocalAndRemote" in changed.output
    assert "clusterSelector" not in changed.output, "the selector did not change"
    spec = home.get(NamespaceOffloadingResource, names.NAMESPACE_OFFLOADING_NAME, namespace="cli-keep")["spec"]
    assert spec["podOffloadingStrategy"] == "LocalAndRemote" and spec["clusterSelector"]["nodeSelectorTerms"]


def test_cli_dropping_a_cluster_shows_what_is_deleted_and_asks(
    runtime: ExternalRuntime, home: Client, foreign: dict[str, Client], dev_env: DevEnvironment
) -> None:
    """Issue 35 (2): a new selector removed a twin with its pods and objects without a word."""
    create_namespace(home, "cli-drop")
    assert cli(dev_env, "offload", "namespace", "cli-drop").exit_code == 0
    home.create(ConfigMap(metadata=ObjectMeta(name="settings", namespace="cli-drop"), data={"a": "b"}))
    home.create(pinned_pod("cli-drop", "web", "foreign-2"))
    wait_until(lambda: pod_running(home, "cli-drop", "web"), 90, "cli-drop/web Running in foreign-2")
    wait_until(
        lambda: get_or_none(foreign["foreign-2"], ConfigMap, "settings", "cli-drop-home"), 60, "settings reflected"
    )
    europe = ["offload", "namespace", "cli-drop", "--selector", "region=europe"]

    code, said = in_a_terminal(dev_env, europe, "n")  # a person at a terminal says no
    assert code == 1 and "Aborted" in said, said
    assert "Twin namespaces to be deleted:" in said
    assert "DATA AT RISK: foreign-2: cli-drop-home (namespace cli-drop, cluster no longer selected): 1 pods" in said
    assert "configmaps" in said and "cli-drop/web on liqo-foreign-2 (twin deleted)" in said
    assert "Drop foreign-2 from namespace cli-drop? [y/N]" in said

    refused = cli(dev_env, *europe)  # a script without --yes
    assert refused.exit_code == 1 and "pass --yes" in refused.output, refused.output
    assert "1 pods" in refused.output
    assert exists(foreign["foreign-2"], "cli-drop-home") and pod_running(home, "cli-drop", "web")
    spec = home.get(NamespaceOffloadingResource, names.NAMESPACE_OFFLOADING_NAME, namespace="cli-drop")["spec"]
    assert spec["clusterSelector"] == {"nodeSelectorTerms": []}, "nothing changed"

    done = cli(dev_env, *europe, "--yes")
    assert done.exit_code == 0, done.output
    assert "clusterSelector: (none: every cluster) -> --selector 'region=europe'" in done.output
    assert "offloaded: Ready, twin cli-drop-home in foreign-1" in done.output
    wait_until(twin_gone(foreign["foreign-2"], "cli-drop-home"), 60, "twin withdrawn from foreign-2")


def test_a_pod_on_a_virtual_node_of_a_namespace_not_offloaded_is_told_what_to_run(
    runtime: ExternalRuntime, home: Client, dev_env: DevEnvironment
) -> None:
    """Issue 35 (4): docs/reflection.md's OffloadingBackOff, with a Warning event and the command that fixes it."""
    create_namespace(home, "cli-later")
    eager = {
        "metadata": {"name": "eager", "namespace": "cli-later"},
        "spec": {"runtimeClassName": names.RUNTIME_CLASS_NAME, "containers": [{"name": "app", "image": "nginx"}]},
    }
    home.create(cast(Pod, Pod.from_dict(eager)))

    def backing_off() -> Any:
        pod: Any = home.get(Pod, "eager", namespace="cli-later")
        return pod.status and pod.status.reason == "OffloadingBackOff" and pod

    pod = wait_until(backing_off, 60, "cli-later/eager OffloadingBackOff")
    assert pod.status.phase == "Pending"
    assert "`liqo-stack offload namespace cli-later`" in pod.status.message, pod.status.message
    warning = wait_until(
        lambda: next(
            (
                e
                for e in home.list(CoreEvent, namespace="cli-later")
                if e.involvedObject.name == "eager" and e.reason == "OffloadingBackOff"
            ),
            None,
        ),
        30,
        "a Warning event on cli-later/eager",
    )
    assert warning.type == "Warning" and "liqo-stack offload namespace cli-later" in warning.message
    assert cli(dev_env, "offload", "namespace", "cli-later").exit_code == 0  # what the message says to run
    wait_until(lambda: pod_running(home, "cli-later", "eager"), 90, "cli-later/eager Running once offloaded")


def test_cli_unoffload_waits_for_the_twins_and_pods_come_home_without_failures(
    runtime: ExternalRuntime, home: Client, foreign: dict[str, Client], dev_env: DevEnvironment
) -> None:
    """Issue 35 (5): unoffload returned while the twins were Terminating; ReplicaSets got the webhook's
    "being unoffloaded" FailedCreate; a foreign controller's complaint about the terminating twin came home."""
    create_namespace(home, "cli-leave")
    assert cli(dev_env, "offload", "namespace", "cli-leave", "--pod-offloading-strategy", "Remote").exit_code == 0
    service = {
        "metadata": {"name": "web", "namespace": "cli-leave"},
        "spec": {"selector": {"app": "web"}, "ports": [{"port": 80}]},
    }
    home.create(cast(Service, Service.from_dict(service)))
    pods = deploy_running(home, "cli-leave", "web", 2)
    assert all(p.spec.nodeName in ("liqo-foreign-1", "liqo-foreign-2") for p in pods)

    result = cli(dev_env, "unoffload", "namespace", "cli-leave", "--yes")
    assert result.exit_code == 0, result.output
    for cluster_id, client in foreign.items():
        assert get_or_none(client, Namespace, "cli-leave-home") is None, f"the twin still there in {cluster_id}"

    def home_again() -> bool:
        running = all_running(home, "cli-leave", "web", 2)
        return bool(running) and all(not p.spec.nodeName.startswith("liqo-") for p in running)  # type: ignore[union-attr]

    wait_until(home_again, 90, "the web pods Running on home nodes")
    events = list(home.list(CoreEvent, namespace="cli-leave"))
    failed = [e.message for e in events if e.reason == "FailedCreate"]
    assert not failed, failed
    torn = [
        e.message
        for e in events
        if (e.metadata.labels or {}).get(names.EVENT_REFLECTED_FROM_LABEL) and "being terminated" in (e.message or "")
    ]
    assert not torn, torn
    # what it said: what goes, then progress until it is gone
    assert "Twin namespaces to be deleted:" in result.output and "cli-leave-home" in result.output
    assert "withdrawing the twin cli-leave-home" in result.output, "progress while the twins go"
    assert "namespace cli-leave unoffloaded" in result.output


def test_cli_unoffload_of_a_namespace_that_does_not_exist_says_so_and_info_reads_as_kubectl(
    runtime: ExternalRuntime, home: Client, dev_env: DevEnvironment
) -> None:
    """Issue 35 (6)."""
    missing = cli(dev_env, "unoffload", "namespace", "no-such-namespace", "--yes")
    assert missing.exit_code == 1 and "namespace no-such-namespace does not exist" in missing.output
    create_namespace(home, "cli-plain")
    plain = cli(dev_env, "unoffload", "namespace", "cli-plain", "--yes")
    assert plain.exit_code == 1 and "namespace cli-plain is not offloaded" in plain.output
    text = cli(dev_env, "info").output
    assert re.search(r"liqo-foreign-1 .* cpu \d+m?, memory \d+(Ki|Mi|Gi|Ti), pods \d+", text), text
    assert "labels: liqo.io/remote-cluster-id=foreign-1, liqo.io/type=virtual-node, region=europe\n" in text, text
