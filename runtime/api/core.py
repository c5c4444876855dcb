"""Core Kubernetes types our CRDs embed, with the same shape as in the core API."""

from __future__ import annotations

from typing import Literal

from pydantic import Field

from runtime.api._base import ApiModel

SelectorOperator = Literal["In", "NotIn", "Exists", "DoesNotExist", "Gt", "Lt"]


class NodeSelectorRequirement(ApiModel):
    key: str
    operator: SelectorOperator
    values: list[str] | None = None


class NodeSelectorTerm(ApiModel):
    """Requirements ANDed; `matchFields` is kept for compatibility and has no cluster fields to match."""

    match_expressions: list[NodeSelectorRequirement] | None = None
    match_fields: list[NodeSelectorRequirement] | None = None


class NodeSelector(ApiModel):
    """Terms ORed. No term at all selects every cluster (the seeds' "empty selector")."""

    node_selector_terms: list[NodeSelectorTerm] = Field(default_factory=list)


class Taint(ApiModel):
    key: str
    value: str | None = None
    effect: Literal["NoSchedule", "PreferNoSchedule", "NoExecute"]


class Toleration(ApiModel):
    """A core Toleration: an empty key with `Exists` tolerates every taint, an empty effect every effect."""

    key: str | None = None
    operator: Literal["Exists", "Equal"] | None = None
    value: str | None = None
    effect: Literal["NoSchedule", "PreferNoSchedule", "NoExecute"] | None = None
    toleration_seconds: int | None = None


class Condition(ApiModel):
    type: str
    status: Literal["True", "False", "Unknown"]
    reason: str | None = None
    message: str | None = None
    last_transition_time: str | None = None
