"""ShadowPod: on the foreign side, the wish for one pod; the foreign agent keeps that pod in place."""

from __future__ import annotations

from typing import Any, ClassVar

from pydantic import Field

from runtime.api._base import ApiModel, CrdInfo, CustomObject, PrinterColumn


class ShadowPodSpec(ApiModel):
    # A core PodSpec, already mutated for the foreign cluster (docs/reflection.md); kept verbatim. Atomic: only
    # the virtual kubelet writes it, whole, so the API server tracks one owner for it instead of one
    # per field. Its managedFields shrink by a third (949 -> 613 bytes for a small pod) and a create
    # plus status patch costs the foreign API server 4.3-4.5 ms of CPU instead of 4.7-5.1 (600 of
    # each, alternated, an ad hoc run).
    pod: dict[str, Any] = Field(
        json_schema_extra={"x-kubernetes-preserve-unknown-fields": True, "x-kubernetes-map-type": "atomic"}
    )


# Pod fields a ShadowPod never sets (runtime/forging/pods.py drops them with the home's other scheduling
# fields, and puts none back): the foreign cluster's scheduler and priorities decide them. Set, they
# would bypass its scheduler (a node of one's choosing, past its taints) or preempt its own pods; its
# admission policy refuses them (liqo_stack/declaring/manifests.py: shadowpod_policy).
FIELDS_THE_FOREIGN_CLUSTER_DECIDES = ("nodeName", "schedulerName", "priorityClassName", "priority", "preemptionPolicy")

# status.reason when the foreign API server refused to create the pod (status.message says why)
CREATE_FAILED_REASON = "CreateFailed"
# status.reason (phase Failed) when its pod was evicted while the foreign cluster cordons its home:
# it is not started again, and the home pod ends as on a drained node (docs/security.md)
EVICTED_REASON = "Evicted"


class ShadowPodStatus(ApiModel):
    phase: str | None = None
    pod_uid: str | None = Field(default=None, alias="podUID")
    recreations: int | None = Field(default=None, description="remote pods recreated since the first")
    previous_restarts: dict[str, int] | None = Field(
        default=None, description="per container: restarts of the remote pods this one replaced, recreations included"
    )
    applied_hash: str | None = Field(
        default=None, description="digest of the labels, annotations and pod spec last carried to the live pod"
    )
    applied_keys: dict[str, list[str]] | None = Field(
        default=None, description="label and annotation keys carried to the live pod (only these are ever removed)"
    )
    reason: str | None = Field(
        default=None,
        description="CreateFailed: the pod was refused (API server, grant); Evicted: gone while its home is cordoned",
    )
    message: str | None = Field(default=None, description="the foreign API server's message")


class ShadowPod(CustomObject):
    crd: ClassVar[CrdInfo] = CrdInfo(
        kind="ShadowPod",
        plural="shadowpods",
        short_names=("shpod",),
        description="A pod offloaded from a home cluster, kept present by the foreign agent.",
        printer_columns=(
            PrinterColumn("Phase", ".status.phase"),
            PrinterColumn("Reason", ".status.reason"),
            PrinterColumn("Age", ".metadata.creationTimestamp", "date"),
        ),
    )

    spec: ShadowPodSpec
    status: ShadowPodStatus | None = None


def pod_spec_of(shadow: Any) -> dict[str, Any]:
    """The pod spec a ShadowPod asks for (a copy: the caller may change it)."""
    return dict((shadow.get("spec") or {}).get("pod") or {})
