"""What the foreign agent writes to bring a live pod to its ShadowPod (runtime/controllers/shadowpod.py
keeps the pods): the patches, and the status fields recording which version of the ShadowPod the pod
was brought to. Pure functions; inputs are never changed."""

from __future__ import annotations

import hashlib
import json
from typing import Any

from runtime.api.quantities import parse_quantity
from runtime.api.shadowpod import pod_spec_of


def applied_hash(shadow: Any) -> str:
    """Digest of what the ShadowPod asks of the live pod: its labels, annotations and pod spec."""
    meta = shadow.metadata
    wanted = {"labels": meta.labels or {}, "annotations": meta.annotations or {}, "pod": pod_spec_of(shadow)}
    return hashlib.sha256(json.dumps(wanted, sort_keys=True, default=str).encode()).hexdigest()[:16]


def _same_quantity(a: Any, b: Any) -> bool:
    try:
        return bool(parse_quantity(str(a)) == parse_quantity(str(b)))
    except ValueError:
        return str(a) == str(b)


def applied(shadow: Any, digest: str) -> dict[str, Any]:
    """The status fields recording that the live pod was brought to this ShadowPod."""
    meta = shadow.metadata
    keys = {"labels": sorted(meta.labels or {}), "annotations": sorted(meta.annotations or {})}
    return {"appliedHash": digest, "appliedKeys": keys}


def live_changes(
    shadow: dict[str, Any], pod: dict[str, Any], applied_keys: dict[str, list[str]] | None = None
) -> tuple[dict[str, Any], dict[str, Any]]:
    """The strategic merge patches bringing a live pod to its ShadowPod: (pod, resize subresource).

    Labels and annotations get the ShadowPod's values, and lose the keys carried before
    (`applied_keys`) that the ShadowPod no longer has, never those the foreign cluster added;
    images, activeDeadlineSeconds and the tolerations the pod lacks are set (the foreign
    cluster's own tolerations stay: none may be removed from a live pod); resources the
    ShadowPod names go through the resize.
    """
    want_meta, have_meta = shadow.get("metadata") or {}, pod.get("metadata") or {}
    want_spec, have_spec = pod_spec_of(shadow), pod.get("spec") or {}
    patch: dict[str, Any] = {}
    for field in ("labels", "annotations"):
        want, have = want_meta.get(field) or {}, have_meta.get(field) or {}
        gone = [k for k in (applied_keys or {}).get(field) or [] if k in have and k not in want]
        changes = {k: v for k, v in want.items() if have.get(k) != v} | dict.fromkeys(gone)
        if changes:
            patch.setdefault("metadata", {})[field] = changes
    spec: dict[str, Any] = {}
    deadline = want_spec.get("activeDeadlineSeconds")
    if deadline is not None and deadline != have_spec.get("activeDeadlineSeconds"):
        spec["activeDeadlineSeconds"] = deadline
    tolerations = list(have_spec.get("tolerations") or [])
    missing = [t for t in want_spec.get("tolerations") or [] if t not in tolerations]
    if missing:
        spec["tolerations"] = tolerations + missing
    resize: dict[str, Any] = {}
    for kind in ("initContainers", "containers"):
        live = {c.get("name"): c for c in have_spec.get(kind) or []}
        images, resources = [], []
        for container in want_spec.get(kind) or []:
            now = live.get(container.get("name"))
            if now is None:
                continue
            if container.get("image") and container["image"] != now.get("image"):
                images.append({"name": container["name"], "image": container["image"]})
            want_res, have_res = container.get("resources") or {}, now.get("resources") or {}
            if any(
                not _same_quantity(value, (have_res.get(section) or {}).get(resource))
                for section in ("requests", "limits")
                for resource, value in (want_res.get(section) or {}).items()
            ):
                resources.append({"name": container["name"], "resources": want_res})
        if images:
            spec[kind] = images
        if resources:
            resize.setdefault("spec", {})[kind] = resources
    if spec:
        patch["spec"] = spec
    return patch, resize
