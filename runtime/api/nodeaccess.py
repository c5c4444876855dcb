"""Which nodes of a foreign cluster one home's pods may use, as that cluster declares it (the `nodes` of
the home's Quota; docs/security.md#nodes), and the pure functions every guard of it shares: the foreign
agent confines each pod it makes from a ShadowPod, the advertisement counts only those nodes, and the
stack's preview does the same (the admission policy's CEL says it too: liqo_stack/declaring/manifests.py).

A pod's toleration is allowed when one allowed toleration tolerates every taint it does, as Kubernetes'
PodTolerationRestriction admission plugin matches a namespace's whitelist (k8s.io/kubernetes
pkg/util/tolerations: isSuperset). A toleration of every taint (no key, `Exists`: what a pod carries to go
anywhere) is narrowed to the allowed ones instead of refused: it asks for nothing in particular.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from pydantic import Field

from runtime.api._base import ApiModel
from runtime.api.core import Toleration

NOT_READY_TAINT = "node.kubernetes.io/not-ready"
UNREACHABLE_TAINT = "node.kubernetes.io/unreachable"
# Kubernetes gives every pod these two (DefaultTolerationSeconds) and users tune their seconds: they keep a
# pod on a node in trouble a while, and never bring one to a node kept from it (a node in trouble is not Ready).
ALWAYS_TOLERATED: tuple[Mapping[str, Any], ...] = (
    {"key": NOT_READY_TAINT, "operator": "Exists"},
    {"key": UNREACHABLE_TAINT, "operator": "Exists"},
)


class NodeAccess(ApiModel):
    """Which of the foreign cluster's nodes the home's pods may use."""

    selector: dict[str, str] | None = Field(
        default=None,
        description="labels a node must carry to run the home's pods (added to each pod's nodeSelector); "
        "none: any node",
    )
    tolerations: list[Toleration] | None = Field(
        default=None,
        description="the taints the home's pods may tolerate, as tolerations (a pod's toleration is allowed when "
        f"one of these tolerates every taint it does); none: only {NOT_READY_TAINT} and {UNREACHABLE_TAINT}",
    )


def _key(toleration: Mapping[str, Any]) -> str:
    return str(toleration.get("key") or "")


def _operator(toleration: Mapping[str, Any]) -> str:
    return str(toleration.get("operator") or "Equal")  # an empty operator means Equal


def _effect(toleration: Mapping[str, Any]) -> str:
    return str(toleration.get("effect") or "")  # an empty effect means every effect


def is_wildcard(toleration: Mapping[str, Any]) -> bool:
    """Tolerates every taint (of its effect): no key, operator Exists."""
    return _key(toleration) == "" and _operator(toleration) == "Exists"


def covers(allowed: Mapping[str, Any], toleration: Mapping[str, Any]) -> bool:
    """Whether `allowed` tolerates every taint `toleration` does (isSuperset)."""
    if _key(toleration) != _key(allowed) and not is_wildcard(allowed):
        return False
    if _effect(allowed) and _effect(toleration) != _effect(allowed):
        return False
    limit = allowed.get("tolerationSeconds")
    if _effect(allowed) == "NoExecute" and limit is not None:
        seconds = toleration.get("tolerationSeconds")
        if seconds is None or seconds > limit:
            return False
    if _operator(allowed) == "Exists":
        return True
    return _operator(toleration) == "Equal" and str(toleration.get("value") or "") == str(allowed.get("value") or "")


def tolerates(toleration: Mapping[str, Any], taint: Mapping[str, Any]) -> bool:
    """Whether `toleration` tolerates `taint` (core ToleratesTaint)."""
    if _effect(toleration) and _effect(toleration) != taint.get("effect"):
        return False
    if _key(toleration) and _key(toleration) != taint.get("key"):
        return False
    return _operator(toleration) == "Exists" or str(toleration.get("value") or "") == str(taint.get("value") or "")


def shown(toleration: Mapping[str, Any]) -> str:
    """A toleration as messages name it: key[=value][:effect], `*` for every key."""
    value = "" if _operator(toleration) == "Exists" else f"={toleration.get('value') or ''}"
    effect = f":{_effect(toleration)}" if _effect(toleration) else ""
    return f"{_key(toleration) or '*'}{value}{effect}"


@dataclass(frozen=True)
class NodeRules:
    """A home's NodeAccess, ready for the checks made per pod (built once per version of its Quota)."""

    selector: Mapping[str, str]
    tolerations: tuple[Mapping[str, Any], ...]  # the allowed ones, ALWAYS_TOLERATED first

    @classmethod
    def of(cls, access: NodeAccess | None) -> NodeRules:
        declared = [t.to_wire() for t in (access.tolerations or [])] if access is not None else []
        extra = [t for t in declared if t not in ALWAYS_TOLERATED]
        return cls(dict((access.selector if access is not None else None) or {}), (*ALWAYS_TOLERATED, *extra))

    def allows(self, toleration: Mapping[str, Any]) -> bool:
        return any(covers(allowed, toleration) for allowed in self.tolerations)

    def admits_node(self, labels: Mapping[str, str], taints: Iterable[Mapping[str, Any]]) -> bool:
        """Whether a node with these labels and taints can take the home's pods: it carries the selector,
        and each of its NoSchedule and NoExecute taints is one the home may tolerate."""
        if any(labels.get(key) != value for key, value in self.selector.items()):
            return False
        return all(
            taint.get("effect") == "PreferNoSchedule" or any(tolerates(t, taint) for t in self.tolerations)
            for taint in taints
        )

    def confine(self, spec: Mapping[str, Any]) -> tuple[dict[str, Any], str | None]:
        """The pod spec as the foreign cluster runs it for the home: its nodeSelector with the home's
        selector added (so its scheduler never puts the pod elsewhere) and a toleration of every taint
        narrowed to the allowed ones; or why it may not run at all (the spec is returned unchanged then)."""
        if spec.get("nodeName"):
            return dict(spec), "spec.nodeName is the foreign cluster's scheduler's to choose"
        own: Mapping[str, str] = spec.get("nodeSelector") or {}
        clashes = [f"{k}={own[k]} (its nodes carry {k}={v})" for k, v in self.selector.items() if own.get(k, v) != v]
        if clashes:
            return dict(spec), "nodeSelector " + ", ".join(clashes) + " selects none of the nodes it may use"
        tolerations: Sequence[Mapping[str, Any]] = spec.get("tolerations") or []
        refused = [shown(t) for t in tolerations if not is_wildcard(t) and not self.allows(t)]
        if refused:
            return dict(spec), (
                f"tolerations of taints it may not tolerate: {', '.join(refused)} "
                f"(it may tolerate {', '.join(shown(t) for t in self.tolerations)})"
            )
        confined = dict(spec)
        if self.selector:
            confined["nodeSelector"] = {**own, **self.selector}
        if any(is_wildcard(t) for t in tolerations):
            confined["tolerations"] = narrowed(tolerations, self.tolerations)
        return confined, None


def narrowed(tolerations: Iterable[Mapping[str, Any]], allowed: Iterable[Mapping[str, Any]]) -> list[dict[str, Any]]:
    """`tolerations` with each toleration of every taint replaced by the allowed ones of its effect (and
    its tolerationSeconds, which Kubernetes allows with NoExecute only)."""
    result: list[dict[str, Any]] = []
    for toleration in tolerations:
        if not is_wildcard(toleration):
            candidates = [dict(toleration)]
        else:
            effect, seconds = _effect(toleration), toleration.get("tolerationSeconds")
            candidates = []
            for each in allowed:
                if effect and _effect(each) and _effect(each) != effect:
                    continue
                candidate = {**each, **({"effect": effect} if effect else {})}
                if seconds is not None:
                    candidate["tolerationSeconds"] = seconds
                candidates.append(candidate)
        result.extend(c for c in candidates if c not in result)
    return result
