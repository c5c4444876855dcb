"""The policy pack (policies/) run by the real pinned engine: `pulumi preview --policy-pack policies`.

The mandatory policies with a stack that violates them (the preview fails, the message names each
config path) and the careful stack, with the fixes the messages name, that passes them all; advisories
warn without failing; a policy config file changes a policy's settings per stack.
"""

from __future__ import annotations

import json
import shutil
from collections.abc import Iterator
from pathlib import Path
from typing import Any, cast

import pytest
from lightkube import Client
from lightkube.resources.core_v1 import Node
from pulumi import automation as auto

from liqo_stack.dev.clusters import DevEnvironment, NodeShape, fake_node_manifest
from liqo_stack.dev.pulumi_offline import PulumiEnvironment
from tests.conftest import REPO
from tests.support.kube import wait_until

pytestmark = [pytest.mark.clusters, pytest.mark.pulumi]

POLICY_PACK = str(REPO / "policies")
PROGRAMS = Path(__file__).parent / "programs"


def careful_config(dev_env: DevEnvironment) -> dict[str, Any]:
    """Passes every policy, advisories included."""
    return {
        "home": {"clusterId": "home", "kubeconfigPath": str(dev_env.kubeconfig("home"))},
        "foreignClusters": [
            {
                "clusterId": "foreign-1",
                "kubeconfigPath": str(dev_env.kubeconfig("foreign-1")),
                "labels": {"region": "europe"},
            },
            {"clusterId": "foreign-2", "kubeconfigPath": str(dev_env.kubeconfig("foreign-2")), "sharingPercentage": 50},
        ],
        "namespaces": [{"name": "policy-apps", "clusterSelector": ["region in (europe)"]}],
        "virtualKubelet": {"failureThreshold": 3},
    }


@pytest.fixture(scope="module")
def stack(pulumi_env: PulumiEnvironment, project_dir: Path) -> Iterator[auto.Stack]:
    created = pulumi_env.stack_for_directory(project_dir, "policies")
    try:
        yield created
    finally:
        created.workspace.remove_stack("policies")


def preview(stack: auto.Stack, config: dict[str, Any], policy_config: Path | None = None) -> auto.PreviewResult:
    PulumiEnvironment.set_liqo_config(stack, config)
    return stack.preview(
        policy_packs=[POLICY_PACK],
        policy_pack_configs=[str(policy_config)] if policy_config else None,
        on_output=print,
    )


def denied(stack: auto.Stack, config: dict[str, Any], policy_config: Path | None = None) -> str:
    with pytest.raises(auto.CommandError) as failed:
        preview(stack, config, policy_config)
    return " ".join(str(failed.value).split())  # the CLI wraps long lines


def test_home_identity_bound_cluster_wide_is_denied(
    pulumi_env: PulumiEnvironment, dev_env: DevEnvironment, tmp_path: Path
) -> None:
    project = tmp_path / "overprivileged"
    shutil.copytree(PROGRAMS / "overprivileged", project)
    overprivileged = pulumi_env.stack_for_directory(project, "overprivileged")
    try:
        message = denied(overprivileged, careful_config(dev_env))
    finally:
        overprivileged.workspace.remove_stack("overprivileged")
    assert "[mandatory] liqo-home-identity-least-privilege" in message
    assert (
        "foreign-1: ClusterRoleBinding home-identity-cluster-admin binds the home identity liqo-home-home cluster-wide"
        in message
    )
    # the stack's own RBAC (the same program without the extra binding) passed in test_careful_stack_passes_every_policy


def test_advisories_warn_without_failing(stack: auto.Stack, dev_env: DevEnvironment) -> None:
    config = careful_config(dev_env)
    config["namespaces"] = [{"name": "policy-apps"}]
    config["foreignClusters"][1]["sharingPercentage"] = 99
    del config["virtualKubelet"]
    output = " ".join(preview(stack, config).stdout.split())
    assert "[advisory] liqo-namespace-without-cluster-selector" in output
    assert "liqo:namespaces[0].clusterSelector: namespace policy-apps has no cluster selector" in output
    assert "liqo:foreignClusters[1].sharingPercentage: 99% of foreign-2 is above 95%" in output
    assert "liqo:virtualKubelet.failureThreshold is not set" in output


def test_policy_config_file_sets_a_stacks_thresholds_and_levels(
    stack: auto.Stack, dev_env: DevEnvironment, tmp_path: Path
) -> None:
    policy_config = tmp_path / "config.policies.json"
    policy_config.write_text(
        json.dumps({"liqo-sharing-percentage-high": {"enforcementLevel": "mandatory", "maxSharingPercentage": 40}})
    )
    message = denied(stack, careful_config(dev_env), policy_config)
    assert "[mandatory] liqo-sharing-percentage-high" in message
    assert "liqo:foreignClusters[1].sharingPercentage: 50% of foreign-2 is above 40%" in message


# Last in the module: the GPU node stays until its end, and shared at the default 90 % its GPU would
# round to zero in the stacks of the tests above too.
@pytest.fixture(scope="module")
def gpu_node(foreign: dict[str, Client]) -> Iterator[str]:
    """A node with one GPU in foreign-1: shared at 90 %, that GPU rounds down to zero."""
    manifest = fake_node_manifest("foreign-1", 9, NodeShape(cpu="4", memory="8Gi", gpus=1))
    client = foreign["foreign-1"]
    node: Any = client.create(cast(Node, Node.from_dict(manifest)))
    name: str = node.metadata.name

    def ready() -> bool:
        found: Any = client.get(Node, name)
        return any(c.type == "Ready" and c.status == "True" for c in found.status.conditions or [])

    wait_until(ready, 60, f"node {name} Ready")
    try:
        yield name
    finally:
        client.delete(Node, name)


def with_inline_kubeconfig(config: dict[str, Any], dev_env: DevEnvironment) -> dict[str, Any]:
    """foreign-2's kubeconfig given inline (`kubeconfig`) instead of as a path."""
    del config["foreignClusters"][1]["kubeconfigPath"]
    config["foreignClusters"][1]["kubeconfig"] = dev_env.kubeconfig("foreign-2").read_text()
    return config


@pytest.fixture(scope="module")
def denial(stack: auto.Stack, dev_env: DevEnvironment, gpu_node: str) -> str:
    """The message of one preview of a stack that breaks three mandatory policies at once (a preview costs
    the engine a run): a stack's policies are all checked before it fails, so each is reported."""
    config = with_inline_kubeconfig(careful_config(dev_env), dev_env)
    config["namespaces"].append(
        {"name": "kube-public", "namespaceMappingStrategy": "EnforceSameName", "clusterSelector": ["region=europe"]}
    )
    config["sharingPercentage"] = 90
    return denied(stack, config)


@pytest.fixture(scope="module")
def fixed(stack: auto.Stack, dev_env: DevEnvironment, gpu_node: str) -> auto.PreviewResult:
    """The careful stack with the fix that each denial names: the inline kubeconfig a secret, the GPU's
    count fixed where the sharing percentage would round it to zero."""
    config = with_inline_kubeconfig(careful_config(dev_env), dev_env)
    config["sharingPercentage"] = 90
    config["foreignClusters"][0]["fixedResources"] = {"nvidia.com/gpu": 1}
    PulumiEnvironment.set_liqo_config(stack, config)
    stack.set_config("liqo:foreignClusters", auto.ConfigValue(json.dumps(config["foreignClusters"]), secret=True))
    return stack.preview(policy_packs=[POLICY_PACK], on_output=print)


def test_careful_stack_passes_every_policy(fixed: auto.PreviewResult) -> None:
    assert "liqo-stack@v0.1.0" in fixed.stdout
    assert "[mandatory]" not in fixed.stdout and "[advisory]" not in fixed.stdout


def test_enforce_same_name_on_a_reserved_namespace_is_denied(denial: str) -> None:
    assert "[mandatory] liqo-reserved-namespace-same-name" in denial
    assert (
        "liqo:namespaces[1].namespaceMappingStrategy: namespace kube-public would be offloaded onto 'kube-public'"
        in denial
    )


def test_plain_kubeconfig_is_denied_and_a_secret_one_passes(denial: str, fixed: auto.PreviewResult) -> None:
    assert "[mandatory] liqo-kubeconfig-as-secret" in denial
    assert "liqo:foreignClusters[1].kubeconfig holds a kubeconfig in plain text" in denial
    assert "liqo-kubeconfig-as-secret" not in fixed.stdout


def test_one_gpu_shared_at_90_percent_is_denied_and_fixed_resources_pass(
    denial: str, fixed: auto.PreviewResult
) -> None:
    assert "[mandatory] liqo-extended-resource-rounds-to-zero" in denial
    assert "liqo:foreignClusters[0] (foreign-1): nvidia.com/gpu: 1 available x 90% (liqo:sharingPercentage)" in denial
    assert 'liqo:foreignClusters[0].fixedResources."nvidia.com/gpu"' in denial
    assert "liqo-extended-resource-rounds-to-zero" not in fixed.stdout
