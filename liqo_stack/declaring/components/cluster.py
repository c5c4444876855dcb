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

from dataclasses import dataclass
from typing import Any, cast

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

# The built-in kinds the stack declares; any other kind (our CRDs' VirtualNode and NamespaceOffloading)
# is a custom resource, which takes metadata and spec only.
BUILT_IN_KINDS: frozenset[tuple[str, str]] = frozenset(
    {
        ("v1", "Namespace"),
        ("v1", "ServiceAccount"),
        ("v1", "Secret"),
        ("v1", "ConfigMap"),
        ("v1", "Service"),
        ("apps/v1", "Deployment"),
        ("policy/v1", "PodDisruptionBudget"),
        ("rbac.authorization.k8s.io/v1", "ClusterRole"),
        ("rbac.authorization.k8s.io/v1", "ClusterRoleBinding"),
        ("rbac.authorization.k8s.io/v1", "Role"),
        ("rbac.authorization.k8s.io/v1", "RoleBinding"),
        ("node.k8s.io/v1", "RuntimeClass"),
        ("storage.k8s.io/v1", "StorageClass"),
        ("admissionregistration.k8s.io/v1", "MutatingWebhookConfiguration"),
        ("admissionregistration.k8s.io/v1", "ValidatingWebhookConfiguration"),
        ("admissionregistration.k8s.io/v1", "ValidatingAdmissionPolicy"),
        ("admissionregistration.k8s.io/v1", "ValidatingAdmissionPolicyBinding"),
        ("apiextensions.k8s.io/v1", "CustomResourceDefinition"),
    }
)
# A Secret's fields that are secret in the state and in every output, as pulumi-kubernetes' Secret keeps them.
SECRET_FIELDS = ("data", "stringData")


def type_token(api_version: str, kind: str) -> str:
    """pulumi-kubernetes' type of a kind: `kubernetes:apps/v1:Deployment`, the core group named `core`."""
    return f"kubernetes:{api_version if '/' in api_version else f'core/{api_version}'}:{kind}"


def camel_case(field: str) -> str:
    """A top-level field given as a Python argument, as the manifest writes it: `string_data` -> `stringData`."""
    head, *rest = field.split("_")
    return head + "".join(word.capitalize() for word in rest)


def annotated(manifest: Manifest, annotations: dict[str, str]) -> Manifest:
    """`manifest` with `annotations` added (the manifest itself is not changed)."""
    metadata = dict(manifest.get("metadata") or {})
    metadata["annotations"] = {**(metadata.get("annotations") or {}), **annotations}
    return {**manifest, "metadata": metadata}


class KubernetesObject(pulumi.CustomResource):
    """One object of any kind as the resource pulumi-kubernetes' provider manages for it, by its type
    (`type_token`) and its manifest's fields as they are written (camelCase), which the engine gets as
    they are. Not pulumi-kubernetes' typed classes: they send the same inputs, but importing their modules
    (every class of `core.v1`, `admissionregistration.v1`, ...) took 0.85 CPU-seconds of each run of the
    program, and the stack reads none of their typed outputs. What they add that the stack needs is
    kept: a Secret's `data` and `stringData` are secret. (Their aliases name API versions this stack
    never declared.) Each top-level field is an output of the same name: `output("data")`."""

    def __init__(self, resource_name: str, manifest: Manifest, opts: pulumi.ResourceOptions) -> None:
        api_version, kind = manifest["apiVersion"], manifest["kind"]
        props: dict[str, Any] = dict(manifest)
        if (api_version, kind) == ("v1", "Secret"):
            for field in SECRET_FIELDS:
                given = props.get(field)
                props[field] = None if given is None else pulumi.Output.secret(given)
            kept_secret = pulumi.ResourceOptions(additional_secret_outputs=list(SECRET_FIELDS))
            opts = pulumi.ResourceOptions.merge(opts, kept_secret)
        super().__init__(type_token(api_version, kind), resource_name, props, opts)

    def output(self, field: str) -> pulumi.Output[Any]:
        """A top-level field as the cluster has it once the object is applied (a Secret's `data`)."""
        return cast(pulumi.Output[Any], getattr(self, field))


def declare(
    resource_name: str, manifest: Manifest, opts: pulumi.ResourceOptions, **overrides: pulumi.Input[Any]
) -> KubernetesObject:
    """`manifest` as a pulumi-kubernetes object, applied with the stack's field manager. `overrides`
    replace top-level fields with values known later (outputs), e.g. a Secret's `string_data`."""
    manifest = annotated(manifest, APPLY_ANNOTATIONS)
    fields = {**manifest, **{camel_case(name): value for name, value in overrides.items()}}
    if (manifest["apiVersion"], manifest["kind"]) not in BUILT_IN_KINDS:
        extra = set(fields) - {"apiVersion", "kind", "metadata", "spec"}
        if extra:
            taken = "a custom resource takes metadata and spec only"
            raise ValueError(f"{manifest['kind']} {resource_name}: {taken}, not {sorted(extra)}")
    return KubernetesObject(resource_name, fields, opts)


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
    ) -> KubernetesObject:
        placed = pulumi.ResourceOptions.merge(opts, pulumi.ResourceOptions(provider=self.provider))
        return declare(f"{self.cluster_id}:{resource_name}", manifest, placed, **overrides)
