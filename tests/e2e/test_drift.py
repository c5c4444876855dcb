"""Drift, through the pinned pulumi CLI on the dev clusters with the runtime running.

A hand edit of a stack-owned field (a VirtualNode's taints, the home identity's Role, the
RuntimeClass) shows in `preview --refresh` and `up --refresh` puts the declared value back; what the
runtime writes (webhook caBundles, finalizers, status) and fields the stack never declared show
nothing; an object made by hand and then declared is adopted in place.
"""

from __future__ import annotations

import json
import os
import subprocess
from collections.abc import Iterator
from typing import Any

import pytest
from lightkube import Client
from lightkube.resources.admissionregistration_v1 import MutatingWebhookConfiguration
from lightkube.resources.core_v1 import Namespace
from lightkube.resources.node_v1 import RuntimeClass
from lightkube.resources.rbac_authorization_v1 import Role
from pulumi import automation as auto

from liqo_stack.declaring import manifests
from liqo_stack.dev.clusters import DevEnvironment
from liqo_stack.dev.external_runtime import ExternalRuntime
from liqo_stack.dev.pulumi_offline import PulumiEnvironment
from runtime.api import names
from runtime.api.resources import NamespaceOffloadingResource, VirtualNodeResource
from tests.support.kube import wait_until

pytestmark = [pytest.mark.clusters, pytest.mark.pulumi]

TAINT = {"key": "drift.example/dedicated", "value": "infra", "effect": "NoSchedule"}
DECLARED_NAMESPACE = "drift-apps"
ADOPTED_NAMESPACE = "drift-adopted"
IMPORTED_NAMESPACE = "drift-imported"
TENANT = names.tenant_namespace("home")
IDENTITY = names.home_identity_name("home")


@pytest.fixture(scope="module")
def stack(installed: auto.Stack, runtime: ExternalRuntime) -> Iterator[auto.Stack]:
    """The installed stack with a taint on foreign-1's VirtualNode and one declared offloading,
    the runtime running (it injects caBundles, holds the offloading's finalizer, writes status)."""
    config = PulumiEnvironment.liqo_config(installed)
    config["foreignClusters"][0]["taints"] = [TAINT]
    config["namespaces"] = [{"name": DECLARED_NAMESPACE, "podOffloadingStrategy": "Remote"}]
    PulumiEnvironment.set_liqo_config(installed, config)
    installed.up(on_output=print)
    yield installed


def kubectl(dev_env: DevEnvironment, cluster_id: str, *args: str, stdin: str | None = None) -> str:
    command = [str(dev_env.bin_dir / "kubectl"), "--kubeconfig", str(dev_env.kubeconfig(cluster_id)), *args]
    return subprocess.run(command, input=stdin, capture_output=True, text=True, check=True).stdout


def changes(preview: auto.PreviewResult) -> dict[auto.OpType, int]:
    return {op: count for op, count in preview.change_summary.items() if op != auto.OpType.SAME}


def assert_no_drift(stack: auto.Stack) -> None:
    """`pulumi preview --refresh --expect-no-changes`: fails (CommandError) on any change."""
    preview = stack.preview(refresh=True, expect_no_changes=True, diff=True, on_output=print)
    assert changes(preview) == {}


def offloading_of(home: Client, namespace: str) -> Any:
    return home.get(NamespaceOffloadingResource, names.NAMESPACE_OFFLOADING_NAME, namespace=namespace)


def injected_webhooks(home: Client) -> list[Any]:
    found = home.get(MutatingWebhookConfiguration, names.POD_MUTATING_WEBHOOK_CONFIGURATION).webhooks or []
    return found if found and all(hook.clientConfig.caBundle for hook in found) else []


def test_what_the_runtime_and_others_write_never_shows(
    stack: auto.Stack, home: Client, dev_env: DevEnvironment
) -> None:
    wait_until(lambda: injected_webhooks(home), 60, "caBundle injected by the runtime")
    offloading = wait_until(
        lambda: (found := offloading_of(home, DECLARED_NAMESPACE)).get("status", {}).get("offloadingPhase") and found,
        60,
        "offloading status written by the runtime",
    )
    assert names.NAMESPACE_OFFLOADING_FINALIZER in (offloading.metadata.finalizers or [])
    # a label and an annotation the stack never declared, added by someone else
    kubectl(dev_env, "home", "label", "runtimeclass", names.RUNTIME_CLASS_NAME, "team.example/owner=infra")
    # ... and one by another tool (its own field manager)
    home.patch(
        RuntimeClass,
        names.RUNTIME_CLASS_NAME,
        {"metadata": {"labels": {"team.example/cost-center": "42"}}},
        field_manager="team-tool",
    )
    kubectl(dev_env, "home", "annotate", "virtualnode", "-n", names.LIQO_NAMESPACE, "liqo-foreign-1", "note=x")
    assert_no_drift(stack)


def test_hand_edits_show_in_a_refreshed_preview_and_up_repairs_them(
    stack: auto.Stack, home: Client, foreign: dict[str, Client], dev_env: DevEnvironment
) -> None:
    edited_taints = json.dumps({"spec": {"taints": [{**TAINT, "value": "by-hand-taint"}]}})
    kubectl(
        dev_env,
        "home",
        "patch",
        "virtualnode",
        "-n",
        names.LIQO_NAMESPACE,
        "liqo-foreign-1",
        "--type=merge",
        "-p",
        edited_taints,
    )
    # a rule widened by hand (pulumi-kubernetes' diff does not report a list item appended beyond the
    # declared ones, so the edit changes a declared rule: see docs/infra-teams.md#drift)
    widen_rule = json.dumps([{"op": "replace", "path": "/rules/0/resources", "value": ["secrets"]}])
    kubectl(dev_env, "foreign-1", "patch", "role", "-n", TENANT, IDENTITY, "--type=json", "-p", widen_rule)
    selector = json.dumps({"scheduling": {"nodeSelector": {names.TYPE_LABEL: "by-hand-selector"}}})
    kubectl(dev_env, "home", "patch", "runtimeclass", names.RUNTIME_CLASS_NAME, "--type=merge", "-p", selector)

    plain = stack.preview(diff=True, on_output=print)
    assert changes(plain) == {}  # without --refresh the state still says all is as declared
    refreshed = stack.preview(refresh=True, diff=True, on_output=print)
    assert changes(refreshed) == {auto.OpType.UPDATE: 3}
    assert auto.OpType.REPLACE not in refreshed.change_summary
    for edited in ("by-hand-taint", "by-hand-selector", "secrets"):
        assert edited in refreshed.stdout

    stack.up(refresh=True, on_output=print)
    node = home.get(VirtualNodeResource, "liqo-foreign-1", namespace=names.LIQO_NAMESPACE)
    assert node["spec"]["taints"] == [TAINT]
    role: Any = foreign["foreign-1"].get(Role, IDENTITY, namespace=TENANT)
    assert [r.to_dict() for r in role.rules] == manifests.HOME_IDENTITY_TENANT_RULES
    runtime_class: Any = home.get(RuntimeClass, names.RUNTIME_CLASS_NAME)
    assert runtime_class.scheduling.nodeSelector == {names.TYPE_LABEL: names.VIRTUAL_NODE_TYPE}
    labels = runtime_class.metadata.labels
    assert labels["team.example/cost-center"] == "42"  # another writer's: kept
    # pulumi-kubernetes takes over what `kubectl` wrote (managers kubectl*, as after `kubectl apply`)
    # when it updates an object, so the update removed the label `kubectl label` added: see docs/infra-teams.md#drift
    assert "team.example/owner" not in labels
    assert_no_drift(stack)


def test_a_saved_refresh_shows_the_drift_and_a_plain_up_repairs_it(
    stack: auto.Stack, foreign: dict[str, Client], dev_env: DevEnvironment
) -> None:
    """`pulumi refresh` writes the live object into the state; a plain `up` then puts the declaration back."""
    remove_verbs = json.dumps([{"op": "replace", "path": "/rules/0/verbs", "value": ["get"]}])
    kubectl(dev_env, "foreign-1", "patch", "role", "-n", TENANT, IDENTITY, "--type=json", "-p", remove_verbs)
    try:
        stack.refresh(on_output=print)
        deployment = stack.export_stack().deployment
        assert deployment is not None
        [role] = [r for r in deployment["resources"] if r["urn"].endswith("::foreign-1:home-identity-role")]
        assert role["outputs"]["rules"][0]["verbs"] == ["get"], "the state holds the live object after a refresh"

        preview = stack.preview(diff=True, on_output=print)
        assert changes(preview) == {auto.OpType.UPDATE: 1}
    finally:
        stack.up(on_output=print)  # the identity's rights back, whatever failed (the runtime needs them)
    live: Any = foreign["foreign-1"].get(Role, IDENTITY, namespace=TENANT)
    assert [r.to_dict() for r in live.rules] == manifests.HOME_IDENTITY_TENANT_RULES
    assert_no_drift(stack)


def test_a_hand_made_object_once_declared_is_adopted_in_place(
    stack: auto.Stack, home: Client, dev_env: DevEnvironment
) -> None:
    kubectl(dev_env, "home", "create", "namespace", ADOPTED_NAMESPACE)
    made = {
        "apiVersion": f"{names.GROUP}/{names.VERSION}",
        "kind": "NamespaceOffloading",
        "metadata": {"name": names.NAMESPACE_OFFLOADING_NAME, "namespace": ADOPTED_NAMESPACE},
        "spec": {"podOffloadingStrategy": "Remote", "namespaceMappingStrategy": "DefaultName"},
    }
    kubectl(dev_env, "home", "apply", "-f", "-", stdin=json.dumps(made))
    namespace_uid = home.get(Namespace, ADOPTED_NAMESPACE).metadata.uid  # type: ignore[union-attr]
    offloading_uid = offloading_of(home, ADOPTED_NAMESPACE).metadata.uid

    config = PulumiEnvironment.liqo_config(stack)
    config["namespaces"].append({"name": ADOPTED_NAMESPACE, "podOffloadingStrategy": "LocalAndRemote"})
    PulumiEnvironment.set_liqo_config(stack, config)
    preview = stack.preview(refresh=True, diff=True, on_output=print)
    assert changes(preview) == {auto.OpType.CREATE: 2}  # the namespace and its offloading, taken over
    stack.up(on_output=print)

    assert home.get(Namespace, ADOPTED_NAMESPACE).metadata.uid == namespace_uid  # type: ignore[union-attr]
    adopted = offloading_of(home, ADOPTED_NAMESPACE)
    assert adopted.metadata.uid == offloading_uid
    assert adopted["spec"]["podOffloadingStrategy"] == "LocalAndRemote"  # now as declared
    assert_no_drift(stack)


def test_pulumi_import_takes_a_hand_made_object_into_the_state(
    stack: auto.Stack, home: Client, dev_env: DevEnvironment, pulumi_env: PulumiEnvironment
) -> None:
    """`pulumi import` through the home cluster's provider (it did not work with the dynamic provider)."""
    kubectl(dev_env, "home", "create", "namespace", IMPORTED_NAMESPACE)
    uid = home.get(Namespace, IMPORTED_NAMESPACE).metadata.uid  # type: ignore[union-attr]
    deployment = stack.export_stack().deployment
    assert deployment is not None
    [provider] = [r for r in deployment["resources"] if r["urn"].endswith("pulumi:providers:kubernetes::home")]
    pulumi = [str(pulumi_env.bin_dir / "pulumi"), "--non-interactive", "--stack", stack.name]
    env = {**os.environ, **pulumi_env.env_vars(), "TMPDIR": str(pulumi_env.scratch_dir)}
    work_dir = stack.workspace.work_dir
    imported = subprocess.run(
        [
            *pulumi,
            "import",
            "kubernetes:core/v1:Namespace",
            "imported",
            IMPORTED_NAMESPACE,
            "--yes",
            "--protect=false",
            "--generate-code=false",
            "--provider",
            f"home={provider['urn']}",
        ],
        cwd=work_dir,
        env=env,
        capture_output=True,
        text=True,
    )
    assert imported.returncode == 0, imported.stdout + imported.stderr
    deployment = stack.export_stack().deployment
    assert deployment is not None
    [entry] = [r for r in deployment["resources"] if r["urn"].endswith("kubernetes:core/v1:Namespace::imported")]
    assert entry["outputs"]["metadata"]["uid"] == uid
    # the program does not declare it: forget it again, so the next `up` does not delete it
    subprocess.run([*pulumi, "state", "delete", entry["urn"], "--yes"], cwd=work_dir, env=env, check=True)
    assert home.get(Namespace, IMPORTED_NAMESPACE).metadata.uid == uid  # type: ignore[union-attr]
    assert_no_drift(stack)
