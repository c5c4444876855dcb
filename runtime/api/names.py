"""Every API group, label, annotation, taint, finalizer and fixed object name, once.

Names follow the seeds' system (Liqo), so manifests written for it keep working.
"""

from __future__ import annotations

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

# Reflected objects carry both; a reflector never touches an object that lacks them.
ORIGIN_LABEL: Final = "offloading.liqo.io/origin"
DESTINATION_LABEL: Final = "offloading.liqo.io/destination"

# endpointslice.kubernetes.io/managed-by of reflected EndpointSlices: not the foreign controller's
REFLECTED_ENDPOINT_SLICE_MANAGER: Final = "reflection.liqo.io"

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

# -- Taints, RuntimeClass -------------------------------------------------------------------
VIRTUAL_NODE_TAINT_KEY: Final = "virtual-node.liqo.io/not-allowed"
VIRTUAL_NODE_TAINT_VALUE: Final = "true"
VIRTUAL_NODE_TAINT_EFFECT: Final = "NoExecute"
RUNTIME_CLASS_NAME: Final = "liqo"
RUNTIME_CLASS_HANDLER: Final = "liqo"

# -- Finalizers -----------------------------------------------------------------------------
NAMESPACE_OFFLOADING_FINALIZER: Final = "namespaceoffloading.offloading.liqo.io/finalizer"
VIRTUAL_NODE_FINALIZER: Final = "virtualnode.offloading.liqo.io/finalizer"
SHADOW_POD_FINALIZER: Final = "shadowpod.offloading.liqo.io/finalizer"

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


def tenant_namespace(home_cluster_id: str) -> str:
    """The namespace a foreign cluster dedicates to one home cluster."""
    return f"liqo-tenant-{home_cluster_id}"


def home_identity_name(home_cluster_id: str) -> str:
    """The ServiceAccount (and its roles) the home cluster acts as in a foreign cluster."""
    return f"liqo-home-{home_cluster_id}"


def namespace_map_name(home_cluster_id: str) -> str:
    """One NamespaceMap per home cluster, in its tenant namespace, named after it."""
    return home_cluster_id


def virtual_node_name(foreign_cluster_id: str) -> str:
    return f"liqo-{foreign_cluster_id}"


def virtual_kubelet_name(foreign_cluster_id: str) -> str:
    return f"{VIRTUAL_KUBELET_PREFIX}-{foreign_cluster_id}"


def credentials_secret_name(foreign_cluster_id: str) -> str:
    """Home-side Secret holding the kubeconfig of the home identity in that foreign cluster."""
    return f"liqo-credentials-{foreign_cluster_id}"


# -- Object names -------------------------------------------------------------------------------
DNS_LABEL_RULE: Final = "must be a DNS-1123 label: lower-case letters, digits and '-', at most 63 characters"
_DNS_LABEL = re.compile(r"[a-z0-9]([-a-z0-9]*[a-z0-9])?")


def is_dns_label(name: str) -> bool:
    """A valid namespace name (and cluster id)."""
    return len(name) <= 63 and _DNS_LABEL.fullmatch(name) is not None
