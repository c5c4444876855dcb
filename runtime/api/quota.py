"""Quota: in a foreign cluster's tenant namespace, what that cluster grants one home cluster.

The foreign side declares it (its own stack, `liqo-stack`'s one-stack form, or its admin by hand);
the home identity may not read or write it. The foreign agent enforces it before it turns a
ShadowPod into a pod (runtime/controllers/granting.py), whatever the home side checked. Kind and
fields follow the seeds' system (Liqo's `Quota`: limitsEnforcement None / Soft / Hard, resources,
cordoned), so its users' manifests keep working.
"""

from __future__ import annotations

import re
from collections import defaultdict
from collections.abc import Mapping
from decimal import Decimal
from enum import StrEnum
from typing import Any, ClassVar

from pydantic import Field

from runtime.api import names
from runtime.api._base import ApiModel, CrdInfo, CustomObject, PrinterColumn
from runtime.api.nodeaccess import NodeAccess
from runtime.api.quantities import parse_quantity


class LimitsEnforcement(StrEnum):
    """How strictly a grant is held (docs/security.md#grants): what each checks is CHECKED_UNDER."""

    NONE = "None"
    SOFT = "Soft"
    HARD = "Hard"


# What the foreign agent checks of a pod under each level (runtime/controllers/granting.py), as the
# docs and the config reference say it.
CHECKED_UNDER: dict[LimitsEnforcement, str] = {
    LimitsEnforcement.NONE: "no resource check (the pod's origin, host namespaces and the floor still apply)",
    LimitsEnforcement.SOFT: "the requests of the home's pods there, this one included, stay within `resources`: each "
    "pod counts its containers' requests (none counts as zero) and one `pods` slot; only the resources the grant "
    "names are held",
    LimitsEnforcement.HARD: "as `Soft`, and every container requests cpu and memory, with limits equal to requests",
}


class QuotaSpec(ApiModel):
    user: str | None = Field(default=None, description="the home identity the grant is for (informational)")
    limits_enforcement: LimitsEnforcement = Field(
        default=LimitsEnforcement.SOFT, description="None, Soft or Hard: how strictly the grant is held"
    )
    resources: dict[str, str] = Field(
        default_factory=dict,
        description="the most the home's pods may request here in all, per resource (cpu, memory, pods, ...); "
        "empty: what this cluster advertises to the home (its ResourceAdvertisement)",
    )
    cordoned: bool = Field(default=False, description="no new pod of this home starts here; running ones go on")
    nodes: NodeAccess | None = Field(
        default=None, description="which nodes the home's pods may use here; none: any node, tolerating no taint"
    )
    objects: dict[str, str] | None = Field(
        default=None,
        description="the ResourceQuota of each of the home's twin namespaces (count/configmaps, count/secrets, "
        "count/services, persistentvolumeclaims, requests.storage, ...), over the defaults",
    )


class Quota(CustomObject):
    crd: ClassVar[CrdInfo] = CrdInfo(
        kind="Quota",
        plural="quotas",
        description="What a foreign cluster grants one home cluster, enforced by its foreign agent.",
        printer_columns=(
            PrinterColumn("Enforcement", ".spec.limitsEnforcement"),
            PrinterColumn("Cordoned", ".spec.cordoned", "boolean"),
            PrinterColumn("CPU", ".spec.resources.cpu"),
            PrinterColumn("Memory", ".spec.resources.memory"),
            PrinterColumn("Age", ".metadata.creationTimestamp", "date"),
        ),
    )

    spec: QuotaSpec = Field(default_factory=QuotaSpec)


Requests = dict[str, Decimal]

# What a home may keep in each twin namespace, by count and storage: the foreign agent keeps a ResourceQuota
# of these in every twin (names.TWIN_OBJECTS_QUOTA), and the Quota's `objects` raise or lower each. One token
# Secret per offloaded pod that mounts a ServiceAccount token counts among the Secrets; a namespace of 1,000
# ConfigMaps is a workload this project targets (docs/performance.md), with room.
DEFAULT_TWIN_OBJECT_LIMITS: Mapping[str, str] = {
    "count/configmaps": "2000",
    "count/secrets": "2000",
    "count/services": "100",
    "persistentvolumeclaims": "50",
    "requests.storage": "500Gi",
}
# What `objects` may bound: counts of objects and storage. Never pods or their requests: those are the
# grant's (`resources`), held by the agent; a ResourceQuota of them would refuse pods without requests.
_OBJECT_COUNT = re.compile(r"count/[a-z0-9]([-a-z0-9.]*[a-z0-9])?")
_PER_STORAGE_CLASS = re.compile(
    r"[a-z0-9]([-a-z0-9.]*[a-z0-9])?\.storageclass\.storage\.k8s\.io/(requests\.storage|persistentvolumeclaims)"
)
_OTHER_OBJECT_LIMITS = frozenset(
    {"configmaps", "secrets", "services", "services.loadbalancers", "services.nodeports"}
    | {"persistentvolumeclaims", "requests.storage", "replicationcontrollers", "resourcequotas"}
)


def object_limit_problem(name: str) -> str | None:
    """Why `name` is no object limit a twin's ResourceQuota may hold (None: it is one)."""
    if name in ("count/pods", "pods") or not (
        name in _OTHER_OBJECT_LIMITS or _OBJECT_COUNT.fullmatch(name) or _PER_STORAGE_CLASS.fullmatch(name)
    ):
        return (
            f"{name!r} is no object limit: write count/<resource>[.<group>] (not pods), persistentvolumeclaims "
            "or requests.storage; what pods request is the grant's resources"
        )
    return None


def twin_object_limits(spec: QuotaSpec | None) -> dict[str, str]:
    """The hard limits of each twin's ResourceQuota: the defaults, with the Quota's `objects` over them."""
    return {**DEFAULT_TWIN_OBJECT_LIMITS, **((spec.objects or {}) if spec is not None else {})}


def twin_object_quota(twin: str, home_id: str, foreign_id: str, limits: Mapping[str, str]) -> dict[str, Any]:
    """The ResourceQuota the foreign agent keeps in a twin namespace (it is the agent's: the home identity
    may not change or delete it)."""
    return {
        "apiVersion": "v1",
        "kind": "ResourceQuota",
        "metadata": {
            "name": names.TWIN_OBJECTS_QUOTA,
            "namespace": twin,
            "labels": {
                names.ORIGIN_LABEL: home_id,
                names.DESTINATION_LABEL: foreign_id,
                names.MANAGED_BY_LABEL: names.MANAGED_BY,
            },
        },
        "spec": {"hard": dict(limits)},
    }


def spec_requests(pod_spec: Mapping[str, Any]) -> Requests:
    """What a pod (its spec, as a dict) requests, as the scheduler counts it: the containers' sum, at
    least the largest init container's, and one `pods` slot. ValueError on a malformed quantity (a
    ShadowPod's pod is not validated as a pod until the pod is created)."""
    totals: Requests = defaultdict(Decimal)
    for container in pod_spec.get("containers") or []:
        for resource, quantity in ((container.get("resources") or {}).get("requests") or {}).items():
            totals[resource] += parse_quantity(str(quantity)) or Decimal(0)
    for container in pod_spec.get("initContainers") or []:
        for resource, quantity in ((container.get("resources") or {}).get("requests") or {}).items():
            totals[resource] = max(totals[resource], parse_quantity(str(quantity)) or Decimal(0))
    totals["pods"] += 1
    return dict(totals)


def limits_problem(pod_spec: Mapping[str, Any], enforcement: LimitsEnforcement) -> str | None:
    """Under Hard, why the pod's containers do not qualify (each must request cpu and memory, with
    limits equal to its requests); None when they do, or under Soft and None."""
    if enforcement is not LimitsEnforcement.HARD:
        return None
    for kind in ("initContainers", "containers"):
        for container in pod_spec.get(kind) or []:
            resources = container.get("resources") or {}
            requests, limits = resources.get("requests") or {}, resources.get("limits") or {}
            for resource in ("cpu", "memory"):
                asked, limit = requests.get(resource), limits.get(resource)
                if asked is None or limit is None or parse_quantity(str(asked)) != parse_quantity(str(limit)):
                    return (
                        f"container {container.get('name')!r} must set resources.requests.{resource} equal to "
                        f"resources.limits.{resource} (limitsEnforcement Hard)"
                    )
    return None


def grant_problem(asked: Requests, used: Requests, grant: Mapping[str, Decimal]) -> str | None:
    """Why `asked` on top of `used` exceeds `grant` (only the resources the grant names are held);
    None when it fits. The text does not depend on `used`: a pod waiting for room is told once, not
    again each time the use changes (each telling is a status write)."""
    over = [
        f"{resource} {_shown(asked.get(resource, Decimal(0)))} asked does not fit in what is left of {_shown(limit)}"
        for resource, limit in sorted(grant.items())
        if asked.get(resource, Decimal(0)) > 0 and used.get(resource, Decimal(0)) + asked[resource] > limit
    ]
    return "; ".join(over) or None


def parsed_grant(resources: Mapping[str, str]) -> dict[str, Decimal]:
    """A grant's resources as numbers (unparsable quantities are left out: the CRD's clients validate)."""
    grant = {}
    for resource, quantity in resources.items():
        try:
            amount = parse_quantity(str(quantity))
        except ValueError:
            continue
        if amount is not None:
            grant[resource] = amount
    return grant


def _shown(amount: Decimal) -> str:
    if amount == amount.to_integral_value():
        return str(int(amount))
    return f"{int(amount * 1000)}m"
