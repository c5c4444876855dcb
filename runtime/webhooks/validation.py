"""NamespaceOffloading admission rules (docs/offloading.md): what may be created, and what may never change."""

from __future__ import annotations

from typing import Any

from pydantic import ValidationError

from runtime.api import NamespaceMappingStrategy, NamespaceOffloadingSpec, names, twin_namespace_name


def validate_offloading(
    new: dict[str, Any], old: dict[str, Any] | None = None, *, namespace: str = "", home_cluster_id: str = ""
) -> list[str]:
    """Reasons to reject `new` (an update when `old` is given); empty when it is allowed.

    With the namespace and home cluster id, the twin name is checked too: a name no foreign
    cluster accepts would fail there, one cluster at a time, instead of here with what to do."""
    problems: list[str] = []
    meta = new.get("metadata") or {}
    if meta.get("name") != names.NAMESPACE_OFFLOADING_NAME:
        problems.append(
            f"metadata.name must be {names.NAMESPACE_OFFLOADING_NAME!r}: one NamespaceOffloading per namespace"
        )
    try:
        spec = NamespaceOffloadingSpec.model_validate(new.get("spec") or {})
    except ValidationError as err:
        return problems + [f"spec.{'.'.join(map(str, e['loc']))}: {e['msg']}" for e in err.errors()]
    strategy = spec.namespace_mapping_strategy
    if strategy is NamespaceMappingStrategy.SELECTED_NAME and not spec.remote_namespace_name:
        problems.append("spec.remoteNamespaceName is required with namespaceMappingStrategy SelectedName")
    elif strategy is NamespaceMappingStrategy.SELECTED_NAME and not names.is_dns_label(
        spec.remote_namespace_name or ""
    ):
        problems.append(f"spec.remoteNamespaceName {spec.remote_namespace_name!r} {names.DNS_LABEL_RULE}")
    elif namespace and home_cluster_id and strategy is not NamespaceMappingStrategy.SELECTED_NAME:
        twin = twin_namespace_name(namespace, strategy, home_cluster_id)
        if not names.is_dns_label(twin):
            problems.append(
                f"the twin namespace {twin!r} ({strategy.value}) {names.DNS_LABEL_RULE}: use "
                "namespaceMappingStrategy SelectedName with a shorter spec.remoteNamespaceName"
            )
    if old is not None:
        before = NamespaceOffloadingSpec.model_validate(old.get("spec") or {})
        if before.namespace_mapping_strategy != spec.namespace_mapping_strategy:
            problems.append(
                f"spec.namespaceMappingStrategy is immutable ({before.namespace_mapping_strategy.value}): "
                "unoffload the namespace, then offload it again with the new strategy"
            )
        if before.remote_namespace_name != spec.remote_namespace_name:
            problems.append("spec.remoteNamespaceName is immutable: unoffload the namespace, then offload it again")
    return problems
