"""docs/reflection.md's storage fabric, what it writes: the claim in the foreign cluster and the home
PV standing for it (runtime/reflection/storage.py provisions them). Pure functions on wire-format
dicts; inputs are never changed."""

from __future__ import annotations

import copy
from collections.abc import Mapping
from typing import Any

from runtime.api import names
from runtime.forging.objects import ReflectionSettings, ownership_labels, reflected_object

# A home PV only stands for the remote volume: nothing mounts it at home (its node is virtual), but a
# PV needs a source; Liqo's virtual storage uses the same placeholder.
PLACEHOLDER_PATH = "/tmp/liqo-placeholder"
# Written by the home PV controller and scheduler about the home claim: meaningless in the foreign
# cluster (a selected node there would name a home node).
_HOME_ONLY_ANNOTATION_PREFIXES = ("volume.kubernetes.io/", "volume.beta.kubernetes.io/", "pv.kubernetes.io/")


def metadata_of(obj: Mapping[str, Any] | None) -> Mapping[str, Any]:
    """An object's metadata, empty for no object (a claim or volume not there)."""
    return (obj or {}).get("metadata") or {}


def volume_name(claim: Mapping[str, Any]) -> str:
    """The home PV of a claim, named after its UID as dynamically provisioned volumes are."""
    return f"pvc-{metadata_of(claim)['uid']}"


def provisions_here(claim: Mapping[str, Any], node_name: str) -> bool:
    """A `liqo` claim whose first pod was scheduled on this virtual node, and not bound to another volume."""
    spec = claim.get("spec") or {}
    bound_to = spec.get("volumeName")
    return (
        spec.get("storageClassName") == names.STORAGE_CLASS_NAME
        and (metadata_of(claim).get("annotations") or {}).get(names.SELECTED_NODE_ANNOTATION) == node_name
        and (not bound_to or bound_to == volume_name(claim))
    )


def remote_claim(
    home: Mapping[str, Any],
    *,
    twin: str,
    storage_class: str | None,
    home_cluster_id: str,
    foreign_cluster_id: str,
    settings: ReflectionSettings,
) -> dict[str, Any]:
    """The claim in the foreign cluster: the home one verbatim (docs/reflection.md) but for its storage class
    (`storage_class`; None leaves the foreign default), what only the home cluster set on it, and
    its selector and volume (home PVs)."""
    spec = home.get("spec") or {}
    remote_spec: dict[str, Any] = {
        "accessModes": list(spec.get("accessModes") or []),
        "resources": copy.deepcopy(spec.get("resources") or {}),
        "volumeMode": spec.get("volumeMode") or "Filesystem",
    }
    if storage_class:
        remote_spec["storageClassName"] = storage_class
    meta = dict(metadata_of(home))
    meta["annotations"] = {
        key: value
        for key, value in (meta.get("annotations") or {}).items()
        if not key.startswith(_HOME_ONLY_ANNOTATION_PREFIXES)
    }
    body = reflected_object(
        {**home, "metadata": meta},
        {"spec": remote_spec},
        twin=twin,
        home_cluster_id=home_cluster_id,
        foreign_cluster_id=foreign_cluster_id,
        settings=settings,
    )
    body["metadata"]["annotations"][names.HOME_CLAIM_UID_ANNOTATION] = str(meta["uid"])
    return body


def home_volume(
    home: Mapping[str, Any],
    remote: Mapping[str, Any] | None,
    *,
    node_name: str,
    home_cluster_id: str,
    foreign_cluster_id: str,
) -> dict[str, Any]:
    """The home PV of a claim provisioned in the foreign cluster: pre-bound to the home claim, on the
    virtual node only. Size and access modes are the remote claim's once bound there, else the request."""
    spec = home.get("spec") or {}
    meta = metadata_of(home)
    status = (remote or {}).get("status") or {}
    bound = status.get("phase") == "Bound"
    capacity = (status.get("capacity") or {}).get("storage") if bound else None
    requested = ((spec.get("resources") or {}).get("requests") or {}).get("storage")
    access_modes = (status.get("accessModes") if bound else None) or spec.get("accessModes") or []
    return {
        "apiVersion": "v1",
        "kind": "PersistentVolume",
        "metadata": {
            "name": volume_name(home),
            "labels": ownership_labels(home_cluster_id, foreign_cluster_id),
            "annotations": {names.PROVISIONED_BY_ANNOTATION: names.STORAGE_PROVISIONER},
        },
        "spec": {
            "capacity": {"storage": capacity or requested},
            "accessModes": list(access_modes),
            "volumeMode": spec.get("volumeMode") or "Filesystem",
            "storageClassName": names.STORAGE_CLASS_NAME,
            "persistentVolumeReclaimPolicy": names.STORAGE_RECLAIM_POLICY,
            "claimRef": {
                "apiVersion": "v1",
                "kind": "PersistentVolumeClaim",
                "namespace": meta["namespace"],
                "name": meta["name"],
                "uid": meta["uid"],
            },
            "hostPath": {"path": PLACEHOLDER_PATH},
            "nodeAffinity": {
                "required": {
                    "nodeSelectorTerms": [
                        {"matchExpressions": [{"key": names.HOSTNAME_LABEL, "operator": "In", "values": [node_name]}]}
                    ]
                }
            },
        },
    }


def volume_outdated(desired: Mapping[str, Any], actual: Mapping[str, Any]) -> bool:
    """What the remote claim says of the volume changed (it got bound, or resized)."""
    want, have = desired["spec"], actual.get("spec") or {}
    return bool(want["capacity"] != (have.get("capacity") or {}) or want["accessModes"] != have.get("accessModes"))
