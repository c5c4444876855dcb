"""The kinds reflected toward foreign clusters, and what each leaves out of its copy (seed 002)."""

from __future__ import annotations

import copy
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any

from lightkube.resources.core_v1 import ConfigMap, Secret, Service
from lightkube.resources.networking_v1 import Ingress

from runtime.api import names

Content = Callable[[Mapping[str, Any]], dict[str, Any]]


@dataclass(frozen=True)
class ReflectedKind:
    name: str  # the setting's key: liqo:reflection.resources.<name>, VirtualNode spec.reflection.<name>
    resource: type[Any]  # the lightkube resource
    content: Content  # home object -> the copy's fields other than metadata
    reflectable: Callable[[Mapping[str, Any]], bool] = lambda obj: True  # kind-specific exclusions


def _fields(*keys: str) -> Content:
    return lambda obj: {key: copy.deepcopy(obj[key]) for key in keys if obj.get(key) is not None}


# Every namespace gets its own `kube-root-ca.crt` from its cluster's controller-manager: never ours to copy.
ROOT_CA_CONFIGMAP = "kube-root-ca.crt"
CONFIGMAPS = ReflectedKind(
    "configmap",
    ConfigMap,
    _fields("data", "binaryData", "immutable"),
    reflectable=lambda obj: (obj.get("metadata") or {}).get("name") != ROOT_CA_CONFIGMAP,
)

# A service-account token is minted by the cluster it authenticates to; foreign clusters make their own.
SERVICE_ACCOUNT_TOKEN = "kubernetes.io/service-account-token"
SECRETS = ReflectedKind(
    "secret",
    Secret,
    _fields("data", "type", "immutable"),
    reflectable=lambda obj: obj.get("type") != SERVICE_ACCOUNT_TOKEN,
)


def service_content(service: Mapping[str, Any]) -> dict[str, Any]:
    """Verbatim but for what the foreign cluster allocates: cluster IPs, load-balancer IP and node
    ports (kept with `liqo.io/force-remote-node-port=true`). A headless Service stays headless."""
    spec = copy.deepcopy(dict(service.get("spec") or {}))
    headless = spec.get("clusterIP") == "None"
    for allocated in ("clusterIP", "clusterIPs", "loadBalancerIP", "healthCheckNodePort"):
        spec.pop(allocated, None)
    if headless:
        spec["clusterIP"] = "None"
    annotations = (service.get("metadata") or {}).get("annotations") or {}
    keep_node_ports = annotations.get(names.FORCE_REMOTE_NODE_PORT_ANNOTATION, "").lower() == "true"
    if not keep_node_ports:
        for port in spec.get("ports") or []:
            port.pop("nodePort", None)
    return {"spec": spec}


SERVICES = ReflectedKind("service", Service, service_content)


def ingress_content(ingress: Mapping[str, Any]) -> dict[str, Any]:
    """Verbatim but for the class: the foreign cluster's default applies, ours may not exist there."""
    spec = copy.deepcopy(dict(ingress.get("spec") or {}))
    spec.pop("ingressClassName", None)
    return {"spec": spec}


INGRESSES = ReflectedKind("ingress", Ingress, ingress_content)

ALL_KINDS: tuple[ReflectedKind, ...] = (CONFIGMAPS, SECRETS, SERVICES, INGRESSES)
