"""The kinds reflected toward foreign clusters, and what each leaves out of its copy (docs/reflection.md)."""

from __future__ import annotations

import copy
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any

from lightkube.resources.core_v1 import ConfigMap, Secret, Service
from lightkube.resources.discovery_v1 import EndpointSlice
from lightkube.resources.networking_v1 import Ingress

from runtime.api import names
from runtime.api.network import translate_address
from runtime.forging.objects import ReflectionSettings, never_reflected

# home object, foreign cluster id -> the copy's fields other than metadata
Content = Callable[[Mapping[str, Any], str], dict[str, Any]]


@dataclass(frozen=True)
class ReflectedKind:
    name: str  # the setting's key: liqo:reflection.resources.<name>, VirtualNode spec.reflection.<name>
    resource: type[Any]  # the lightkube resource
    content: Content
    reflectable: Callable[[Mapping[str, Any]], bool] = lambda obj: True  # kind-specific exclusions
    # the kind whose policy and annotations this one follows, and which of its objects: (kind, name-of)
    follows: tuple[str, Callable[[Mapping[str, Any]], str | None]] | None = None
    labels: Callable[[Mapping[str, str]], dict[str, str]] = dict  # the copy's labels from the filtered home ones
    annotations: Callable[[Mapping[str, str]], dict[str, str]] = dict  # the copy's annotations, likewise
    # foreign objects of this kind another reflector writes (never this kind's to update or delete)
    foreign_excluded: Callable[[Mapping[str, Any]], bool] = lambda obj: False
    # a foreign object as the reflector keeps it (Informer trim): what it never reads dropped
    trim_foreign: Callable[[Any], Any] | None = None
    # the content as one destination must see it (its settings say how), after `content`
    for_destination: Callable[[dict[str, Any], ReflectionSettings], dict[str, Any]] | None = None

    def content_for(
        self, obj: Mapping[str, Any], foreign_cluster_id: str, settings: ReflectionSettings
    ) -> dict[str, Any]:
        content = self.content(obj, foreign_cluster_id)
        return self.for_destination(content, settings) if self.for_destination else content


def _fields(*keys: str) -> Content:
    return lambda obj, _: {key: copy.deepcopy(obj[key]) for key in keys if obj.get(key) is not None}


CONFIGMAPS = ReflectedKind(
    "configmap",
    ConfigMap,
    _fields("data", "binaryData", "immutable"),
    reflectable=lambda obj: never_reflected("configmap", obj) is None,  # the root CA
)


def _is_pod_token(obj: Mapping[str, Any]) -> bool:
    return names.SERVICE_ACCOUNT_TOKEN_LABEL in ((obj.get("metadata") or {}).get("labels") or {})


def without_pod_token_values(secret: Any) -> Any:
    """A pod's token Secret as reflection keeps it (one per offloaded pod): its keys, not its tokens,
    which nothing here reads back."""
    if names.SERVICE_ACCOUNT_TOKEN_LABEL in (secret.metadata.labels or {}):
        secret.data = dict.fromkeys(secret.data or {}, "")
    return secret


SECRETS = ReflectedKind(
    "secret",
    Secret,
    _fields("data", "type", "immutable"),
    reflectable=lambda obj: never_reflected("secret", obj) is None,  # service-account tokens
    # the home tokens of offloaded pods (runtime/reflection/tokens.py) have no home Secret of their name
    foreign_excluded=_is_pod_token,
    trim_foreign=without_pod_token_values,
)


def service_content(service: Mapping[str, Any], _: str = "") -> dict[str, Any]:
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


def ingress_content(ingress: Mapping[str, Any], _: str = "") -> dict[str, Any]:
    """Verbatim but for the class: the foreign cluster's default applies, ours may not exist there."""
    spec = copy.deepcopy(dict(ingress.get("spec") or {}))
    spec.pop("ingressClassName", None)
    return {"spec": spec}


# The class as annotated before ingressClassName (still read by most controllers): it names a home class too.
LEGACY_INGRESS_CLASS_ANNOTATION = "kubernetes.io/ingress.class"


def ingress_annotations(annotations: Mapping[str, str]) -> dict[str, str]:
    """The class is left to the foreign cluster's default, however the home object names it."""
    return {k: v for k, v in annotations.items() if k != LEGACY_INGRESS_CLASS_ANNOTATION}


INGRESSES = ReflectedKind("ingress", Ingress, ingress_content, annotations=ingress_annotations)

SERVICE_NAME_LABEL = "kubernetes.io/service-name"
MANAGED_BY_LABEL = "endpointslice.kubernetes.io/managed-by"
# Endpoint fields that name home objects (nodes, pods) or home topology: meaningless over there.
HOME_ENDPOINT_FIELDS = ("nodeName", "targetRef", "zone", "hints", "deprecatedTopology")


def endpoint_slice_content(slice_: Mapping[str, Any], foreign_cluster_id: str) -> dict[str, Any]:
    """docs/reflection.md: each foreign cluster gets the endpoints it cannot see itself, the pods at home and in
    the *other* foreign clusters, here at the addresses the home cluster knows them by (a remote pod's
    address at home is already remapped, as its pod status is); `endpoint_slice_addresses` then moves
    them to where the destination reaches them. Its own pods, on its virtual node, are in the slices
    its own control plane makes."""
    own_node = names.virtual_node_name(foreign_cluster_id)
    endpoints = [
        {k: copy.deepcopy(v) for k, v in endpoint.items() if k not in HOME_ENDPOINT_FIELDS}
        for endpoint in slice_.get("endpoints") or []
        if endpoint.get("nodeName") != own_node
    ]
    return {
        "addressType": slice_.get("addressType"),
        "endpoints": endpoints,
        "ports": copy.deepcopy(slice_.get("ports")),
    }


def endpoint_slice_addresses(content: dict[str, Any], settings: ReflectionSettings) -> dict[str, Any]:
    """docs/reflection.md: endpoint addresses "remapped for the destination". An address the home cluster shows
    (its own pods', or a remote pod's as remapped at home) moves to the range in which this foreign
    cluster reaches that cluster's pods (the VirtualNode's endpointRemappings), so two foreign
    clusters with the same pod range each get the other's pods outside their own."""
    if not settings.address_ranges:
        return content
    for endpoint in content.get("endpoints") or []:
        endpoint["addresses"] = [translate_address(a, settings.address_ranges) for a in endpoint.get("addresses") or []]
    return content


def endpoint_slice_labels(labels: Mapping[str, str]) -> dict[str, str]:
    """The slice's Service is the reflected one of the same name; the foreign endpoint-slice
    controller must leave the copy alone (it deletes slices it thinks it manages)."""
    return {**labels, MANAGED_BY_LABEL: names.REFLECTED_ENDPOINT_SLICE_MANAGER}


ENDPOINT_SLICES = ReflectedKind(
    "endpointslice",
    EndpointSlice,
    endpoint_slice_content,
    # docs/reflection.md: a slice is reflected if its Service is, unless it carries its own allow/skip annotation
    follows=("service", lambda obj: ((obj.get("metadata") or {}).get("labels") or {}).get(SERVICE_NAME_LABEL)),
    labels=endpoint_slice_labels,
    for_destination=endpoint_slice_addresses,
    # the foreign control plane's own slices of a reflected Service inherit the Service's labels, our
    # ownership labels included: only the slices marked as reflected are this reflector's
    foreign_excluded=lambda obj: (
        ((obj.get("metadata") or {}).get("labels") or {}).get(MANAGED_BY_LABEL)
        != names.REFLECTED_ENDPOINT_SLICE_MANAGER
    ),
)

ALL_KINDS: tuple[ReflectedKind, ...] = (CONFIGMAPS, SECRETS, SERVICES, ENDPOINT_SLICES, INGRESSES)
