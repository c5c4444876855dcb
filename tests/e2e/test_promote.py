"""`liqo-stack promote --from dev --to staging` between two environments on separate sets of dev clusters:
dev on the session's clusters, staging on a second, smaller set (one home, one foreign cluster)."""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from click.testing import CliRunner
from lightkube import Client
from pulumi import automation as auto

from liqo_stack.dev.clusters import ClusterLayout, DevEnvironment
from liqo_stack.dev.pulumi_offline import PulumiEnvironment
from liqo_stack.foreseeing.policy import is_not_found
from liqo_stack.operating.cli import main as cli
from liqo_stack.operating.cli.promote import PROMOTED_FROM_TAG
from runtime.api import names
from runtime.api.resources import NamespaceOffloadingResource, VirtualNodeResource
from tests import conftest

pytestmark = [pytest.mark.clusters, pytest.mark.pulumi]

STAGING_LAYOUT = ClusterLayout(foreign=1, nodes_per_cluster=1)


@pytest.fixture(scope="module")
def staging_env() -> Iterator[DevEnvironment]:
    env = DevEnvironment(state_dir=conftest.test_state_root() / "staging-clusters")
    env.down(progress=lambda message: None)
    try:
        env.up(STAGING_LAYOUT, progress=lambda message: print(f"[staging] {message}", flush=True))
        yield env
    finally:
        env.down(progress=lambda message: None)


def environment(env: DevEnvironment, foreign: list[str]) -> dict[str, Any]:
    """What is per environment: the clusters."""
    return {
        "home": {"clusterId": "home", "kubeconfigPath": str(env.kubeconfig("home"))},
        "foreignClusters": [
            {"clusterId": cluster_id, "kubeconfigPath": str(env.kubeconfig(cluster_id)), "labels": {"region": "europe"}}
            for cluster_id in foreign
        ],
    }


DECLARATIONS: dict[str, Any] = {
    "namespaces": [{"name": "promo-apps", "podOffloadingStrategy": "Remote", "clusterSelector": ["region=europe"]}],
    "virtualKubelet": {"failureThreshold": 4},
}


@pytest.fixture(scope="module")
def stacks(
    pulumi_env: PulumiEnvironment, project_dir: Path, dev_env: DevEnvironment, staging_env: DevEnvironment
) -> Iterator[tuple[auto.Stack, auto.Stack]]:
    dev = pulumi_env.stack_for_directory(project_dir, "dev")
    staging = pulumi_env.stack_for_directory(project_dir, "staging")
    PulumiEnvironment.set_liqo_config(dev, {**environment(dev_env, ["foreign-1", "foreign-2"]), **DECLARATIONS})
    PulumiEnvironment.set_liqo_config(staging, {**environment(staging_env, ["foreign-1"]), "virtualKubelet": {}})
    dev.up(on_output=print)
    try:
        yield dev, staging
    finally:
        # staging's clusters go with the module (staging_env): its stack is only forgotten
        staging.workspace.remove_stack(staging.name, force=True)
        dev.destroy(on_output=print)
        dev.workspace.remove_stack(dev.name)


def promote(pulumi_env: PulumiEnvironment, work_dir: str, *args: str) -> tuple[int, str]:
    env = {k: v for k, v in pulumi_env.env_vars().items() if k != "PATH"}
    result = CliRunner().invoke(
        cli,
        ["promote", "--from", "dev", "--to", "staging", "--work-dir", work_dir, *args],
        env=env,
        catch_exceptions=False,
    )
    print(result.output)
    return result.exit_code, result.output


def values(stack: auto.Stack) -> dict[str, tuple[str, bool]]:
    return {key: (value.value, value.secret) for key, value in stack.get_all_config().items()}


def offloadings(home: Client) -> list[str]:
    try:
        return sorted(str(o.metadata.namespace) for o in home.list(NamespaceOffloadingResource, namespace="*"))
    except Exception as err:
        if is_not_found(err):  # no CRD: the stack was never applied there
            return []
        raise


def test_promote_applies_declarations_keeps_clusters_and_tags(
    stacks: tuple[auto.Stack, auto.Stack], pulumi_env: PulumiEnvironment, staging_env: DevEnvironment
) -> None:
    dev, staging = stacks
    code, output = promote(pulumi_env, staging.workspace.work_dir, "--dry-run")
    assert code == 0 and "dry run: nothing applied to staging" in output
    assert "liqo:namespaces: (unset) -> " in output
    assert "New twin namespaces:" in output and "foreign-1: promo-apps-home" in output
    home = staging_env.client("home")
    assert offloadings(home) == []
    assert "liqo:namespaces" not in staging.get_all_config()

    code, output = promote(pulumi_env, staging.workspace.work_dir)
    assert code == 0, output
    assert offloadings(home) == ["promo-apps"]
    offloading = home.get(NamespaceOffloadingResource, names.NAMESPACE_OFFLOADING_NAME, namespace="promo-apps")
    assert offloading["spec"]["podOffloadingStrategy"] == "Remote"
    node = home.get(VirtualNodeResource, names.virtual_node_name("foreign-1"), namespace=names.LIQO_NAMESPACE)
    assert node["spec"]["healthCheck"]["failureThreshold"] == 4
    config = staging.get_all_config()
    assert json.loads(config["liqo:home"].value)["kubeconfigPath"] == str(staging_env.kubeconfig("home"))
    assert len(json.loads(config["liqo:foreignClusters"].value)) == 1  # staging keeps its own clusters
    version = dev.history(page_size=1)[0].version
    assert staging.get_tag(PROMOTED_FROM_TAG) == f"dev@v{version}"


def test_promoting_twice_is_a_noop(stacks: tuple[auto.Stack, auto.Stack], pulumi_env: PulumiEnvironment) -> None:
    _, staging = stacks
    updates = len(staging.history())
    code, output = promote(pulumi_env, staging.workspace.work_dir)
    assert code == 0 and "nothing to promote" in output
    assert len(staging.history()) == updates


def test_a_violating_change_stops_at_the_gate_with_nothing_applied(
    stacks: tuple[auto.Stack, auto.Stack], pulumi_env: PulumiEnvironment, staging_env: DevEnvironment
) -> None:
    dev, staging = stacks
    declarations = json.loads(json.dumps(DECLARATIONS))
    declarations["namespaces"].append(
        {"name": "kube-public", "namespaceMappingStrategy": "EnforceSameName", "clusterSelector": ["region=europe"]}
    )
    dev.set_config("liqo:namespaces", auto.ConfigValue(json.dumps(declarations["namespaces"])))
    before = values(staging)
    updates = len(staging.history())
    code, output = promote(pulumi_env, staging.workspace.work_dir, "--yes")
    assert code == 1
    assert "[mandatory] liqo-reserved-namespace-same-name" in output
    assert "stopped: the preview of the target failed its policies; nothing applied to staging" in output
    assert values(staging) == before
    assert len(staging.history()) == updates
    assert offloadings(staging_env.client("home")) == ["promo-apps"]
