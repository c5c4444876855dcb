"""Custom resources' copies (docs/reflection.md, issue 39): what a custom object's copy takes from
home, whether its type's status can come back, and the VirtualNode's `CustomResourcesReflected`
condition (runtime/reflection/custom.py reflects them). Pure functions on wire-format dicts."""

from __future__ import annotations

import copy
from collections.abc import Mapping
from typing import Any

from runtime.api import names
from runtime.api.virtualnode import CustomResourceReflection

CRD_MISSING_REASON = "CustomResourceDefinitionMissing"
REFLECTED_REASON = "Reflected"
# what a custom object's copy never takes from home: the API server's and the foreign operator's
NOT_REFLECTED_FIELDS = ("apiVersion", "kind", "metadata", "status")


def custom_content(obj: Mapping[str, Any], _: str = "") -> dict[str, Any]:
    """Every field but status (and metadata, which the copy forges): spec and whatever else the type has."""
    return {key: copy.deepcopy(value) for key, value in obj.items() if key not in NOT_REFLECTED_FIELDS}


def has_status_subresource(crd: Mapping[str, Any], version: str) -> bool:
    """The CRD serves `version` with a status subresource: the only way a status can be written back."""
    for served in (crd.get("spec") or {}).get("versions") or []:
        if served.get("name") == version:
            return "status" in (served.get("subresources") or {})
    return False


def reflected_condition(
    entries: Mapping[str, CustomResourceReflection], problems: Mapping[str, str], no_status_subresource: list[str]
) -> dict[str, str] | None:
    """The VirtualNode's `CustomResourcesReflected` condition (None: no type opted in, no condition):
    False naming each CRD missing or unfit and why; True naming the types reflected, and those whose
    status was asked for but cannot come back (`no_status_subresource`: no status subresource at home)."""
    if not entries:
        return None
    if problems:
        missing = "; ".join(f"{name}: {problems[name]}" for name in sorted(problems))
        return {
            "type": names.CUSTOM_RESOURCES_REFLECTED_CONDITION,
            "status": "False",
            "reason": CRD_MISSING_REASON,
            "message": f"not reflected, until their CustomResourceDefinitions are there: {missing}",
        }
    message = "reflected: " + ", ".join(sorted(entries))
    status_stays = sorted(name for name in no_status_subresource if name in entries and entries[name].reflect_status)
    if status_stays:
        message += (
            f"; reflectStatus has no effect for {', '.join(status_stays)}: their home CustomResourceDefinition has "
            "no status subresource, so their status stays in the foreign cluster"
        )
    return {
        "type": names.CUSTOM_RESOURCES_REFLECTED_CONDITION,
        "status": "True",
        "reason": REFLECTED_REASON,
        "message": message,
    }
