"""`Cluster`: where an object goes: one explicit `kubernetes.Provider` per cluster.

Every object the stack declares is a pulumi-kubernetes resource of its own type (a `Deployment` is a
`kubernetes:apps/v1:Deployment`), created through the cluster's provider:
- server-side apply, with one field manager for the whole stack (`liqo-stack`, as the stack used before
  pulumi-kubernetes; the runtime's writers and hand edits are told apart from it by name), forced;
- `clusterIdentifier` = the stable cluster id of the stack config, so a new kubeconfig for the same
  cluster is an update of the provider and never replaces an object;
- ConfigMaps and Secrets updated in place (pulumi-kubernetes replaces them by default; a user of
  Kubernetes expects an edit, and the credentials Secret's name is fixed).
A user's program may pass its own provider for a cluster instead (see `liqo_stack.declaring.program`).
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Any

import pulumi
import pulumi_kubernetes as k8s

# How pulumi-kubernetes applies each object of the stack (annotations it reads on the object):
# - one field manager, `liqo-stack` (it otherwise picks a random one per object);
# - forced: the stack is the source of truth for the fields it declares, so `up` takes back a field a
#   hand edit (kubectl edit/patch) took over instead of failing on the conflict. Fields it does not
#   declare (the runtime's caBundles, status, finalizers) stay with their writers.
FIELD_MANAGER = "liqo-stack"
APPLY_ANNOTATIONS = {"pulumi.com/patchFieldManager": FIELD_MANAGER, "pulumi.com/patchForce": "true"}
# How long pulumi-kubernetes waits for an object, and for what (annotations too).
SKIP_AWAIT = "pulumi.com/skipAwait"
WAIT_FOR = "pulumi.com/waitFor"
TIMEOUT_SECONDS = "pulumi.com/timeoutSeconds"

Manifest = dict[str, Any]

# The kinds the stack declares, as pulumi-kubernetes' typed resources; any other kind (our CRDs'
# VirtualNode and NamespaceOffloading) is an `apiextensions.CustomResource`.
KINDS: dict[tuple[str, str], type[pulumi.CustomResource]] = {
    ("v1", "Namespace"): k8s.core.v1.Namespace,
    ("v1", "ServiceAccount"): k8s.core.v1.ServiceAccount,
    ("v1", "Secret"): k8s.core.v1.Secret,
    ("v1", "ConfigMap"): k8s.core.v1.ConfigMap,
    ("v1", "Service"): k8s.core.v1.Service,
    ("apps/v1", "Deployment"): k8s.apps.v1.Deployment,
    ("policy/v1", "PodDisruptionBudget"): k8s.policy.v1.PodDisruptionBudget,
    ("rbac.authorization.k8s.io/v1", "ClusterRole"): k8s.rbac.v1.ClusterRole,
    ("rbac.authorization.k8s.io/v1", "ClusterRoleBinding"): k8s.rbac.v1.ClusterRoleBinding,
    ("rbac.authorization.k8s.io/v1", "Role"): k8s.rbac.v1.Role,
    ("rbac.authorization.k8s.io/v1", "RoleBinding"): k8s.rbac.v1.RoleBinding,
    ("node.k8s.io/v1", "RuntimeClass"): k8s.node.v1.RuntimeClass,
    ("storage.k8s.io/v1", "StorageClass"): k8s.storage.v1.StorageClass,
    ("admissionregistration.k8s.io/v1", "MutatingWebhookConfiguration"): (
        k8s.admissionregistration.v1.MutatingWebhookConfiguration
    ),
    ("admissionregistration.k8s.io/v1", "ValidatingWebhookConfiguration"): (
        k8s.admissionregistration.v1.ValidatingWebhookConfiguration
    ),
    ("admissionregistration.k8s.io/v1", "ValidatingAdmissionPolicy"): (
        k8s.admissionregistration.v1.ValidatingAdmissionPolicy
    ),
    ("admissionregistration.k8s.io/v1", "ValidatingAdmissionPolicyBinding"): (
        k8s.admissionregistration.v1.ValidatingAdmissionPolicyBinding
    ),
    ("apiextensions.k8s.io/v1", "CustomResourceDefinition"): k8s.apiextensions.v1.CustomResourceDefinition,
}


def snake_case(field: str) -> str:
    """A manifest's top-level field as the typed resource's argument: `roleRef` -> `role_ref`."""
    return re.sub(r"(?<!^)(?=[A-Z])", "_", field).lower()


def annotated(manifest: Manifest, annotations: dict[str, str]) -> Manifest:
    """`manifest` with `annotations` added (the manifest itself is not changed)."""
    metadata = dict(manifest.get("metadata") or {})
    metadata["annotations"] = {**(metadata.get("annotations") or {}), **annotations}
    return {**manifest, "metadata": metadata}


def declare(
    resource_name: str, manifest: Manifest, opts: pulumi.ResourceOptions, **overrides: pulumi.Input[Any]
) -> pulumi.CustomResource:
    """`manifest` as the pulumi-kubernetes resource of its kind. Nested fields stay as the manifest
    writes them (camelCase): the SDK sends a plain dict as it is. `overrides` replace top-level
    fields with values known later (outputs), e.g. a Secret's `string_data`."""
    manifest = annotated(manifest, APPLY_ANNOTATIONS)
    api_version, kind = manifest["apiVersion"], manifest["kind"]
    fields = {snake_case(k): v for k, v in manifest.items() if k not in ("apiVersion", "kind")}
    fields.update(overrides)
    typed = KINDS.get((api_version, kind))
    if typed is not None:
        return typed(resource_name, opts=opts, **fields)
    extra = set(fields) - {"metadata", "spec"}
    if extra:
        raise ValueError(f"{kind} {resource_name}: a custom resource takes metadata and spec only, not {sorted(extra)}")
    return k8s.apiextensions.CustomResource(resource_name, api_version=api_version, kind=kind, opts=opts, **fields)


def provider(
    cluster_id: str,
    kubeconfig: pulumi.Input[str],
    opts: pulumi.ResourceOptions | None = None,
    *,
    delete_unreachable: bool = False,
    resource_name: str | None = None,
) -> k8s.Provider:
    """The explicit provider of one cluster, as the stack makes it from a kubeconfig in its config.
    `delete_unreachable`: a delete its API server cannot answer drops the object from the state
    (a foreign cluster the stack may abandon: liqo:foreignClusters[].abandonUnreachableAfter).
    `resource_name`: default the cluster id (a component holding a provider of a cluster that a sibling
    of the same type holds one of too names it apart: the URN does not hold the parent's name)."""
    return k8s.Provider(
        resource_name or cluster_id,
        kubeconfig=pulumi.Output.secret(kubeconfig),
        cluster_identifier=cluster_id,
        enable_server_side_apply=True,
        enable_config_map_mutable=True,
        enable_secret_mutable=True,
        # None (unset) unless asked: providers made before this setting keep their inputs
        delete_unreachable=True if delete_unreachable else None,
        opts=opts,
    )


@dataclass(frozen=True)
class Cluster:
    """A cluster of the stack: its stable id, its provider, and its kubeconfig when the stack config
    has one (the home identity's kubeconfig in a foreign cluster is composed from it)."""

    cluster_id: str
    provider: k8s.Provider
    kubeconfig: pulumi.Output[str] | None = None

    def object(
        self, resource_name: str, manifest: Manifest, opts: pulumi.ResourceOptions, **overrides: pulumi.Input[Any]
    ) -> pulumi.CustomResource:
        placed = pulumi.ResourceOptions.merge(opts, pulumi.ResourceOptions(provider=self.provider))
        return declare(f"{self.cluster_id}:{resource_name}", manifest, placed, **overrides)
