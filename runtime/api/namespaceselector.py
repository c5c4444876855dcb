"""NamespaceOffloadingSelector: offload every namespace whose labels a selector matches.

One cluster-scoped object per selector (the stack's `liqo:namespaceSelectors`, or
`liqo-stack offload namespaces --namespace-selector`). The controller-manager gives each matching namespace
a NamespaceOffloading made from the template here, labelled with the selector's name, and deletes
those it made once the namespace no longer matches. The namespace selector is a core
LabelSelector (as a NetworkPolicy's), so the API server validates its shape.
"""

from __future__ import annotations

import hashlib
import re
from collections.abc import Mapping
from typing import ClassVar, Literal

from pydantic import Field

from runtime.api import names
from runtime.api._base import ApiModel, CrdInfo, CustomObject, PrinterColumn
from runtime.api.core import NodeSelector, NodeSelectorRequirement, NodeSelectorTerm
from runtime.api.namespaceoffloading import NamespaceMappingStrategy, NamespaceOffloadingSpec, PodOffloadingStrategy
from runtime.api.selectors import SelectorSyntaxError, format_requirement, parse_term, requirement_matches

LabelOperator = Literal["In", "NotIn", "Exists", "DoesNotExist"]
# SelectedName gives one remote name: many namespaces cannot share it.
SelectorMappingStrategy = Literal["DefaultName", "EnforceSameName"]


class LabelSelectorRequirement(ApiModel):
    key: str
    operator: LabelOperator
    values: list[str] | None = None


class LabelSelector(ApiModel):
    """The core LabelSelector: matchLabels and matchExpressions, ANDed."""

    match_labels: dict[str, str] | None = None
    match_expressions: list[LabelSelectorRequirement] | None = None


class NamespaceOffloadingSelectorSpec(ApiModel):
    namespace_selector: LabelSelector
    namespace_mapping_strategy: SelectorMappingStrategy = "DefaultName"
    pod_offloading_strategy: PodOffloadingStrategy = PodOffloadingStrategy.LOCAL_AND_REMOTE
    cluster_selector: NodeSelector = Field(default_factory=NodeSelector)

    def offloading_spec(self) -> NamespaceOffloadingSpec:
        """The NamespaceOffloading each matching namespace gets."""
        return NamespaceOffloadingSpec(
            namespace_mapping_strategy=NamespaceMappingStrategy(self.namespace_mapping_strategy),
            pod_offloading_strategy=self.pod_offloading_strategy,
            cluster_selector=self.cluster_selector,
        )


class NamespaceOffloadingSelectorStatus(ApiModel):
    observed_generation: int | None = None
    matched_namespaces: int | None = None  # namespaces the selector matches (system namespaces never)
    offloaded_namespaces: int | None = None  # of those, offloaded by this selector
    ready_namespaces: int | None = None  # of those, Ready (or NoClusterSelected)
    # matching namespaces this selector leaves alone: offloaded by hand, or by a selector named before it
    not_owned: list[str] | None = None
    message: str | None = None  # why it matches nothing (an empty selector, a requirement without values)


class NamespaceOffloadingSelector(CustomObject):
    crd: ClassVar[CrdInfo] = CrdInfo(
        kind="NamespaceOffloadingSelector",
        plural="namespaceoffloadingselectors",
        scope="Cluster",
        short_names=("nsosel",),
        description="Offloads every namespace whose labels its namespaceSelector matches, "
        "one NamespaceOffloading each (liqo-stack's own kind).",
        printer_columns=(
            PrinterColumn("Matched", ".status.matchedNamespaces", "integer"),
            PrinterColumn("Offloaded", ".status.offloadedNamespaces", "integer"),
            PrinterColumn("Ready", ".status.readyNamespaces", "integer"),
            PrinterColumn("Age", ".metadata.creationTimestamp", "date"),
        ),
    )

    spec: NamespaceOffloadingSelectorSpec
    status: NamespaceOffloadingSelectorStatus | None = None


# Never offloaded by a selector, whatever their labels: the cluster's own and liqo's.
_SYSTEM_NAMESPACES = frozenset({"kube-system", "kube-public", "kube-node-lease", "default", names.LIQO_NAMESPACE})


def is_system_namespace(name: str) -> bool:
    return name in _SYSTEM_NAMESPACES or name.startswith(names.tenant_namespace(""))


def _requirements(selector: LabelSelector) -> list[NodeSelectorRequirement]:
    """The selector as requirements (matchLabels as `In [value]`), to match and print as cluster selectors are."""
    found = [
        NodeSelectorRequirement(key=key, operator="In", values=[value])
        for key, value in sorted((selector.match_labels or {}).items())
    ]
    found += [
        NodeSelectorRequirement(key=r.key, operator=r.operator, values=r.values)
        for r in selector.match_expressions or []
    ]
    return found


def label_selector_matches(selector: LabelSelector, labels: Mapping[str, str]) -> bool:
    """The core semantics, except that an empty selector matches nothing (not every namespace)."""
    requirements = _requirements(selector)
    return bool(requirements) and all(requirement_matches(r, labels) for r in requirements)


def format_label_selector(selector: LabelSelector) -> str:
    """In kubectl's `-l` syntax (what `--selector` takes)."""
    return ",".join(format_requirement(r) for r in _requirements(selector))


def parse_label_selector(text: str) -> LabelSelector:
    """kubectl's `-l` syntax -> a LabelSelector; `key=value` goes to matchLabels. Raises SelectorSyntaxError."""
    if not text.strip():
        raise SelectorSyntaxError("an empty selector would match every namespace: give a label, e.g. team=shop")
    term: NodeSelectorTerm = parse_term(text)
    match_labels: dict[str, str] = {}
    expressions: list[LabelSelectorRequirement] = []
    for req in term.match_expressions or []:
        values = req.values or []
        if req.operator == "In" and len(values) == 1 and req.key not in match_labels:
            match_labels[req.key] = values[0]
        elif req.operator in ("In", "NotIn", "Exists", "DoesNotExist"):
            expressions.append(LabelSelectorRequirement(key=req.key, operator=req.operator, values=req.values))
        else:  # pragma: no cover - parse_term makes no Gt/Lt
            raise SelectorSyntaxError(f"{format_requirement(req)}: a namespace selector has no {req.operator}")
    return LabelSelector(match_labels=match_labels or None, match_expressions=expressions or None)


def selector_problems(selector: LabelSelector) -> list[str]:
    """What the API server's schema cannot say: an empty selector, values with Exists, none with In."""
    problems = []
    if not _requirements(selector):
        problems.append("the namespace selector is empty: it would match every namespace; give a label")
    for r in selector.match_expressions or []:
        if r.operator in ("In", "NotIn") and not r.values:
            problems.append(f"{r.key} {r.operator}: needs at least one value")
        if r.operator in ("Exists", "DoesNotExist") and r.values:
            problems.append(f"{r.key} {r.operator}: takes no values")
    return problems


_NAME_CHARS = re.compile(r"[^a-z0-9]+")


def selector_object_name(selector: LabelSelector) -> str:
    """The NamespaceOffloadingSelector `liqo-stack offload namespaces --namespace-selector` makes: readable, and
    the same for the same selector (so offloading it again updates it, and unoffload finds it)."""
    text = format_label_selector(selector)
    digest = hashlib.sha256(text.encode()).hexdigest()[:8]
    slug = _NAME_CHARS.sub("-", text.lower()).strip("-")[:40].strip("-")
    return f"{slug}-{digest}" if slug else digest
