"""NamespaceOffloading: one per offloaded namespace, named `offloading` (seed 003)."""

from __future__ import annotations

from collections.abc import Mapping
from enum import StrEnum
from typing import Any, ClassVar

from pydantic import Field

from runtime.api._base import ApiModel, CrdInfo, CustomObject, PrinterColumn
from runtime.api.core import Condition, NodeSelector


class NamespaceMappingStrategy(StrEnum):
    DEFAULT_NAME = "DefaultName"  # <namespace>-<home cluster id>
    ENFORCE_SAME_NAME = "EnforceSameName"
    SELECTED_NAME = "SelectedName"  # spec.remoteNamespaceName


class PodOffloadingStrategy(StrEnum):
    LOCAL_AND_REMOTE = "LocalAndRemote"
    LOCAL = "Local"
    REMOTE = "Remote"


class OffloadingPhase(StrEnum):
    READY = "Ready"
    NO_CLUSTER_SELECTED = "NoClusterSelected"
    IN_PROGRESS = "InProgress"
    SOME_FAILED = "SomeFailed"
    ALL_FAILED = "AllFailed"
    TERMINATING = "Terminating"


class NamespaceOffloadingSpec(ApiModel):
    namespace_mapping_strategy: NamespaceMappingStrategy = NamespaceMappingStrategy.DEFAULT_NAME
    remote_namespace_name: str | None = None
    pod_offloading_strategy: PodOffloadingStrategy = PodOffloadingStrategy.LOCAL_AND_REMOTE
    cluster_selector: NodeSelector = Field(default_factory=NodeSelector)


class NamespaceOffloadingStatus(ApiModel):
    observed_generation: int | None = None
    offloading_phase: OffloadingPhase | None = None
    remote_namespace_name: str | None = None
    # per foreign cluster id: OffloadingRequired and Ready conditions of its twin namespace
    remote_namespaces_conditions: dict[str, list[Condition]] | None = None


class NamespaceOffloading(CustomObject):
    crd: ClassVar[CrdInfo] = CrdInfo(
        kind="NamespaceOffloading",
        plural="namespaceoffloadings",
        short_names=("nso", "nsoff"),
        description="Offloads the namespace it lives in to the foreign clusters its selector matches.",
        printer_columns=(
            PrinterColumn("NamespaceMappingStrategy", ".spec.namespaceMappingStrategy"),
            PrinterColumn("PodOffloadingStrategy", ".spec.podOffloadingStrategy"),
            PrinterColumn("OffloadingPhase", ".status.offloadingPhase"),
            PrinterColumn("RemoteNamespace", ".status.remoteNamespaceName", priority=1),
            PrinterColumn("Age", ".metadata.creationTimestamp", "date"),
        ),
    )

    spec: NamespaceOffloadingSpec = Field(default_factory=NamespaceOffloadingSpec)
    status: NamespaceOffloadingStatus | None = None


def ready_twin(status: Mapping[str, Any] | None, cluster_id: str) -> str | None:
    """The twin namespace of an offloading in `cluster_id`, once its status says it is Ready there."""
    status = status or {}
    conditions = (status.get("remoteNamespacesConditions") or {}).get(cluster_id) or []
    ready = any(c.get("type") == "Ready" and c.get("status") == "True" for c in conditions)
    twin = status.get("remoteNamespaceName")
    return str(twin) if ready and twin else None
