"""The API of liqo-stack: CRD models, names, and the pure functions both sides share."""

from runtime.api import names
from runtime.api.advertisement import ResourceAdvertisement, ResourceAdvertisementSpec
from runtime.api.core import Condition, NodeSelector, NodeSelectorRequirement, NodeSelectorTerm, Taint, Toleration
from runtime.api.crds import ALL_KINDS, all_crd_manifests, crd_manifest, foreign_crd_manifests, home_crd_manifests
from runtime.api.durations import DurationError, format_duration, parse_duration
from runtime.api.namespacemap import NamespaceMap, NamespaceMapSpec
from runtime.api.namespaceoffloading import (
    NamespaceMappingStrategy,
    NamespaceOffloading,
    NamespaceOffloadingSpec,
    NamespaceOffloadingStatus,
    OffloadingPhase,
    PodOffloadingStrategy,
)
from runtime.api.plan import SharedResources, selected_clusters, shared_resources, twin_namespace_name
from runtime.api.selectors import SelectorSyntaxError, parse_selector, selector_matches
from runtime.api.shadowpod import ShadowPod, ShadowPodSpec
from runtime.api.virtualnode import (
    CustomResourceReflection,
    ReflectionPolicy,
    ReflectorSettings,
    VirtualNode,
    VirtualNodeSpec,
)

__all__ = [
    "ALL_KINDS",
    "Condition",
    "CustomResourceReflection",
    "DurationError",
    "NamespaceMap",
    "NamespaceMapSpec",
    "NamespaceMappingStrategy",
    "NamespaceOffloading",
    "NamespaceOffloadingSpec",
    "NamespaceOffloadingStatus",
    "NodeSelector",
    "NodeSelectorRequirement",
    "NodeSelectorTerm",
    "OffloadingPhase",
    "PodOffloadingStrategy",
    "ReflectionPolicy",
    "ReflectorSettings",
    "ResourceAdvertisement",
    "ResourceAdvertisementSpec",
    "SelectorSyntaxError",
    "ShadowPod",
    "ShadowPodSpec",
    "SharedResources",
    "Taint",
    "Toleration",
    "VirtualNode",
    "VirtualNodeSpec",
    "all_crd_manifests",
    "crd_manifest",
    "foreign_crd_manifests",
    "format_duration",
    "home_crd_manifests",
    "names",
    "parse_duration",
    "parse_selector",
    "selected_clusters",
    "selector_matches",
    "shared_resources",
    "twin_namespace_name",
]
