"""What a reflected copy looks like, and whether the foreign copy already is it: pure functions.

docs/reflection.md: objects are reflected "verbatim" (each kind says what it leaves out), with the labels
and annotations the VirtualNode lists as not reflected removed, and the ownership labels added
(DESIGN: a reflector touches only objects that carry them). The hash of what was applied rides on
the copy, so a change at home is seen even where the foreign API server defaults fields, and a
hand edit in the foreign cluster is seen because the copy no longer covers what we want.
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any

from runtime.api import ReflectionPolicy, VirtualNodeSpec, names

APPLIED_HASH_ANNOTATION = "offloading.liqo.io/reflected-hash"


@dataclass(frozen=True)
class ReflectionSettings:
    """One kind's reflection settings, from the VirtualNode (docs/reflection.md's Helm values)."""

    policy: ReflectionPolicy = ReflectionPolicy.DENY_LIST
    workers: int = 3
    labels_not_reflected: frozenset[str] = field(default_factory=frozenset)
    annotations_not_reflected: frozenset[str] = field(default_factory=frozenset)
    # (range at home, range in the foreign cluster): where it reaches pods the home cluster shows elsewhere
    address_ranges: tuple[tuple[str, str], ...] = ()


def settings_from(spec: VirtualNodeSpec | None, kind: str) -> ReflectionSettings:
    """One kind's reflection settings from the VirtualNode's spec (defaults before it is known)."""
    if spec is None:
        return ReflectionSettings()
    chosen = spec.reflection.get(kind) or spec.custom_resource(kind)  # a custom one: by its CRD's name
    patch = spec.offloading_patch
    return ReflectionSettings(
        policy=chosen.type if chosen else ReflectionSettings.policy,
        workers=chosen.workers if chosen else ReflectionSettings.workers,
        labels_not_reflected=frozenset(patch.labels_not_reflected or ()),
        annotations_not_reflected=frozenset(patch.annotations_not_reflected or ()),
        address_ranges=tuple((r.seen_at_home, r.seen_there) for r in spec.endpoint_remappings),
    )


# Objects a kind never reflects, whatever its policy: kind -> (test, why).
# Every namespace gets its own `kube-root-ca.crt` from its cluster's controller-manager: never ours to copy.
ROOT_CA_CONFIGMAP = "kube-root-ca.crt"
# A service-account token is minted by the cluster it authenticates to; foreign clusters make their own.
SERVICE_ACCOUNT_TOKEN_TYPE = "kubernetes.io/service-account-token"
NEVER_REFLECTED: dict[str, tuple[Callable[[Mapping[str, Any]], bool], str]] = {
    "configmap": (
        lambda obj: (obj.get("metadata") or {}).get("name") == ROOT_CA_CONFIGMAP,
        "each cluster makes its own kube-root-ca.crt in every namespace",
    ),
    "secret": (
        lambda obj: obj.get("type") == SERVICE_ACCOUNT_TOKEN_TYPE,
        "a service-account token is minted by the cluster it authenticates to",
    ),
}


def never_reflected(kind: str, obj: Mapping[str, Any]) -> str | None:
    """Why an object of `kind` is never reflected whatever the policy, or None when it may be."""
    test, why = NEVER_REFLECTED.get(kind, (lambda _: False, ""))
    return why if test(obj) else None


def _flag(annotations: Mapping[str, str], key: str) -> bool:
    """An annotation that is set, unless it says "false" (`liqo.io/skip-reflection=false` reflects:
    docs/reflection.md)."""
    value = annotations.get(key)
    return value is not None and value.strip().lower() != "false"


def has_own_policy(annotations: Mapping[str, str]) -> bool:
    """The object says for itself whether it is reflected (docs/reflection.md: an EndpointSlice may)."""
    return names.SKIP_REFLECTION_ANNOTATION in annotations or names.ALLOW_REFLECTION_ANNOTATION in annotations


def policy_allows(policy: ReflectionPolicy, annotations: Mapping[str, str]) -> bool:
    if policy is ReflectionPolicy.ALLOW_LIST:
        return _flag(annotations, names.ALLOW_REFLECTION_ANNOTATION)
    return not _flag(annotations, names.SKIP_REFLECTION_ANNOTATION)


def why_not_reflected(kind: str, obj: Mapping[str, Any], settings: ReflectionSettings) -> str | None:
    """Why the reflector of `kind` would not copy this home object with these settings (None: it would):
    the reasons a reconcile leaves an object home, in the order it checks them."""
    if settings.workers == 0:
        return f"the reflection of {kind}s is disabled (workers 0)"
    if (obj.get("metadata") or {}).get("deletionTimestamp"):
        return "being deleted"
    never = never_reflected(kind, obj)
    if never is not None:
        return never
    annotations = (obj.get("metadata") or {}).get("annotations") or {}
    if policy_allows(settings.policy, annotations):
        return None
    if settings.policy is ReflectionPolicy.ALLOW_LIST:
        return f"policy AllowList and no {names.ALLOW_REFLECTION_ANNOTATION} annotation"
    return f"annotated {names.SKIP_REFLECTION_ANNOTATION} (policy DenyList)"


def _without(entries: Mapping[str, str] | None, skipped: Iterable[str]) -> dict[str, str]:
    drop = set(skipped)
    return {k: v for k, v in (entries or {}).items() if k not in drop}


def ownership_labels(home_cluster_id: str, foreign_cluster_id: str) -> dict[str, str]:
    return {names.ORIGIN_LABEL: home_cluster_id, names.DESTINATION_LABEL: foreign_cluster_id}


def is_owned(obj: Mapping[str, Any], home_cluster_id: str, foreign_cluster_id: str) -> bool:
    labels = (obj.get("metadata") or {}).get("labels") or {}
    return all(labels.get(k) == v for k, v in ownership_labels(home_cluster_id, foreign_cluster_id).items())


def applied_hash(body: Mapping[str, Any]) -> str:
    return hashlib.sha256(json.dumps(body, sort_keys=True, separators=(",", ":")).encode()).hexdigest()[:16]


def reflected_object(
    home: Mapping[str, Any],
    content: Mapping[str, Any],
    *,
    twin: str,
    home_cluster_id: str,
    foreign_cluster_id: str,
    settings: ReflectionSettings,
    relabel: Callable[[Mapping[str, str]], dict[str, str]] = dict,
    reannotate: Callable[[Mapping[str, str]], dict[str, str]] = dict,
) -> dict[str, Any]:
    """The foreign copy: apiVersion, kind and name of the home object, in the twin namespace, with the
    kind's `content` (everything but metadata), filtered labels and annotations (then `relabel`ed and
    `reannotate`d by the kind), ownership and hash."""
    meta = home.get("metadata") or {}
    labels = {
        **relabel(_without(meta.get("labels"), settings.labels_not_reflected)),
        **ownership_labels(home_cluster_id, foreign_cluster_id),
    }
    annotations = reannotate(_without(meta.get("annotations"), settings.annotations_not_reflected))
    annotations.pop(APPLIED_HASH_ANNOTATION, None)
    body: dict[str, Any] = {
        "apiVersion": home["apiVersion"],
        "kind": home["kind"],
        "metadata": {"name": meta["name"], "namespace": twin, "labels": labels, "annotations": annotations},
        **{k: v for k, v in content.items() if v is not None},
    }
    body["metadata"]["annotations"] = {**annotations, APPLIED_HASH_ANNOTATION: applied_hash(body)}
    return body


def covers(desired: Any, actual: Any) -> bool:
    """Every field of `desired` has the same value in `actual`; fields only `actual` has (server
    defaults, allocated IPs) do not matter. Lists must match item by item. An empty list or map is
    covered by an absent field: the API server returns an empty one as null (an EndpointSlice of a
    Service with no ready pod has `endpoints: null`), so it would never look up to date."""
    if actual is None and isinstance(desired, list | Mapping) and not desired:
        return True
    if isinstance(desired, Mapping):
        return isinstance(actual, Mapping) and all(covers(v, actual.get(k)) for k, v in desired.items())
    if isinstance(desired, list):
        return isinstance(actual, list) and len(desired) == len(actual) and all(map(covers, desired, actual))
    return bool(desired == actual)


def up_to_date(desired: Mapping[str, Any], actual: Mapping[str, Any]) -> bool:
    """No write needed: the copy was applied from the same home state and nobody changed it since."""
    recorded = ((actual.get("metadata") or {}).get("annotations") or {}).get(APPLIED_HASH_ANNOTATION)
    wanted = desired["metadata"]["annotations"][APPLIED_HASH_ANNOTATION]
    return recorded == wanted and covers(desired, actual)
