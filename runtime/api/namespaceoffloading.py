"""NamespaceOffloading: one per offloaded namespace, named `offloading` (docs/offloading.md)."""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from enum import StrEnum
from typing import Any, ClassVar

from pydantic import Field

from runtime.api import names
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


def effective_strategy(pod: Mapping[str, Any], strategy: PodOffloadingStrategy) -> PodOffloadingStrategy:
    """Where a pod of a namespace offloaded with `strategy` may run: `runtimeClassName: liqo` means Remote."""
    if (pod.get("spec") or {}).get("runtimeClassName") == names.RUNTIME_CLASS_NAME:
        return PodOffloadingStrategy.REMOTE
    return strategy


def move_unfit_after(annotations: Mapping[str, str] | None, stack_default: int | None = None) -> int | None:
    """The seconds after which a pod no foreign node fits is moved: the NamespaceOffloading's
    annotation, else the stack's (`stack_default`); None when neither is a whole number of seconds
    (the policy is off)."""
    value = (annotations or {}).get(names.MOVE_UNFIT_PODS_AFTER_ANNOTATION, "")
    return int(value) if value.isdigit() else stack_default


def stack_move_unfit_after(virtual_nodes: Iterable[Any]) -> int | None:
    """The stack-wide setting (virtualKubelet.moveUnfitPodsAfterSeconds), which the stack writes as
    the same annotation on every VirtualNode it declares: the shortest one found, None when none has it."""
    found = [move_unfit_after(vn.metadata.annotations) for vn in virtual_nodes if not vn.metadata.deletionTimestamp]
    return min((seconds for seconds in found if seconds is not None), default=None)


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


class Placement(StrEnum):
    """Where an offloaded namespace stands in one foreign cluster."""

    READY = "ready"  # the twin namespace is Ready here
    WAITING = "waiting"  # this cluster is selected, its twin not Ready (yet, or unreachable)
    WITHDRAWN = "withdrawn"  # not offloaded here (any more)


def placement(
    status: Mapping[str, Any] | None, cluster_id: str, *, deleting: bool = False
) -> tuple[Placement, str | None]:
    """Where the offloading (its status; None: there is none) stands in `cluster_id`, and its twin's
    name while the cluster is selected.

    Withdrawn only on positive news: no NamespaceOffloading (or one being deleted), or a status that
    no longer requires this cluster. A selected cluster whose twin is not Ready (creation failed, the
    cluster unreachable) is waiting: what runs there is left alone.
    """
    if status is None or deleting:
        return Placement.WITHDRAWN, None
    ready = ready_twin(status, cluster_id)
    if ready:
        return Placement.READY, ready
    twin = status.get("remoteNamespaceName")
    conditions = {
        c.get("type"): c.get("status") for c in (status.get("remoteNamespacesConditions") or {}).get(cluster_id) or []
    }
    if conditions.get("OffloadingRequired") == "True" and twin:
        return Placement.WAITING, str(twin)
    if conditions or status.get("offloadingPhase"):
        return Placement.WITHDRAWN, None  # reported, and this cluster is not (or no longer) selected
    return Placement.WAITING, None  # no status yet


def owned_offloading(namespace: str, spec: NamespaceOffloadingSpec, owner_label: tuple[str, str]) -> dict[str, Any]:
    """The NamespaceOffloading (wire form) a controller of ours makes for `namespace`, with the label
    that marks it as that controller's to change or remove; one made without it is never touched."""
    return {
        "apiVersion": names.API_VERSION,
        "kind": "NamespaceOffloading",
        "metadata": {
            "name": names.NAMESPACE_OFFLOADING_NAME,
            "namespace": namespace,
            "labels": dict([owner_label]),
        },
        "spec": spec.to_wire(),
    }


def namespace_reference(name: str, uid: str | None) -> dict[str, Any]:
    """A Namespace as the object of an Event (events about a namespace are recorded in it)."""
    return {"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": name, "namespace": name, "uid": uid}}
