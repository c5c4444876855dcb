"""NamespaceOffloading admission rules (seed 003): what may be created, and what may never change."""

from __future__ import annotations

from typing import Any

from pydantic import ValidationError

from runtime.api import NamespaceMappingStrategy, NamespaceOffloadingSpec, names


def validate_offloading(new: dict[str, Any], old: dict[str, Any] | None = None) -> list[str]:
    """Reasons to reject `new` (an update when `old` is given); empty when it is allowed."""
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
    if spec.namespace_mapping_strategy is NamespaceMappingStrategy.SELECTED_NAME and not spec.remote_namespace_name:
        problems.append("spec.remoteNamespaceName is required with namespaceMappingStrategy SelectedName")
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
