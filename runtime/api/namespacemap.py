"""NamespaceMap: in a foreign cluster's tenant namespace, the twin namespaces a home cluster asks for."""

from __future__ import annotations

from enum import StrEnum
from typing import ClassVar

from pydantic import Field

from runtime.api._base import ApiModel, CrdInfo, CustomObject, PrinterColumn


class MappingPhase(StrEnum):
    ACCEPTED = "Accepted"
    CREATION_FAILED = "CreationFailed"
    TERMINATING = "Terminating"


class NamespaceMapSpec(ApiModel):
    # home namespace -> requested twin namespace name; null when nothing is requested (the last
    # mapping withdrawn: an empty object cannot be sent through a server-side apply)
    desired_mapping: dict[str, str] | None = None


class MappingStatus(ApiModel):
    remote_namespace: str
    phase: MappingPhase
    message: str | None = None


class NamespaceMapStatus(ApiModel):
    current_mapping: dict[str, MappingStatus] = Field(default_factory=dict)


class NamespaceMap(CustomObject):
    crd: ClassVar[CrdInfo] = CrdInfo(
        kind="NamespaceMap",
        plural="namespacemaps",
        short_names=("nm",),
        description="Twin namespaces requested by one home cluster.",
        printer_columns=(PrinterColumn("Age", ".metadata.creationTimestamp", "date"),),
    )

    spec: NamespaceMapSpec = Field(default_factory=NamespaceMapSpec)
    status: NamespaceMapStatus | None = None
