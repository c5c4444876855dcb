"""The liqo-stack program end to end on the session's clusters, through the pulumi CLI.

up creates every object in the right cluster; a second up changes nothing; a config change is
previewed exactly; a bad config fails naming the field and touches nothing; a manifest in the
seeds' system's format applies unchanged; destroy leaves nothing liqo-owned in any cluster.
"""

from __future__ import annotations

import subprocess
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from lightkube import ApiError, Client
from lightkube.generic_resource import create_namespaced_resource
from lightkube.resources.apiextensions_v1 import CustomResourceDefinition
from lightkube.resources.apps_v1 import Deployment
from lightkube.resources.core_v1 import Namespace, Secret, ServiceAccount
from lightkube.resources.node_v1 import RuntimeClass
from lightkube.resources.rbac_authorization_v1 import ClusterRole, ClusterRoleBinding, Role, RoleBinding
from lightkube.resources.storage_v1 import StorageClass
from pulumi import automation as auto

from liqo_stack.declaring.components.destroy_guard import TYPE as GUARD
from liqo_stack.dev.clusters import DevEnvironment
from liqo_stack.dev.pulumi_offline import PulumiEnvironment
from runtime.api import names

pytestmark = [pytest.mark.clusters, pytest.mark.pulumi]

VirtualNodeResource = create_namespaced_resource(names.GROUP, names.VERSION, "VirtualNode", "virtualnodes")
OffloadingResource = create_namespaced_resource(
    names.GROUP, names.VERSION, "NamespaceOffloading", "namespaceoffloadings"
)

SEEDS_FORMAT_MANIFEST = """\
apiVersion: offloading.liqo.io/v1beta1
kind: NamespaceOffloading
metadata:
  creationTimestamp: null
  name: offloading
  namespace: seeds-format
spec:
  clusterSelector:
    nodeSelectorTerms:
    - matchExpressions:
      - key: region
        operator: In
        values:
        - europe
        - us-west
      - key: staging
        operator: DoesNotExist
  namespaceMappingStrategy: DefaultName
  podOffloadingStrategy: LocalAndRemote
status: {}
"""


def base_config(dev_env: DevEnvironment) -> dict[str, Any]:
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
        "namespaces": [{"name": "e2e-apps", "clusterSelector": ["region in (europe)"]}],
    }


set_config = PulumiEnvironment.set_liqo_config


@pytest.fixture(scope="module")
def stack(dev_env: DevEnvironment, pulumi_env: PulumiEnvironment, project_dir: Path) -> Iterator[auto.Stack]:
    created = pulumi_env.stack_for_directory(project_dir, "e2e")
    set_config(created, base_config(dev_env))
    try:
        yield created
    finally:
        created.destroy(on_output=print)
        created.workspace.remove_stack("e2e")


def liqo_owned(client: Client) -> list[str]:
    """Every object carrying our managed-by label, and any CRD of our group."""
    lister: Any = client  # one loop over kinds of both scopes
    selector = {names.MANAGED_BY_LABEL: names.MANAGED_BY}
    found = [f"CRD {c.metadata.name}" for c in lister.list(CustomResourceDefinition) if names.GROUP in c.metadata.name]
    cluster_scoped: list[Any] = [Namespace, ClusterRole, ClusterRoleBinding, RuntimeClass, StorageClass]
    namespaced: list[Any] = [ServiceAccount, Secret, Role, RoleBinding, Deployment]
    for kind in cluster_scoped:
        found += [f"{kind.__name__} {o.metadata.name}" for o in lister.list(kind, labels=selector)]
    for kind in namespaced:
        found += [f"{kind.__name__} {o.metadata.name}" for o in lister.list(kind, namespace="*", labels=selector)]
    return found


def test_up_creates_every_object_in_its_cluster(stack: auto.Stack, home: Client, foreign: dict[str, Client]) -> None:
    result = stack.up(on_output=print)
    assert result.summary.result == "succeeded"
    # what a user reads as something wrong: plugins from $PATH, Deployments "scaled to 0" (external mode)
    assert "warning" not in (result.stdout + result.stderr).lower(), result.stdout + result.stderr
    types = {r["type"] for r in (stack.export_stack().deployment or {})["resources"]}
    assert all(t.startswith(("kubernetes:", "pulumi:", "liqo-stack:index:")) or t == GUARD for t in types), types
    assert home.get(RuntimeClass, names.RUNTIME_CLASS_NAME).handler == "liqo"
    storage_class: Any = home.get(StorageClass, names.STORAGE_CLASS_NAME)
    assert (storage_class.provisioner, storage_class.volumeBindingMode) == ("liqo.io/storage", "WaitForFirstConsumer")
    controller_manager: Any = home.get(Deployment, names.CONTROLLER_MANAGER, namespace="liqo")
    assert controller_manager.spec.replicas == 0
    node = home.get(VirtualNodeResource, "liqo-foreign-1", namespace="liqo")
    assert node["spec"]["labels"]["region"] == "europe"
    assert node["spec"]["labels"][names.TYPE_LABEL] == names.VIRTUAL_NODE_TYPE
    assert home.get(VirtualNodeResource, "liqo-foreign-2", namespace="liqo")["spec"]["sharingPercentage"] == 50
    assert (
        home.get(OffloadingResource, "offloading", namespace="e2e-apps")["spec"]["podOffloadingStrategy"]
        == "LocalAndRemote"
    )
    for cluster_id, client in foreign.items():
        tenant: Any = client.get(Namespace, "liqo-tenant-home")
        assert tenant.metadata.labels[names.TENANT_HOME_LABEL] == "home"
        assert client.get(ServiceAccount, "liqo-home-home", namespace="liqo-tenant-home")
        assert client.get(Deployment, names.FOREIGN_AGENT, namespace="liqo")
        with pytest.raises(ApiError):
            client.get(CustomResourceDefinition, "virtualnodes.offloading.liqo.io")
        assert cluster_id in result.outputs["foreignClusters"].value
    assert result.outputs["namespaces"].value["e2e-apps"]["clusters"] == {
        "foreign-1": {"twinNamespace": "e2e-apps-home"}
    }


def test_home_identity_is_confined_to_its_tenant_namespace(
    home: Client, dev_env: DevEnvironment, tmp_path: Path
) -> None:
    secret = home.get(Secret, "liqo-credentials-foreign-1", namespace="liqo")
    import base64

    kubeconfig = tmp_path / "identity.yaml"
    kubeconfig.write_bytes(base64.b64decode((secret.data or {})["kubeconfig"]))

    def can_i(*args: str) -> str:
        command = [str(dev_env.bin_dir / "kubectl"), "--kubeconfig", str(kubeconfig), "auth", "can-i", *args]
        return subprocess.run(command, capture_output=True, text=True).stdout.strip()

    assert can_i("create", "namespacemaps.offloading.liqo.io", "-n", "liqo-tenant-home") == "yes"
    assert can_i("create", "namespaces") == "no"
    assert can_i("list", "pods", "-n", "default") == "no"
    assert can_i("create", "namespacemaps.offloading.liqo.io", "-n", "default") == "no"


def test_second_up_changes_nothing(stack: auto.Stack) -> None:
    result = stack.up(on_output=print)
    assert set(result.summary.resource_changes or {}) == {"same"}


def test_config_change_is_previewed_exactly(stack: auto.Stack, dev_env: DevEnvironment) -> None:
    config = base_config(dev_env)
    config["foreignClusters"][1]["labels"] = {"region": "us-west"}
    config["namespaces"].append({"name": "e2e-more", "podOffloadingStrategy": "Remote"})
    set_config(stack, config)
    preview = stack.preview(diff=True, on_output=print)
    changes = {op: count for op, count in preview.change_summary.items() if op != auto.OpType.SAME}
    # foreign-2's VirtualNode gets the label (update); the new namespace and its NamespaceOffloading are created
    assert changes == {auto.OpType.UPDATE: 1, auto.OpType.CREATE: 2}
    assert "region" in preview.stdout and "us-west" in preview.stdout
    stack.up(on_output=print)


def test_new_kubeconfig_for_a_cluster_replaces_nothing(stack: auto.Stack, dev_env: DevEnvironment) -> None:
    """Like a provider's cluster identifier: objects follow the cluster id, not the kubeconfig."""
    config = base_config(dev_env)
    config["foreignClusters"][1]["labels"] = {"region": "us-west"}
    config["namespaces"].append({"name": "e2e-more", "podOffloadingStrategy": "Remote"})
    # the same cluster through the merged kubeconfig and its context: different text, same cluster
    config["foreignClusters"][0]["kubeconfigPath"] = str(dev_env.merged_kubeconfig)
    config["foreignClusters"][0]["context"] = "foreign-1"
    set_config(stack, config)
    preview = stack.preview(on_output=print)
    assert auto.OpType.REPLACE not in preview.change_summary
    assert auto.OpType.DELETE not in preview.change_summary
    assert auto.OpType.CREATE not in preview.change_summary
    assert preview.change_summary.get(auto.OpType.UPDATE, 0) > 0
    stack.up(on_output=print)


def test_bad_config_fails_naming_the_field_and_touches_nothing(stack: auto.Stack, dev_env: DevEnvironment) -> None:
    before = stack.export_stack().deployment
    config = base_config(dev_env)
    config["foreignClusters"][0]["sharingPercentage"] = 0
    config["runtime"] = {"mode": "in-the-cloud"}
    set_config(stack, config)
    with pytest.raises(auto.CommandError) as failed:
        stack.preview(on_output=print)
    message = str(failed.value)
    assert "liqo:foreignClusters[0].sharingPercentage: Input should be greater than or equal to 1" in message
    assert "liqo:runtime.mode: Input should be 'cluster' or 'external'" in message
    with pytest.raises(auto.CommandError):
        stack.up(on_output=print)
    after = stack.export_stack().deployment
    assert before is not None and after is not None
    assert after["resources"] == before["resources"]


def test_seeds_format_manifest_applies_unchanged(home: Client, dev_env: DevEnvironment, tmp_path: Path) -> None:
    manifest = tmp_path / "offloading.yaml"
    manifest.write_text(SEEDS_FORMAT_MANIFEST)
    kubectl = [str(dev_env.bin_dir / "kubectl"), "--kubeconfig", str(dev_env.kubeconfig("home"))]
    subprocess.run([*kubectl, "create", "namespace", "seeds-format"], check=True)
    subprocess.run([*kubectl, "apply", "-f", str(manifest)], check=True)
    applied = home.get(OffloadingResource, "offloading", namespace="seeds-format")
    terms = applied["spec"]["clusterSelector"]["nodeSelectorTerms"]
    assert terms[0]["matchExpressions"][1] == {"key": "staging", "operator": "DoesNotExist"}
    listed = subprocess.run([*kubectl, "get", "nso", "-n", "seeds-format"], capture_output=True, text=True, check=True)
    assert "DefaultName" in listed.stdout and "LocalAndRemote" in listed.stdout
    subprocess.run([*kubectl, "delete", "namespace", "seeds-format", "--wait=true"], check=True)


def test_destroy_leaves_nothing_liqo_owned(
    stack: auto.Stack, dev_env: DevEnvironment, home: Client, foreign: dict[str, Client]
) -> None:
    set_config(stack, base_config(dev_env))
    stack.destroy(on_output=print)
    for client in [home, *foreign.values()]:
        assert liqo_owned(client) == []
    # the application namespaces are the teams': kept
    assert home.get(Namespace, "e2e-apps")
