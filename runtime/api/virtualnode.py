"""VirtualNode: one per foreign cluster, in the home cluster's liqo namespace."""

from __future__ import annotations

from enum import StrEnum
from typing import ClassVar

from pydantic import Field

from runtime.api._base import ApiModel, CrdInfo, CustomObject, PrinterColumn
from runtime.api.core import Condition, Taint


class ReflectionPolicy(StrEnum):
    DENY_LIST = "DenyList"  # everything but objects annotated liqo.io/skip-reflection
    ALLOW_LIST = "AllowList"  # nothing but objects annotated liqo.io/allow-reflection


class ReflectorSettings(ApiModel):
    type: ReflectionPolicy = ReflectionPolicy.DENY_LIST
    workers: int = Field(default=3, ge=0, description="0 disables the reflection of this resource type")


class CustomResourceReflection(ApiModel):
    """The reflection of one custom resource type, opted in by (group, version, resource): spec (every
    field but status) goes home -> foreign; status comes back when `reflectStatus` is set and the
    home CRD has a status subresource."""

    group: str = Field(min_length=1)
    version: str = Field(min_length=1)
    resource: str = Field(min_length=1, description="the plural, as in the CRD's name <resource>.<group>")
    type: ReflectionPolicy = ReflectionPolicy.ALLOW_LIST
    workers: int = Field(default=3, ge=0, description="0 disables the reflection of this resource type")
    reflect_status: bool = False

    @property
    def crd_name(self) -> str:
        """The CRD's name, also this type's key among the reflected kinds (metrics, settings)."""
        return f"{self.resource}.{self.group}"


class OffloadingPatch(ApiModel):
    labels_not_reflected: list[str] | None = None
    annotations_not_reflected: list[str] | None = None
    # the foreign nodes this virtual node stands for (a node pool): merged into every remote pod's
    # nodeSelector, and the node's capacity is theirs alone; None: the whole foreign cluster
    node_selector: dict[str, str] | None = None


class HealthCheck(ApiModel):
    interval_seconds: int = Field(default=10, ge=1)
    failure_threshold: int = Field(default=3, ge=1)


class SecretReference(ApiModel):
    name: str


class ApiServerAddress(ApiModel):
    """Where pods reach an API server (their KUBERNETES_SERVICE_HOST/PORT)."""

    host: str = Field(min_length=1)
    port: int = Field(ge=1, le=65535)


class StorageType(ApiModel):
    """A StorageClass of the foreign cluster that claims of the home `liqo` class may use there."""

    storage_class_name: str
    default: bool = False


class RangeRemapping(ApiModel):
    """Pods the home cluster shows in `seenAtHome` are reached from the foreign cluster in `seenThere`."""

    seen_at_home: str
    seen_there: str


class VirtualNodeSpec(ApiModel):
    cluster_id: str = Field(alias="clusterID")
    kubeconfig_secret_ref: SecretReference | None = None
    labels: dict[str, str] = Field(default_factory=dict)
    taints: list[Taint] = Field(default_factory=list)
    sharing_percentage: int = Field(default=90, ge=1, le=100)
    # fixed amounts that replace the percentage for these resources (e.g. {"nvidia.com/gpu": "1"})
    fixed_resources: dict[str, str] = Field(default_factory=dict)
    offloading_patch: OffloadingPatch = Field(default_factory=OffloadingPatch)
    reflection: dict[str, ReflectorSettings] = Field(default_factory=dict)
    # opted-in custom resources (the stack grants the home identity exactly these in the twins)
    custom_resources: list[CustomResourceReflection] = Field(default_factory=list)
    health_check: HealthCheck = Field(default_factory=HealthCheck)
    # docs/reflection.md: offloaded pods get tokens of the home API server, and reach it at home_api_server
    api_server_token_support: bool = True
    home_api_server: ApiServerAddress | None = Field(default=None, alias="homeAPIServer")
    # the foreign cluster's pod range, and where the home cluster shows it when it overlaps (docs/reflection.md)
    pod_cidr: str | None = Field(default=None, alias="podCIDR")
    remapped_pod_cidr: str | None = Field(default=None, alias="remappedPodCIDR")
    # where this foreign cluster reaches the pods of the others (home's included) whose range it sees
    # elsewhere than the home cluster does: reflected EndpointSlice addresses are moved (docs/reflection.md)
    endpoint_remappings: list[RangeRemapping] = Field(default_factory=list)
    # negotiated for the peering (docs/reflection.md): the class a `liqo` claim gets in the foreign cluster
    storage_classes: list[StorageType] = Field(default_factory=list)

    def custom_resource(self, crd_name: str) -> CustomResourceReflection | None:
        return next((c for c in self.custom_resources if c.crd_name == crd_name), None)

    def remote_storage_class(self) -> str | None:
        """The default negotiated class (else the first); None: the foreign cluster's default class."""
        chosen = next((s for s in self.storage_classes if s.default), None) or next(iter(self.storage_classes), None)
        return chosen.storage_class_name if chosen else None


class VirtualNodeStatus(ApiModel):
    observed_generation: int | None = None
    capacity: dict[str, str] | None = None
    conditions: list[Condition] | None = None


class VirtualNode(CustomObject):
    crd: ClassVar[CrdInfo] = CrdInfo(
        kind="VirtualNode",
        plural="virtualnodes",
        short_names=("vn",),
        description="A foreign cluster seen as one node of the home cluster.",
        printer_columns=(
            PrinterColumn("ClusterID", ".spec.clusterID"),
            PrinterColumn("Sharing", ".spec.sharingPercentage", "integer"),
            PrinterColumn("Age", ".metadata.creationTimestamp", "date"),
        ),
    )

    spec: VirtualNodeSpec
    status: VirtualNodeStatus | None = None
