"""lightkube resource classes for our CRDs, made from the models in runtime.api (one source of truth)."""

from __future__ import annotations

from typing import Any

from lightkube.generic_resource import create_global_resource, create_namespaced_resource

from runtime.api import NamespaceMap, NamespaceOffloading, ResourceAdvertisement, ShadowPod, VirtualNode, names
from runtime.api.namespaceselector import NamespaceOffloadingSelector
from runtime.api.quota import Quota


def _resource(kind: type[Any]) -> Any:
    return create_namespaced_resource(names.GROUP, names.VERSION, kind.crd.kind, kind.crd.plural)


NamespaceOffloadingResource = _resource(NamespaceOffloading)
VirtualNodeResource = _resource(VirtualNode)
ShadowPodResource = _resource(ShadowPod)
NamespaceMapResource = _resource(NamespaceMap)
ResourceAdvertisementResource = _resource(ResourceAdvertisement)
QuotaResource = _resource(Quota)
NamespaceOffloadingSelectorResource = create_global_resource(
    names.GROUP, names.VERSION, NamespaceOffloadingSelector.crd.kind, NamespaceOffloadingSelector.crd.plural
)
