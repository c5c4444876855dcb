"""Every API group, label, annotation, taint, finalizer and fixed object name, once.

Names follow the seeds' system (Liqo), so manifests written for it keep working.
"""

from __future__ import annotations

import hashlib
import re
from typing import Final

# -- API ------------------------------------------------------------------------------------
GROUP: Final = "offloading.liqo.io"
VERSION: Final = "v1beta1"
API_VERSION: Final = f"{GROUP}/{VERSION}"
NAMESPACE_OFFLOADING_NAME: Final = "offloading"  # the one NamespaceOffloading of a namespace

# -- Labels ---------------------------------------------------------------------------------
TYPE_LABEL: Final = "liqo.io/type"
VIRTUAL_NODE_TYPE: Final = "virtual-node"
REMOTE_CLUSTER_ID_LABEL: Final = "liqo.io/remote-cluster-id"
SCHEDULING_ENABLED_LABEL: Final = "liqo.io/scheduling-enabled"  # namespace label, value "true"
MANAGED_BY_LABEL: Final = "app.kubernetes.io/managed-by"
MANAGED_BY: Final = "liqo-stack"
COMPONENT_LABEL: Final = "app.kubernetes.io/component"
TENANT_HOME_LABEL: Final = "liqo.io/tenant-home-cluster-id"  # on foreign-side tenant objects

# liqo-stack's own names, under a domain of its own: upstream may give any liqo.io name a meaning.
OWN_DOMAIN: Final = "liqo-stack.io"
# On a NamespaceOffloading a NamespaceOffloadingSelector made: that selector's name. Only offloadings
# carrying it are ever changed or deleted by the selector controller (one made by hand never is).
OFFLOADING_SELECTOR_LABEL: Final = f"{OWN_DOMAIN}/offloading-selector"
# On a virtual Node: the most cpu (millicores) and memory (bytes) free on any one foreign node behind
# it, times its share; integers, so a pod's required node affinity can ask `Gt` (a pod no single
# foreign node fits, issue 38 section 4).
LARGEST_POD_CPU_LABEL: Final = f"{OWN_DOMAIN}/largest-pod-cpu"
LARGEST_POD_MEMORY_LABEL: Final = f"{OWN_DOMAIN}/largest-pod-memory"
# On a namespace, value "true": offload it on demand, while its pods need a virtual node (and only then).
ON_DEMAND_LABEL: Final = f"{OWN_DOMAIN}/on-demand-offloading"
# On a NamespaceOffloading the on-demand controller made: the only offloadings it ever deletes.
OFFLOADED_ON_DEMAND_LABEL: Final = f"{OWN_DOMAIN}/offloaded-on-demand"
# On a NamespaceOffloading or NamespaceOffloadingSelector a Pulumi stack declares: `<organization>/<project>/
# <stack>`. A stack's destroy guards (liqo_stack/declaring/components/destroy_guard.py) tell its own from
# another's by it.
DECLARED_BY_ANNOTATION: Final = f"{OWN_DOMAIN}/declared-by"
# On an on-demand namespace, each overriding the stack's default: the offloading's podOffloadingStrategy,
# its cluster selector (kubectl `-l` syntax, one term) and how long it stays unused before it is removed.
ON_DEMAND_STRATEGY_ANNOTATION: Final = f"{OWN_DOMAIN}/on-demand-pod-offloading-strategy"
ON_DEMAND_CLUSTER_SELECTOR_ANNOTATION: Final = f"{OWN_DOMAIN}/on-demand-cluster-selector"
ON_DEMAND_GRACE_PERIOD_ANNOTATION: Final = f"{OWN_DOMAIN}/on-demand-grace-period"
# On a VirtualNode (cluster mode, `liqo:runtime.peeringsPerProcess`): the shard of virtual-kubelet
# processes that serves it. A process started with `--shard NAME` serves the VirtualNodes labelled NAME,
# so a peering added to or removed from a shard starts or ends inside the running process.
VIRTUAL_KUBELET_SHARD_LABEL: Final = f"{OWN_DOMAIN}/virtual-kubelet-shard"
# On the token Secret of a home identity, in its tenant namespace of a foreign cluster: the home's id.
# The Secret's name changes each time it is issued; revoking is `kubectl delete secret -l` this label.
HOME_IDENTITY_TOKEN_LABEL: Final = f"{OWN_DOMAIN}/home-identity-token"

# Reflected objects carry both; a reflector never touches an object that lacks them.
ORIGIN_LABEL: Final = "offloading.liqo.io/origin"
DESTINATION_LABEL: Final = "offloading.liqo.io/destination"

# endpointslice.kubernetes.io/managed-by of reflected EndpointSlices: not the foreign controller's
REFLECTED_ENDPOINT_SLICE_MANAGER: Final = "reflection.liqo.io"

# A foreign Secret holding a home ServiceAccount token for one offloaded pod: the token reflector's
# alone (the Secret reflector, which has no home Secret of that name, must leave it be).
SERVICE_ACCOUNT_TOKEN_LABEL: Final = "offloading.liqo.io/service-account-token"
# On a home Event copied from a foreign one: the foreign cluster it came from (the reflector's
# informer selects its own copies with it).
EVENT_REFLECTED_FROM_LABEL: Final = "offloading.liqo.io/reflected-from"

# -- Annotations ----------------------------------------------------------------------------
SKIP_REFLECTION_ANNOTATION: Final = "liqo.io/skip-reflection"
ALLOW_REFLECTION_ANNOTATION: Final = "liqo.io/allow-reflection"
ANTI_AFFINITY_PRESET_ANNOTATION: Final = "liqo.io/anti-affinity-preset"
ANTI_AFFINITY_LABELS_ANNOTATION: Final = "liqo.io/anti-affinity-labels"
FORCE_REMOTE_NODE_PORT_ANNOTATION: Final = "liqo.io/force-remote-node-port"
# On a virtual Node: the label keys and taints its virtual kubelet declared, so that what leaves the
# VirtualNode leaves the Node while labels and taints of anyone else (administrators, the node
# lifecycle controller) stay.
VIRTUAL_NODE_APPLIED_ANNOTATION: Final = "liqo.io/virtual-node-applied"
# On a reflected token Secret: the home pod it is bound to (name, UID), what was asked for, and when
# it is due for renewal, so a restarted virtual kubelet renews nothing still fresh.
# On a NamespaceOffloading: seconds after which a pod its foreign scheduler keeps Unschedulable is
# moved (deleted when a controller owns it, else failed); its replacement asks for a virtual node
# whose largest-pod labels fit it. Absent: such pods wait, as upstream's do.
MOVE_UNFIT_PODS_AFTER_ANNOTATION: Final = f"{OWN_DOMAIN}/move-unfit-pods-after"
# On a VirtualNode, whole seconds: its peering's removal abandons the twins in a foreign cluster whose
# API server has not answered for this long (runtime/virtualkubelet/removal.py); absent: it waits.
ABANDON_UNREACHABLE_AFTER_ANNOTATION: Final = f"{OWN_DOMAIN}/abandon-unreachable-after"
TOKEN_POD_ANNOTATION: Final = "offloading.liqo.io/token-pod"
TOKEN_POD_UID_ANNOTATION: Final = "offloading.liqo.io/token-pod-uid"
TOKEN_REQUEST_ANNOTATION: Final = "offloading.liqo.io/token-request"
TOKEN_REFRESH_AT_ANNOTATION: Final = "offloading.liqo.io/token-refresh-at"

# -- Conditions ------------------------------------------------------------------------------
# On a VirtualNode: whether every opted-in custom resource is reflected (False names the CRDs missing).
CUSTOM_RESOURCES_REFLECTED_CONDITION: Final = "CustomResourcesReflected"

# -- Taints, RuntimeClass -------------------------------------------------------------------
VIRTUAL_NODE_TAINT_KEY: Final = "virtual-node.liqo.io/not-allowed"
VIRTUAL_NODE_TAINT_VALUE: Final = "true"
VIRTUAL_NODE_TAINT_EFFECT: Final = "NoExecute"
RUNTIME_CLASS_NAME: Final = "liqo"
RUNTIME_CLASS_HANDLER: Final = "liqo"

# -- Storage (docs/reflection.md's storage fabric) ------------------------------------------------------
# The home StorageClass whose claims follow their first pod to a virtual node; provisioner name as Liqo's.
STORAGE_CLASS_NAME: Final = "liqo"
STORAGE_PROVISIONER: Final = "liqo.io/storage"
STORAGE_RECLAIM_POLICY: Final = "Delete"
# Set by the scheduler on a WaitForFirstConsumer claim: the node its first pod goes to.
SELECTED_NODE_ANNOTATION: Final = "volume.kubernetes.io/selected-node"
# On a provisioned PV: who deletes it once released (the PV controller leaves it to us).
PROVISIONED_BY_ANNOTATION: Final = "pv.kubernetes.io/provisioned-by"
# On a remote claim: the UID of the home claim it serves (a new claim of the same name is another volume).
HOME_CLAIM_UID_ANNOTATION: Final = "offloading.liqo.io/home-claim-uid"
HOSTNAME_LABEL: Final = "kubernetes.io/hostname"

# -- Finalizers -----------------------------------------------------------------------------
NAMESPACE_OFFLOADING_FINALIZER: Final = "namespaceoffloading.offloading.liqo.io/finalizer"
VIRTUAL_NODE_FINALIZER: Final = "virtualnode.offloading.liqo.io/finalizer"
SHADOW_POD_FINALIZER: Final = "shadowpod.offloading.liqo.io/finalizer"
# Held until every NamespaceOffloading the selector made is gone (`pulumi destroy`, unoffload wait on it)
OFFLOADING_SELECTOR_FINALIZER: Final = f"{OWN_DOMAIN}/offloading-selector"

# -- Fixed namespaces and objects -----------------------------------------------------------
LIQO_NAMESPACE: Final = "liqo"
CONTROLLER_MANAGER: Final = "liqo-controller-manager"
FOREIGN_AGENT: Final = "liqo-foreign-agent"
VIRTUAL_KUBELET_PREFIX: Final = "liqo-virtual-kubelet"
# Admission: the configurations (whose caBundle the controller-manager keeps) and their webhooks
POD_MUTATING_WEBHOOK_CONFIGURATION: Final = "liqo-pod-mutation"
OFFLOADING_VALIDATING_WEBHOOK_CONFIGURATION: Final = "liqo-namespaceoffloading-validation"
POD_MUTATING_WEBHOOK: Final = "pod.mutate.offloading.liqo.io"
OFFLOADING_VALIDATING_WEBHOOK: Final = "namespaceoffloading.validate.offloading.liqo.io"
POD_MUTATION_PATH: Final = "/mutate/pod"
OFFLOADING_VALIDATION_PATH: Final = "/validate/namespaceoffloading"
WEBHOOK_SERVICE: Final = "liqo-webhooks"  # cluster mode: the Service in front of the controller-manager
METRICS_READER_ROLE: Final = "liqo-metrics-reader"  # ClusterRole: who may scrape the secure /metrics

# -- Cluster mode: the runtime image and Pod Security -----------------------------------------
# The image's unprivileged user (distroless' "nonroot"); the Deployments state it, so runAsNonRoot
# is checked by the kubelet without trusting the image config.
RUNTIME_USER_ID: Final = 65532
RUNTIME_IMAGE_NAME: Final = "liqo-stack"
POD_SECURITY_ENFORCE_LABEL: Final = "pod-security.kubernetes.io/enforce"
POD_SECURITY_LEVEL: Final = "restricted"

# -- Foreign guards (docs/security.md) ---------------------------------------------------------
# Kubernetes' Pod Security Admission labels: the foreign agent gives each twin namespace of a home
# the levels its tenant namespace carries (the floor the foreign side declares for that home).
POD_SECURITY_LABELS: Final = (
    POD_SECURITY_ENFORCE_LABEL,
    "pod-security.kubernetes.io/warn",
    "pod-security.kubernetes.io/audit",
)
POD_SECURITY_LEVELS: Final = ("privileged", "baseline", "restricted")
DEFAULT_POD_SECURITY_FLOOR: Final = "baseline"
# The ValidatingAdmissionPolicy (and its binding) a foreign cluster holds every home identity's
# ShadowPods to: origin, twin namespace, host namespaces, privileged and hostPath per the floor.
SHADOWPOD_POLICY: Final = "liqo-shadowpods.offloading.liqo.io"
# The same for every NamespaceMap a home identity writes: the twin names it asks for (runtime/api/twinnames.py).
NAMESPACEMAP_POLICY: Final = "liqo-namespacemaps.offloading.liqo.io"
# On a home's tenant namespace, written by the stack that serves it: the twin names beyond DefaultName
# the foreign side allows that home, comma-separated names or `*` patterns (liqo:foreignSide.homes[].twinNames).
TWIN_NAMES_ANNOTATION: Final = f"{OWN_DOMAIN}/twin-names"
# The one that holds them to the nodes the foreign side lets each home use (its Quota's `nodes`, the
# policy's params): one binding per home, for its twins only.
SHADOWPOD_NODES_POLICY: Final = "liqo-shadowpod-nodes.offloading.liqo.io"
# In each twin namespace: the ResourceQuota of objects and storage the foreign agent keeps there.
TWIN_OBJECTS_QUOTA: Final = "liqo-twin-objects"

WEBHOOK_CA_SECRET: Final = "liqo-webhook-ca"  # the CA the controller-manager's replicas serve from

# Leader election: each writing component's Lease (coordination.k8s.io), in the namespace it runs in
# (home: controller-manager and virtual kubelets; foreign: the agent). Not the virtual node's
# heartbeat Lease, which stays in kube-node-lease under the Node's name.
LEADER_ELECTION_NAMESPACE: Final = LIQO_NAMESPACE
CONTROLLER_MANAGER_LEASE: Final = CONTROLLER_MANAGER
FOREIGN_AGENT_LEASE: Final = FOREIGN_AGENT


def virtual_kubelet_lease(foreign_cluster_id: str) -> str:
    """One leader per foreign cluster: its virtual kubelet replicas compete for this Lease."""
    return virtual_kubelet_name(foreign_cluster_id)


def virtual_kubelet_shard_name(shard: str) -> str:
    """A shard's virtual-kubelet Deployment, its identity, and its leader Lease (runtime/virtualkubelet/
    peerings.py): one leader per shard of peerings served by one process; `all` without a shard."""
    return f"liqo-virtual-kubelets-{shard}"


def tenant_namespace(home_cluster_id: str) -> str:
    """The namespace a foreign cluster dedicates to one home cluster."""
    return f"liqo-tenant-{home_cluster_id}"


def home_identity_name(home_cluster_id: str) -> str:
    """The ServiceAccount (and its roles) the home cluster acts as in a foreign cluster."""
    return f"liqo-home-{home_cluster_id}"


def home_identity_token_prefix(home_cluster_id: str) -> str:
    """How the names of the home identity's token Secrets start; each one issued ends with a random
    suffix of its own (`liqo-home-home-token-3f9c2a7e`)."""
    return f"{home_identity_name(home_cluster_id)}-token"


def quota_name(home_cluster_id: str) -> str:
    """One Quota per home cluster, in its tenant namespace, named after it."""
    return home_cluster_id


def home_identity_username(home_cluster_id: str) -> str:
    """The user the foreign API server authenticates the home identity's token as."""
    return f"system:serviceaccount:{tenant_namespace(home_cluster_id)}:{home_identity_name(home_cluster_id)}"


def home_identity_crd_reader(home_cluster_id: str) -> str:
    """The ClusterRole (and binding) by which the home identity reads the opted-in custom resources' CRDs."""
    return f"{home_identity_name(home_cluster_id)}-crd-reader"


def shadowpod_nodes_binding(home_cluster_id: str) -> str:
    """The binding of SHADOWPOD_NODES_POLICY to one home's twins, with its Quota as params."""
    return f"liqo-shadowpod-nodes-{home_cluster_id}.offloading.liqo.io"


def namespace_map_name(home_cluster_id: str) -> str:
    """One NamespaceMap per home cluster, in its tenant namespace, named after it."""
    return home_cluster_id


def virtual_node_name(foreign_cluster_id: str, pool: str | None = None) -> str:
    """The VirtualNode and Node of a foreign cluster: `liqo-<id>`, or `liqo-<id>-<pool>` for each of
    its node pools when the stack offers it as several virtual nodes."""
    return f"liqo-{foreign_cluster_id}" if pool is None else f"liqo-{foreign_cluster_id}-{pool}"


POOL_NAME = re.compile(r"[a-z0-9]([-a-z0-9]{0,30}[a-z0-9])?")


def is_pool_name(name: str) -> bool:
    """A node pool's name: a short DNS label, as it ends its virtual node's name."""
    return POOL_NAME.fullmatch(name) is not None


def virtual_kubelet_name(foreign_cluster_id: str) -> str:
    return f"{VIRTUAL_KUBELET_PREFIX}-{foreign_cluster_id}"


def credentials_secret_name(foreign_cluster_id: str) -> str:
    """Home-side Secret holding the kubeconfig of the home identity in that foreign cluster."""
    return f"liqo-credentials-{foreign_cluster_id}"


def token_secret_name(pod_name: str) -> str:
    """The foreign Secret holding the home ServiceAccount token(s) of one offloaded pod."""
    name = f"liqo-token-{pod_name}"
    if len(name) <= 253:
        return name
    digest = hashlib.sha256(pod_name.encode()).hexdigest()[:10]
    return f"{name[: 253 - 11]}-{digest}"


def reflected_event_name(object_name: str, foreign_event_uid: str) -> str:
    """A home Event copied from a foreign one: stable per foreign event, so a restart never makes a second."""
    digest = hashlib.sha256(foreign_event_uid.encode()).hexdigest()[:16]
    return f"{object_name[: 253 - 17]}.{digest}"


# -- Object names -------------------------------------------------------------------------------
DNS_LABEL_RULE: Final = "must be a DNS-1123 label: lower-case letters, digits and '-', at most 63 characters"
_DNS_LABEL = re.compile(r"[a-z0-9]([-a-z0-9]*[a-z0-9])?")


def is_dns_label(name: str) -> bool:
    """A valid namespace name (and cluster id)."""
    return len(name) <= 63 and _DNS_LABEL.fullmatch(name) is not None
