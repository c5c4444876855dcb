"""The Kubernetes objects liqo-stack installs, as plain manifests (pure functions, no Pulumi).

The components in `liqo_stack.declaring.components` decide which cluster each goes to and in what order;
what each object looks like is decided here, once. Our custom objects are written as a server-side
apply should declare them (`to_apply`: no empty maps), so that a setting taken out of the stack
leaves the object as it was before the setting was ever made.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from runtime.api import (
    CustomResourceReflection,
    NamespaceOffloading,
    NamespaceOffloadingSpec,
    VirtualNode,
    VirtualNodeSpec,
    names,
    twinnames,
)
from runtime.api.namespaceselector import NamespaceOffloadingSelector, NamespaceOffloadingSelectorSpec
from runtime.api.nodeaccess import ALWAYS_TOLERATED
from runtime.api.plan import virtual_node_labels
from runtime.api.quota import Quota, QuotaSpec
from runtime.api.shadowpod import FIELDS_THE_FOREIGN_CLUSTER_DECIDES

Manifest = dict[str, Any]


def _labels(component: str) -> dict[str, str]:
    return {names.MANAGED_BY_LABEL: names.MANAGED_BY, names.COMPONENT_LABEL: component}


def namespace(
    name: str, component: str, extra_labels: dict[str, str] | None = None, annotations: dict[str, str] | None = None
) -> Manifest:
    metadata: Manifest = {"name": name, "labels": {**_labels(component), **(extra_labels or {})}}
    if annotations:
        metadata["annotations"] = annotations
    return {"apiVersion": "v1", "kind": "Namespace", "metadata": metadata}


def runtime_namespace(component: str) -> Manifest:
    """Where the runtime's Deployments run: only pods of the `restricted` Pod Security level are admitted."""
    return namespace(names.LIQO_NAMESPACE, component, {names.POD_SECURITY_ENFORCE_LABEL: names.POD_SECURITY_LEVEL})


def runtime_class() -> Manifest:
    """RuntimeClass `liqo`: its pods go to virtual nodes and tolerate their taint (docs/offloading.md)."""
    return {
        "apiVersion": "node.k8s.io/v1",
        "kind": "RuntimeClass",
        "metadata": {"name": names.RUNTIME_CLASS_NAME, "labels": _labels("runtime-class")},
        "handler": names.RUNTIME_CLASS_HANDLER,
        "scheduling": {
            "nodeSelector": {names.TYPE_LABEL: names.VIRTUAL_NODE_TYPE},
            "tolerations": [
                {
                    "key": names.VIRTUAL_NODE_TAINT_KEY,
                    "operator": "Equal",
                    "value": names.VIRTUAL_NODE_TAINT_VALUE,
                    "effect": names.VIRTUAL_NODE_TAINT_EFFECT,
                }
            ],
        },
    }


def storage_class() -> Manifest:
    """StorageClass `liqo` (docs/reflection.md): binding waits for the first pod, so a claim goes where that pod goes;
    on a virtual node its virtual kubelet provisions it in the foreign cluster."""
    return {
        "apiVersion": "storage.k8s.io/v1",
        "kind": "StorageClass",
        "metadata": {"name": names.STORAGE_CLASS_NAME, "labels": _labels("storage-class")},
        "provisioner": names.STORAGE_PROVISIONER,
        "reclaimPolicy": names.STORAGE_RECLAIM_POLICY,
        "volumeBindingMode": "WaitForFirstConsumer",
    }


def service_account(name: str, ns: str, component: str) -> Manifest:
    return {
        "apiVersion": "v1",
        "kind": "ServiceAccount",
        "metadata": {"name": name, "namespace": ns, "labels": _labels(component)},
    }


def service_account_token(
    account: str, ns: str, component: str, name: str, labels: dict[str, str] | None = None
) -> Manifest:
    """A long-lived token Secret, filled by the token controller of the cluster it lives in. The token is
    signed over the Secret's name (and the account's): a Secret made again under the same name holds
    the very token that deleting it revoked, so give each Secret issued a `name` of its own
    (docs/security.md#credentials-that-change)."""
    return {
        "apiVersion": "v1",
        "kind": "Secret",
        "type": "kubernetes.io/service-account-token",
        "metadata": {
            "name": name,
            "namespace": ns,
            "labels": {**_labels(component), **(labels or {})},
            "annotations": {"kubernetes.io/service-account.name": account},
        },
    }


def cluster_role(name: str, rules: list[Manifest], component: str) -> Manifest:
    return {
        "apiVersion": "rbac.authorization.k8s.io/v1",
        "kind": "ClusterRole",
        "metadata": {"name": name, "labels": _labels(component)},
        "rules": rules,
    }


def role(name: str, ns: str, rules: list[Manifest], component: str) -> Manifest:
    return {
        "apiVersion": "rbac.authorization.k8s.io/v1",
        "kind": "Role",
        "metadata": {"name": name, "namespace": ns, "labels": _labels(component)},
        "rules": rules,
    }


def binding(
    kind: str, name: str, role_name: str, account: str, account_ns: str, component: str, ns: str | None = None
) -> Manifest:
    """A RoleBinding (with ns) or ClusterRoleBinding of a ClusterRole or Role to a ServiceAccount."""
    meta: Manifest = {"name": name, "labels": _labels(component)}
    if ns:
        meta["namespace"] = ns
    return {
        "apiVersion": "rbac.authorization.k8s.io/v1",
        "kind": "RoleBinding" if ns else "ClusterRoleBinding",
        "metadata": meta,
        "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": kind, "name": role_name},
        "subjects": [{"kind": "ServiceAccount", "name": account, "namespace": account_ns}],
    }


# Cluster mode: /healthz and /readyz in the clear for the kubelet's probes; /metrics over TLS,
# guarded by TokenReview + SubjectAccessReview (runtime/kube/securemetrics.py).
PROBE_CONTAINER_PORT = 8081
METRICS_CONTAINER_PORT = 8443
SERVING_ARGS = [
    "--probe-address=0.0.0.0",
    f"--probe-port={PROBE_CONTAINER_PORT}",
    f"--metrics-secure-port={METRICS_CONTAINER_PORT}",
]


def restricted_pod_security() -> tuple[Manifest, Manifest]:
    """The pod's and the container's securityContext: Pod Security `restricted`, plus a read-only root."""
    pod = {
        "runAsNonRoot": True,
        "runAsUser": names.RUNTIME_USER_ID,
        "runAsGroup": names.RUNTIME_USER_ID,
        "seccompProfile": {"type": "RuntimeDefault"},
    }
    container = {
        "allowPrivilegeEscalation": False,
        "readOnlyRootFilesystem": True,
        "capabilities": {"drop": ["ALL"]},
    }
    return pod, container


def deployment(
    name: str,
    ns: str,
    image: str,
    args: list[str],
    account: str,
    replicas: int,
    component: str,
    env: list[Manifest] | None = None,
) -> Manifest:
    """With more than one replica (they elect a leader): at most one per node (a node failure takes
    one replica, never both), and a rollout replaces them one by one, since with one per node a
    surge pod would find no node."""
    labels = {**_labels(component), "app.kubernetes.io/name": name}
    pod_security, container_security = restricted_pod_security()

    def probe(path: str) -> Manifest:
        return {"httpGet": {"path": path, "port": "probes"}, "periodSeconds": 10}

    selector = {"matchLabels": {"app.kubernetes.io/name": name}}
    spread: Manifest = {}
    if replicas > 1:
        spread = {
            "affinity": {
                "podAntiAffinity": {
                    "requiredDuringSchedulingIgnoredDuringExecution": [
                        {"labelSelector": selector, "topologyKey": "kubernetes.io/hostname"}
                    ]
                }
            }
        }
    return {
        "apiVersion": "apps/v1",
        "kind": "Deployment",
        "metadata": {"name": name, "namespace": ns, "labels": labels},
        "spec": {
            "replicas": replicas,
            "selector": selector,
            **(
                {"strategy": {"type": "RollingUpdate", "rollingUpdate": {"maxSurge": 0, "maxUnavailable": 1}}}
                if replicas > 1
                else {}
            ),
            "template": {
                "metadata": {"labels": labels},
                "spec": {
                    **spread,
                    "serviceAccountName": account,
                    "securityContext": pod_security,
                    "containers": [
                        {
                            "name": component,
                            "image": image,
                            # the serving flags are the runtime's own, before the component's command
                            "args": [*SERVING_ARGS, *args],
                            **({"env": env} if env else {}),
                            "ports": [
                                {"name": "probes", "containerPort": PROBE_CONTAINER_PORT},
                                {"name": "metrics", "containerPort": METRICS_CONTAINER_PORT},
                            ],
                            "livenessProbe": probe("/healthz"),
                            "readinessProbe": probe("/readyz"),
                            "securityContext": container_security,
                            "resources": {"requests": {"cpu": "100m", "memory": "128Mi"}},
                            # the root is read-only; Python and libraries may still want a scratch dir
                            "volumeMounts": [{"name": "tmp", "mountPath": "/tmp"}],
                        }
                    ],
                    "volumes": [{"name": "tmp", "emptyDir": {"sizeLimit": "64Mi"}}],
                },
            },
        },
    }


def metrics_reader_role(component: str) -> Manifest:
    """Bind it to whoever scrapes the runtime (e.g. Prometheus' ServiceAccount)."""
    return {
        "apiVersion": "rbac.authorization.k8s.io/v1",
        "kind": "ClusterRole",
        "metadata": {"name": names.METRICS_READER_ROLE, "labels": _labels(component)},
        "rules": [{"nonResourceURLs": ["/metrics"], "verbs": ["get"]}],
    }


def pod_disruption_budget(name: str, ns: str, component: str) -> Manifest:
    """One replica of a component stays up through voluntary disruptions (drains): the stand-by
    takes over from a leader being evicted."""
    return {
        "apiVersion": "policy/v1",
        "kind": "PodDisruptionBudget",
        "metadata": {"name": name, "namespace": ns, "labels": _labels(component)},
        "spec": {"minAvailable": 1, "selector": {"matchLabels": {"app.kubernetes.io/name": name}}},
    }


def secret(name: str, ns: str, string_data: dict[str, Any], component: str) -> Manifest:
    return {
        "apiVersion": "v1",
        "kind": "Secret",
        "type": "Opaque",
        "metadata": {"name": name, "namespace": ns, "labels": _labels(component)},
        "stringData": string_data,
    }


def virtual_node(
    spec: VirtualNodeSpec,
    name: str | None = None,
    *,
    move_unfit_pods_after: int | None = None,
    shard: str | None = None,
    abandon_unreachable_after: int | None = None,
) -> Manifest:
    """`name`: a node pool's (default: the cluster's one virtual node); `move_unfit_pods_after`: the
    stack-wide policy for pods no foreign node fits, which the runtime reads off the VirtualNodes;
    `shard`: the shard of virtual-kubelet processes that serves it (cluster mode);
    `abandon_unreachable_after`: seconds after which its removal gives up on an unreachable cluster."""
    vn = VirtualNode(spec=spec)
    vn.metadata.name = name or names.virtual_node_name(spec.cluster_id)
    vn.metadata.namespace = names.LIQO_NAMESPACE
    vn.metadata.labels = {**_labels("virtual-node"), names.REMOTE_CLUSTER_ID_LABEL: spec.cluster_id}
    if shard is not None:
        vn.metadata.labels[names.VIRTUAL_KUBELET_SHARD_LABEL] = shard
    annotations = {}
    if move_unfit_pods_after is not None:
        annotations[names.MOVE_UNFIT_PODS_AFTER_ANNOTATION] = str(move_unfit_pods_after)
    if abandon_unreachable_after is not None:
        annotations[names.ABANDON_UNREACHABLE_AFTER_ANNOTATION] = str(abandon_unreachable_after)
    if annotations:
        vn.metadata.annotations = annotations
    wire = vn.to_apply()
    wire["spec"]["labels"] = virtual_node_labels(spec.cluster_id, spec.labels)
    return wire


def namespace_offloading(ns: str, spec: NamespaceOffloadingSpec, declared_by: str | None = None) -> Manifest:
    """`declared_by`: the stack that declares it (`<organization>/<project>/<stack>`)."""
    obj = NamespaceOffloading(spec=spec)
    obj.metadata.name = names.NAMESPACE_OFFLOADING_NAME
    obj.metadata.namespace = ns
    obj.metadata.labels = _labels("namespace-offloading")
    if declared_by is not None:
        obj.metadata.annotations = {names.DECLARED_BY_ANNOTATION: declared_by}
    return obj.to_apply()


def namespace_offloading_selector(
    name: str, spec: NamespaceOffloadingSelectorSpec, declared_by: str | None = None
) -> Manifest:
    obj = NamespaceOffloadingSelector(spec=spec)
    obj.metadata.name = name
    obj.metadata.labels = _labels("namespace-offloading-selector")
    if declared_by is not None:
        obj.metadata.annotations = {names.DECLARED_BY_ANNOTATION: declared_by}
    return obj.to_apply()


# -- Admission webhooks (served by the controller-manager, which also fills in their caBundle) ---
WEBHOOK_CONTAINER_PORT = 9443


def webhook_client(path: str, *, url_port: int | None) -> Manifest:
    """A loopback URL in external mode (`url_port` given), else the controller-manager's Service."""
    if url_port is not None:
        return {"url": f"https://127.0.0.1:{url_port}{path}"}
    service = {"name": names.WEBHOOK_SERVICE, "namespace": names.LIQO_NAMESPACE, "port": 443, "path": path}
    return {"service": service}


def pod_mutating_webhook(url_port: int | None) -> Manifest:
    """Pods of namespaces labelled liqo.io/scheduling-enabled=true: rejected until the offloading is
    ready, then constrained per strategy (docs/offloading.md). Fail closed: without the webhook a pod would
    ignore its namespace's strategy."""
    return {
        "apiVersion": "admissionregistration.k8s.io/v1",
        "kind": "MutatingWebhookConfiguration",
        "metadata": {"name": names.POD_MUTATING_WEBHOOK_CONFIGURATION, "labels": _labels("webhooks")},
        "webhooks": [
            {
                "name": names.POD_MUTATING_WEBHOOK,
                "admissionReviewVersions": ["v1"],
                "sideEffects": "None",
                "failurePolicy": "Fail",
                "timeoutSeconds": 10,
                "reinvocationPolicy": "Never",
                "namespaceSelector": {"matchLabels": {names.SCHEDULING_ENABLED_LABEL: "true"}},
                "rules": [
                    {
                        "apiGroups": [""],
                        "apiVersions": ["v1"],
                        "operations": ["CREATE"],
                        "resources": ["pods"],
                        "scope": "Namespaced",
                    }
                ],
                "clientConfig": webhook_client(names.POD_MUTATION_PATH, url_port=url_port),
            }
        ],
    }


def offloading_validating_webhook(url_port: int | None) -> Manifest:
    """NamespaceOffloading rules (docs/offloading.md). Fail open: `pulumi up` may create offloadings before the
    controller-manager runs, and the controller only ever acts on the twin it recorded."""
    return {
        "apiVersion": "admissionregistration.k8s.io/v1",
        "kind": "ValidatingWebhookConfiguration",
        "metadata": {"name": names.OFFLOADING_VALIDATING_WEBHOOK_CONFIGURATION, "labels": _labels("webhooks")},
        "webhooks": [
            {
                "name": names.OFFLOADING_VALIDATING_WEBHOOK,
                "admissionReviewVersions": ["v1"],
                "sideEffects": "None",
                "failurePolicy": "Ignore",
                "timeoutSeconds": 10,
                "rules": [
                    {
                        "apiGroups": [names.GROUP],
                        "apiVersions": [names.VERSION],
                        "operations": ["CREATE", "UPDATE"],
                        "resources": ["namespaceoffloadings"],
                        "scope": "Namespaced",
                    }
                ],
                "clientConfig": webhook_client(names.OFFLOADING_VALIDATION_PATH, url_port=url_port),
            }
        ],
    }


def webhook_service(selector_name: str) -> Manifest:
    return {
        "apiVersion": "v1",
        "kind": "Service",
        "metadata": {"name": names.WEBHOOK_SERVICE, "namespace": names.LIQO_NAMESPACE, "labels": _labels("webhooks")},
        "spec": {
            "selector": {"app.kubernetes.io/name": selector_name},
            "ports": [{"name": "https", "port": 443, "targetPort": WEBHOOK_CONTAINER_PORT}],
        },
    }


# -- RBAC rules: the least each identity needs ------------------------------------------------
_GROUP = names.GROUP

# Cluster mode: who scrapes /metrics, and may they (TokenReview, SubjectAccessReview)
_METRICS_REVIEWS: list[Manifest] = [
    {"apiGroups": ["authentication.k8s.io"], "resources": ["tokenreviews"], "verbs": ["create"]},
    {"apiGroups": ["authorization.k8s.io"], "resources": ["subjectaccessreviews"], "verbs": ["create"]},
]

CONTROLLER_MANAGER_RULES: list[Manifest] = [
    {
        "apiGroups": [_GROUP],
        "resources": ["namespaceoffloadings", "virtualnodes", "namespaceoffloadingselectors"],
        "verbs": ["get", "list", "watch", "update", "patch"],
    },
    # the offloadings of the namespaces a NamespaceOffloadingSelector matches
    {"apiGroups": [_GROUP], "resources": ["namespaceoffloadings"], "verbs": ["create", "delete"]},
    {
        "apiGroups": [_GROUP],
        "resources": ["namespaceoffloadings/status", "virtualnodes/status", "namespaceoffloadingselectors/status"],
        "verbs": ["get", "update", "patch"],
    },
    {"apiGroups": [""], "resources": ["namespaces"], "verbs": ["get", "list", "watch", "update", "patch"]},
    {"apiGroups": [""], "resources": ["nodes"], "verbs": ["get", "list", "watch"]},
    {"apiGroups": [""], "resources": ["secrets"], "verbs": ["get", "list", "watch"]},
    # on-demand offloading: pods that ask for a virtual node (given its toleration once offloaded), and
    # the claims reflected in foreign clusters, which keep an offloading in use
    {"apiGroups": [""], "resources": ["pods"], "verbs": ["get", "list", "watch", "patch"]},
    {"apiGroups": [""], "resources": ["persistentvolumeclaims"], "verbs": ["get", "list", "watch"]},
    {"apiGroups": [""], "resources": ["events"], "verbs": ["create", "patch"]},
    {"apiGroups": ["coordination.k8s.io"], "resources": ["leases"], "verbs": ["get", "create", "update"]},
    *_METRICS_REVIEWS,
    {
        "apiGroups": ["admissionregistration.k8s.io"],
        "resources": ["mutatingwebhookconfigurations", "validatingwebhookconfigurations"],
        "verbs": ["get", "list", "watch", "patch"],
    },
]

# Bound in the liqo namespace only. Secrets cannot be limited by name on create; a namespace limits it.
CONTROLLER_MANAGER_NAMESPACE_RULES: list[Manifest] = [
    {"apiGroups": [""], "resources": ["secrets"], "verbs": ["create"]},
]

VIRTUAL_KUBELET_RULES: list[Manifest] = [
    {
        "apiGroups": [""],
        "resources": ["nodes", "nodes/status"],
        "verbs": ["get", "list", "watch", "create", "update", "patch"],
    },
    {"apiGroups": [""], "resources": ["pods"], "verbs": ["get", "list", "watch", "update", "patch", "delete"]},
    {"apiGroups": [""], "resources": ["pods/status"], "verbs": ["get", "update", "patch"]},
    {
        "apiGroups": [""],
        "resources": ["configmaps", "secrets", "services", "serviceaccounts", "persistentvolumeclaims", "events"],
        "verbs": ["get", "list", "watch"],
    },
    {"apiGroups": ["discovery.k8s.io"], "resources": ["endpointslices"], "verbs": ["get", "list", "watch"]},
    {"apiGroups": ["networking.k8s.io"], "resources": ["ingresses"], "verbs": ["get", "list", "watch"]},
    {"apiGroups": [""], "resources": ["events"], "verbs": ["create", "patch"]},
    # docs/reflection.md: tokens of offloaded pods' ServiceAccounts, bound to the home pod (apiServerTokenSupport)
    {"apiGroups": [""], "resources": ["serviceaccounts/token"], "verbs": ["create"]},
    # the home PVs standing for the claims it provisions in the foreign cluster (runtime/reflection/storage.py)
    {
        "apiGroups": [""],
        "resources": ["persistentvolumes"],
        "verbs": ["get", "list", "watch", "create", "patch", "delete"],
    },
    {"apiGroups": [_GROUP], "resources": ["virtualnodes", "namespaceoffloadings"], "verbs": ["get", "list", "watch"]},
    {
        "apiGroups": ["coordination.k8s.io"],
        "resources": ["leases"],
        "verbs": ["get", "list", "watch", "create", "update", "patch"],
    },
    # the kubelet API: who calls (bearer tokens) and may they (nodes/proxy, nodes/log, ...)
    {"apiGroups": ["authentication.k8s.io"], "resources": ["tokenreviews"], "verbs": ["create"]},
    {"apiGroups": ["authorization.k8s.io"], "resources": ["subjectaccessreviews"], "verbs": ["create"]},
    # its serving certificate: asked of the kubelet-serving signer and approved by itself, as no
    # controller approves serving certificates (runtime/virtualkubelet/servingcert.py)
    {"apiGroups": ["certificates.k8s.io"], "resources": ["certificatesigningrequests"], "verbs": ["create", "get"]},
    {"apiGroups": ["certificates.k8s.io"], "resources": ["certificatesigningrequests/approval"], "verbs": ["update"]},
    {
        "apiGroups": ["certificates.k8s.io"],
        "resources": ["signers"],
        "verbs": ["approve"],
        "resourceNames": ["kubernetes.io/kubelet-serving"],
    },
]


def virtual_kubelet_rules(
    foreign_cluster_id: str, pools: Sequence[str] = (), custom_resources: Sequence[CustomResourceReflection] = ()
) -> list[Manifest]:
    """VIRTUAL_KUBELET_RULES, and what one virtual kubelet may do to its own Nodes and VirtualNodes only:
    at the peering's removal it holds the VirtualNode with its finalizer until its Node is drained
    and deleted (runtime/virtualkubelet/removal.py); its status carries the custom resources'
    condition. Its own: the cluster's virtual node, and those of its node pools (`pools`); the first
    stays while pools replace it, so its removal can end. The opted-in custom resources: read, their
    status written where it comes back, and their CRDs read by name (runtime/reflection/custom.py)."""
    own = [
        names.virtual_node_name(foreign_cluster_id),
        *(names.virtual_node_name(foreign_cluster_id, p) for p in pools),
    ]
    with_status = [c for c in custom_resources if c.reflect_status]
    return [
        *VIRTUAL_KUBELET_RULES,
        {"apiGroups": [""], "resources": ["nodes"], "verbs": ["delete"], "resourceNames": own},
        {"apiGroups": [_GROUP], "resources": ["virtualnodes"], "verbs": ["patch", "update"], "resourceNames": own},
        {"apiGroups": [_GROUP], "resources": ["virtualnodes/status"], "verbs": ["patch"], "resourceNames": own},
        *custom_resource_rules(custom_resources, ["get", "list", "watch"]),
        *custom_resource_rules(with_status, ["patch"], subresource="/status"),
        *custom_resource_definition_rules(custom_resources),
    ]


def custom_resource_rules(
    custom_resources: Sequence[CustomResourceReflection], verbs: list[str], *, subresource: str = ""
) -> list[Manifest]:
    """One rule per API group: exactly the opted-in resources of it (never `*`)."""
    by_group: dict[str, list[str]] = {}
    for custom in custom_resources:
        by_group.setdefault(custom.group, []).append(custom.resource + subresource)
    return [
        {"apiGroups": [group], "resources": sorted(resources), "verbs": list(verbs)}
        for group, resources in sorted(by_group.items())
    ]


CRD_GROUP = "apiextensions.k8s.io"


def custom_resource_definition_rules(custom_resources: Sequence[CustomResourceReflection]) -> list[Manifest]:
    """Reading the opted-in types' CRDs by name (a list or watch with a metadata.name field selector is
    authorized by resourceNames): how reflection learns that a type exists there."""
    if not custom_resources:
        return []
    return [
        {
            "apiGroups": [CRD_GROUP],
            "resources": ["customresourcedefinitions"],
            "verbs": ["get", "list", "watch"],
            "resourceNames": sorted(c.crd_name for c in custom_resources),
        }
    ]


# In the foreign cluster, inside its tenant namespace only: what the home cluster may ask for.
HOME_IDENTITY_TENANT_RULES: list[Manifest] = [
    {
        "apiGroups": [_GROUP],
        "resources": ["namespacemaps"],
        "verbs": ["get", "list", "watch", "create", "update", "patch", "delete"],
    },
    {"apiGroups": [_GROUP], "resources": ["resourceadvertisements"], "verbs": ["get", "list", "watch"]},
]

FOREIGN_AGENT_RULES: list[Manifest] = [
    {
        "apiGroups": [_GROUP],
        "resources": ["namespacemaps", "shadowpods", "resourceadvertisements"],
        "verbs": ["get", "list", "watch", "create", "update", "patch", "delete"],
    },
    # the ShadowPods and pods of a twin it deletes, at once (runtime/controllers/namespacemap.py)
    {"apiGroups": [_GROUP], "resources": ["shadowpods"], "verbs": ["deletecollection"]},
    {"apiGroups": [""], "resources": ["pods"], "verbs": ["deletecollection"]},
    # the grant of each home (runtime/controllers/granting.py): read, never written by the agent
    {"apiGroups": [_GROUP], "resources": ["quotas"], "verbs": ["get", "list", "watch"]},
    # the ResourceQuota of objects it keeps in each twin (runtime/controllers/namespacemap.py)
    {"apiGroups": [""], "resources": ["resourcequotas"], "verbs": ["get", "create", "update", "patch"]},
    {
        "apiGroups": [_GROUP],
        "resources": ["namespacemaps/status", "shadowpods/status"],
        "verbs": ["get", "update", "patch"],
    },
    {
        "apiGroups": [""],
        "resources": ["namespaces"],
        "verbs": ["get", "list", "watch", "create", "update", "patch", "delete"],
    },
    {
        "apiGroups": [""],
        "resources": ["pods"],
        "verbs": ["get", "list", "watch", "create", "update", "patch", "delete"],
    },
    # an in-place resize of the home pod reaches the remote one through this subresource
    {"apiGroups": [""], "resources": ["pods/resize"], "verbs": ["patch"]},
    {"apiGroups": [""], "resources": ["nodes"], "verbs": ["get", "list", "watch"]},
    {
        "apiGroups": ["rbac.authorization.k8s.io"],
        "resources": ["rolebindings"],
        "verbs": ["get", "list", "watch", "create", "update", "patch", "delete"],
    },
    # it grants the home identity rights in twin namespaces, so it must hold them (escalation check)
    {
        "apiGroups": ["rbac.authorization.k8s.io"],
        "resources": ["clusterroles"],
        "verbs": ["bind"],
        "resourceNames": ["liqo-home-in-twin-namespace"],
    },
    {"apiGroups": [""], "resources": ["events"], "verbs": ["create", "patch"]},
    {"apiGroups": ["coordination.k8s.io"], "resources": ["leases"], "verbs": ["get", "create", "update"]},
    *_METRICS_REVIEWS,
]

# Bound by the foreign agent in each twin namespace it creates for a home cluster.
HOME_IN_TWIN_NAMESPACE_ROLE = "liqo-home-in-twin-namespace"
REFLECTION_VERBS = ["get", "list", "watch", "create", "update", "patch", "delete"]
HOME_IN_TWIN_NAMESPACE_RULES: list[Manifest] = [
    {
        "apiGroups": [_GROUP],
        "resources": ["shadowpods"],
        "verbs": ["get", "list", "watch", "create", "update", "patch", "delete"],
    },
    # pods: read for status back; delete to pass the home pod's grace period on
    {"apiGroups": [""], "resources": ["pods"], "verbs": ["get", "list", "watch", "delete"]},
    # the kubelet API of the virtual node relays kubectl logs, exec, attach and port-forward here
    {"apiGroups": [""], "resources": ["pods/log"], "verbs": ["get", "list", "watch"]},
    {"apiGroups": [""], "resources": ["pods/exec", "pods/attach", "pods/portforward"], "verbs": ["create", "get"]},
    # and serves the pods' resource metrics (kubectl top) from the foreign cluster's metrics API
    {"apiGroups": ["metrics.k8s.io"], "resources": ["pods"], "verbs": ["get", "list"]},
    {
        "apiGroups": [""],
        "resources": ["configmaps", "secrets", "services", "serviceaccounts", "persistentvolumeclaims", "events"],
        "verbs": ["get", "list", "watch", "create", "update", "patch", "delete"],
    },
    {
        "apiGroups": ["discovery.k8s.io"],
        "resources": ["endpointslices"],
        "verbs": ["get", "list", "watch", "create", "update", "patch", "delete"],
    },
    {
        "apiGroups": ["networking.k8s.io"],
        "resources": ["ingresses"],
        "verbs": ["get", "list", "watch", "create", "update", "patch", "delete"],
    },
]


def home_in_twin_namespace_rules(custom_resources: Sequence[CustomResourceReflection] = ()) -> list[Manifest]:
    """HOME_IN_TWIN_NAMESPACE_RULES and the opted-in custom resources, which the home identity reflects."""
    return [*HOME_IN_TWIN_NAMESPACE_RULES, *custom_resource_rules(custom_resources, REFLECTION_VERBS)]


# -- Foreign guards (docs/security.md): what a foreign cluster holds each home identity to ----------
def _username_of(home: str = "variables.origin") -> str:
    """CEL: the user a home identity is, from the CEL expression `home` of its home cluster id
    (names.home_identity_username, with `home` in place of the id)."""
    parts = names.home_identity_username("\x00").split("\x00")
    return f" + {home} + ".join(f"'{part}'" if part else "''" for part in parts).removesuffix(" + ''")


HOME_IDENTITY_PREFIX = names.home_identity_username("\x00").split("\x00")[0]


def _labelled(obj: str, label: str) -> str:
    """CEL: `obj`'s label `label`, or '' when it has none."""
    return f"has({obj}.metadata.labels) && '{label}' in {obj}.metadata.labels ? {obj}.metadata.labels['{label}'] : ''"


def _annotated(obj: str, annotation: str) -> str:
    """CEL: `obj`'s annotation `annotation`, or '' when it has none."""
    return (
        f"has({obj}.metadata.annotations) && '{annotation}' in {obj}.metadata.annotations ? "
        f"{obj}.metadata.annotations['{annotation}'] : ''"
    )


def _any_container(pod: str, condition: str) -> str:
    return " || ".join(
        f"(has({pod}.{kind}) && {pod}.{kind}.exists(c, {condition}))" for kind in ("containers", "initContainers")
    )


def shadowpod_policy() -> Manifest:
    """The ValidatingAdmissionPolicy of a foreign cluster on every ShadowPod a home identity writes:
    the foreign API server itself checks it, whatever the home side did (docs/security.md)."""
    pod = "object.spec.pod"
    privileged = _any_container(
        pod, "has(c.securityContext) && has(c.securityContext.privileged) && c.securityContext.privileged == true"
    )
    host_path = f"has({pod}.volumes) && {pod}.volumes.exists(v, has(v.hostPath))"
    host_namespaces = " || ".join(
        f"(has({pod}.{field}) && {pod}.{field} == true)" for field in ("hostNetwork", "hostPID", "hostIPC")
    )
    chosen_here = " || ".join(f"has({pod}.{field})" for field in FIELDS_THE_FOREIGN_CLUSTER_DECIDES)
    return {
        "apiVersion": "admissionregistration.k8s.io/v1",
        "kind": "ValidatingAdmissionPolicy",
        "metadata": {"name": names.SHADOWPOD_POLICY, "labels": _labels("foreign-guards")},
        "spec": {
            "failurePolicy": "Fail",
            "matchConstraints": {
                "resourceRules": [
                    {
                        "apiGroups": [_GROUP],
                        "apiVersions": ["*"],
                        "operations": ["CREATE", "UPDATE"],
                        "resources": ["shadowpods"],
                    }
                ]
            },
            # the home identities only: the foreign cluster's own admins and its agent are not held
            "matchConditions": [
                {
                    "name": "home-identities",
                    "expression": f"request.userInfo.username.startsWith('{HOME_IDENTITY_PREFIX}')",
                }
            ],
            "variables": [
                {"name": "origin", "expression": _labelled("namespaceObject", names.ORIGIN_LABEL)},
                {
                    "name": "floor",
                    "expression": f"({_labelled('namespaceObject', names.POD_SECURITY_ENFORCE_LABEL)}) == '' ? "
                    f"'{names.DEFAULT_POD_SECURITY_FLOOR}' : "
                    f"namespaceObject.metadata.labels['{names.POD_SECURITY_ENFORCE_LABEL}']",
                },
            ],
            "validations": [
                {
                    "expression": f"variables.origin != '' && request.userInfo.username == {_username_of()}",
                    "messageExpression": "'namespace ' + namespaceObject.metadata.name + ' is not a twin namespace "
                    "of the home cluster ' + request.userInfo.username + ' stands for'",
                    "reason": "Forbidden",
                },
                {
                    "expression": f"({_labelled('object', names.ORIGIN_LABEL)}) == variables.origin",
                    "messageExpression": f"'metadata.labels[{names.ORIGIN_LABEL}] must be ' + variables.origin + "
                    "', the origin of namespace ' + namespaceObject.metadata.name",
                    "reason": "Forbidden",
                },
                {
                    "expression": f"!({host_namespaces})",
                    "message": "spec.pod.hostNetwork, hostPID and hostIPC are refused for offloaded pods: "
                    "the foreign cluster's host namespaces are not shared",
                    "reason": "Forbidden",
                },
                {
                    "expression": f"!({chosen_here})",
                    "message": "spec.pod."
                    + ", ".join(FIELDS_THE_FOREIGN_CLUSTER_DECIDES)
                    + " are the foreign cluster's to decide: an offloaded pod sets none of them",
                    "reason": "Forbidden",
                },
                {
                    "expression": f"variables.floor == 'privileged' || !({privileged})",
                    "messageExpression": "'privileged containers (securityContext.privileged) are refused in ' + "
                    "namespaceObject.metadata.name + ': its pod-security floor is ' + variables.floor",
                    "reason": "Forbidden",
                },
                {
                    "expression": f"variables.floor == 'privileged' || !({host_path})",
                    "messageExpression": "'hostPath volumes (spec.pod.volumes[].hostPath) are refused in ' + "
                    "namespaceObject.metadata.name + ': its pod-security floor is ' + variables.floor",
                    "reason": "Forbidden",
                },
            ],
        },
    }


def _text(obj: str, field: str, default: str = "") -> str:
    """CEL: `obj.field`, or `default` when it has none (a ShadowPod's pod is untyped, a Quota's optional)."""
    return f"(has({obj}.{field}) ? {obj}.{field} : '{default}')"


def _covers(allowed: str, toleration: str) -> str:
    """CEL of runtime.api.nodeaccess.covers: `allowed` tolerates every taint `toleration` does."""
    a_key, t_key = _text(allowed, "key"), _text(toleration, "key")
    a_op, t_op = _text(allowed, "operator", "Equal"), _text(toleration, "operator", "Equal")
    a_effect, t_effect = _text(allowed, "effect"), _text(toleration, "effect")
    return (
        f"({a_key} == {t_key} || ({a_key} == '' && {a_op} == 'Exists'))"
        f" && ({a_effect} == '' || {a_effect} == {t_effect})"
        f" && ({a_effect} != 'NoExecute' || !has({allowed}.tolerationSeconds)"
        f" || (has({toleration}.tolerationSeconds) && {toleration}.tolerationSeconds <= {allowed}.tolerationSeconds))"
        f" && ({a_op} == 'Exists' || ({t_op} != 'Exists' && {_text(toleration, 'value')} == {_text(allowed, 'value')}))"
    )


def _allowed_toleration(toleration: str) -> str:
    """CEL: the home may have `toleration` (runtime.api.nodeaccess: ALWAYS_TOLERATED, a toleration of
    every taint, which the agent narrows, or one its Quota's nodes.tolerations covers)."""
    always = ", ".join(f"'{t['key']}'" for t in ALWAYS_TOLERATED)
    key, operator = _text(toleration, "key"), _text(toleration, "operator", "Equal")
    return (
        f"{key} in [{always}] || ({key} == '' && {operator} == 'Exists')"
        f" || variables.allowed.exists(a, {_covers('a', toleration)})"
    )


def _shown_toleration(toleration: str) -> str:
    """CEL of runtime.api.nodeaccess.shown: key[=value][:effect]."""
    key, effect = _text(toleration, "key"), _text(toleration, "effect")
    value = f"({_text(toleration, 'operator', 'Equal')} == 'Exists' ? '' : '=' + {_text(toleration, 'value')})"
    return f"({key} == '' ? '*' : {key}) + {value} + ({effect} == '' ? '' : ':' + {effect})"


def shadowpod_nodes_policy() -> Manifest:
    """The ValidatingAdmissionPolicy holding each home identity's ShadowPods to the nodes its Quota lets it
    use (its `nodes`, the params of the home's own binding): no toleration of a taint it may not tolerate,
    no nodeSelector against its selector (the agent adds the selector to every pod it makes)."""
    pod = "object.spec.pod"
    nodes = "params.spec.nodes"
    selector = f"{nodes}.selector"
    return {
        "apiVersion": "admissionregistration.k8s.io/v1",
        "kind": "ValidatingAdmissionPolicy",
        "metadata": {"name": names.SHADOWPOD_NODES_POLICY, "labels": _labels("foreign-guards")},
        "spec": {
            "failurePolicy": "Fail",
            "paramKind": {"apiVersion": names.API_VERSION, "kind": "Quota"},
            "matchConstraints": {
                "resourceRules": [
                    {
                        "apiGroups": [_GROUP],
                        "apiVersions": ["*"],
                        "operations": ["CREATE", "UPDATE"],
                        "resources": ["shadowpods"],
                    }
                ]
            },
            "matchConditions": [
                {
                    "name": "home-identities",
                    "expression": f"request.userInfo.username.startsWith('{HOME_IDENTITY_PREFIX}')",
                }
            ],
            "variables": [
                {"name": "home", "expression": _labelled("namespaceObject", names.ORIGIN_LABEL)},
                {
                    "name": "allowed",
                    "expression": f"has({nodes}) && has({nodes}.tolerations) ? {nodes}.tolerations : []",
                },
                {"name": "tolerations", "expression": f"has({pod}.tolerations) ? {pod}.tolerations : []"},
                {
                    "name": "selector",
                    "expression": f"has({nodes}) && has({selector}) ? {selector} : {{}}",
                },
                {"name": "own", "expression": f"has({pod}.nodeSelector) ? {pod}.nodeSelector : {{}}"},
            ],
            "validations": [
                {
                    "expression": f"variables.tolerations.all(t, {_allowed_toleration('t')})",
                    "messageExpression": "'spec.pod.tolerations: home cluster ' + variables.home + ' may not "
                    "tolerate ' + variables.tolerations.filter(t, !("
                    + _allowed_toleration("t")
                    + ")).map(t, "
                    + _shown_toleration("t")
                    + ").join(', ') + ' here (its Quota: nodes.tolerations)'",
                    "reason": "Forbidden",
                },
                {
                    "expression": "variables.selector.all(k, !(k in variables.own) "
                    "|| string(variables.own[k]) == variables.selector[k])",
                    "messageExpression": "'spec.pod.nodeSelector: home cluster ' + variables.home + ' may use only "
                    "nodes with ' + variables.selector.map(k, k + '=' + variables.selector[k]).join(', ') + "
                    "' here (its Quota: nodes.selector)'",
                    "reason": "Forbidden",
                },
            ],
        },
    }


def shadowpod_nodes_binding(home_cluster_id: str, component: str) -> Manifest:
    """The nodes policy for one home's twins, with its Quota as params: a ShadowPod of a home without its
    Quota is refused (the stack declares both)."""
    return {
        "apiVersion": "admissionregistration.k8s.io/v1",
        "kind": "ValidatingAdmissionPolicyBinding",
        "metadata": {"name": names.shadowpod_nodes_binding(home_cluster_id), "labels": _labels(component)},
        "spec": {
            "policyName": names.SHADOWPOD_NODES_POLICY,
            "validationActions": ["Deny"],
            "paramRef": {
                "name": names.quota_name(home_cluster_id),
                "namespace": names.tenant_namespace(home_cluster_id),
                "parameterNotFoundAction": "Deny",
            },
            "matchResources": {"namespaceSelector": {"matchLabels": {names.ORIGIN_LABEL: home_cluster_id}}},
        },
    }


def policy_binding(policy: str = names.SHADOWPOD_POLICY) -> Manifest:
    return {
        "apiVersion": "admissionregistration.k8s.io/v1",
        "kind": "ValidatingAdmissionPolicyBinding",
        "metadata": {"name": policy, "labels": _labels("foreign-guards")},
        "spec": {"policyName": policy, "validationActions": ["Deny"]},
    }


def namespacemap_policy() -> Manifest:
    """The ValidatingAdmissionPolicy of a foreign cluster on every NamespaceMap a home identity writes
    (runtime/api/twinnames.py): each twin name it adds or changes is its DefaultName
    (`<namespace>-<home id>`) or one the foreign side allows that home (the twin-names annotation of its
    tenant namespace, where the map is), and never a reserved name. Entries already there pass, so a
    narrowed twinNames blocks neither the home's other requests nor its withdrawals. Refused as Invalid
    (422): the home tells it from a 403 of its RBAC. The foreign agent checks again before it creates a
    twin, with the other homes' DefaultName spaces, which the admission of one object cannot see."""
    mapping = "object.spec.desiredMapping"
    before = "oldObject.spec.desiredMapping"
    unchanged = (
        f"oldObject != null && has(oldObject.spec) && has({before}) && k in {before} && {before}[k] == {mapping}[k]"
    )
    reserved = " || ".join(f"{mapping}[k].matches('{twinnames.glob_regex(glob)}')" for glob in twinnames.RESERVED)
    allowed = (
        f"{mapping}[k] == k + '-' + variables.home || "
        f"variables.allowed.exists(p, {mapping}[k].matches('^' + p.replace('*', '{twinnames.STAR}') + '$'))"
    )
    listed = f".map(k, k + ': ' + {mapping}[k]).join(', ')"
    return {
        "apiVersion": "admissionregistration.k8s.io/v1",
        "kind": "ValidatingAdmissionPolicy",
        "metadata": {"name": names.NAMESPACEMAP_POLICY, "labels": _labels("foreign-guards")},
        "spec": {
            "failurePolicy": "Fail",
            "matchConstraints": {
                "resourceRules": [
                    {
                        "apiGroups": [_GROUP],
                        "apiVersions": ["*"],
                        "operations": ["CREATE", "UPDATE"],
                        "resources": ["namespacemaps"],
                    }
                ]
            },
            "matchConditions": [
                {
                    "name": "home-identities",
                    "expression": f"request.userInfo.username.startsWith('{HOME_IDENTITY_PREFIX}')",
                }
            ],
            "variables": [
                {"name": "home", "expression": _labelled("namespaceObject", names.TENANT_HOME_LABEL)},
                {
                    "name": "allowed",
                    "expression": f"({_annotated('namespaceObject', names.TWIN_NAMES_ANNOTATION)}).split(',')"
                    ".map(p, p.trim()).filter(p, p.matches('^[-a-z0-9*]{1,63}$'))",
                },
                {
                    "name": "requested",
                    "expression": f"has(object.spec) && has({mapping}) ? {mapping}.filter(k, !({unchanged})) : []",
                },
                {"name": "reserved", "expression": f"variables.requested.filter(k, {reserved})"},
                {"name": "unallowed", "expression": f"variables.requested.filter(k, !({reserved}) && !({allowed}))"},
            ],
            "validations": [
                {
                    "expression": "variables.home != '' && request.userInfo.username == "
                    + _username_of("variables.home"),
                    "messageExpression": "'namespace ' + namespaceObject.metadata.name + ' is not the tenant "
                    "namespace of the home cluster ' + request.userInfo.username + ' stands for'",
                    "reason": "Forbidden",
                },
                {
                    "expression": "size(variables.reserved) == 0",
                    "messageExpression": "'twin namespace names reserved in every cluster ("
                    + ", ".join(twinnames.RESERVED)
                    + f") are refused: ' + variables.reserved{listed}",
                    "reason": "Invalid",
                },
                {
                    "expression": "size(variables.unallowed) == 0",
                    "messageExpression": "'twin namespace names not allowed for home cluster ' + variables.home + "
                    f"': ' + variables.unallowed{listed} + ' (a home gets <namespace>-' + variables.home + "
                    "', and other names only where this cluster allows them: its twinNames are ' + "
                    "(size(variables.allowed) == 0 ? 'none' : variables.allowed.join(', ')) + ')'",
                    "reason": "Invalid",
                },
            ],
        },
    }


def quota(home_cluster_id: str, spec: QuotaSpec, component: str) -> Manifest:
    """The grant of one home cluster, in its tenant namespace (runtime/controllers/granting.py)."""
    obj = Quota(spec=spec.model_copy(update={"user": names.home_identity_username(home_cluster_id)}))
    obj.metadata.name = names.quota_name(home_cluster_id)
    obj.metadata.namespace = names.tenant_namespace(home_cluster_id)
    obj.metadata.labels = _labels(component)
    return obj.to_apply()
