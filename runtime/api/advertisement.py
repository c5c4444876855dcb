"""ResourceAdvertisement: what a foreign cluster offers one home cluster, published in its tenant namespace."""

from __future__ import annotations

from typing import ClassVar

from pydantic import Field

from runtime.api._base import ApiModel, CrdInfo, CustomObject, PrinterColumn


class ResourceAdvertisementSpec(ApiModel):
    cluster_id: str = Field(alias="clusterID", description="the foreign cluster that advertises")
    # allocatable of its physical nodes minus the requests of pods not offloaded by this home cluster
    resources: dict[str, str] = Field(default_factory=dict)
    labels: dict[str, str] = Field(default_factory=dict, description="labels suggested for the virtual node")


class ResourceAdvertisement(CustomObject):
    crd: ClassVar[CrdInfo] = CrdInfo(
        kind="ResourceAdvertisement",
        plural="resourceadvertisements",
        short_names=("adv",),
        description="Resources a foreign cluster offers to one home cluster.",
        printer_columns=(
            PrinterColumn("ClusterID", ".spec.clusterID"),
            PrinterColumn("CPU", ".spec.resources.cpu"),
            PrinterColumn("Memory", ".spec.resources.memory"),
            PrinterColumn("Age", ".metadata.creationTimestamp", "date"),
        ),
    )

    spec: ResourceAdvertisementSpec
