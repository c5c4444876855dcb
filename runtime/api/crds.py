"""CustomResourceDefinitions generated from the pydantic models: the models are the only schema.

pydantic emits JSON Schema; Kubernetes wants a *structural* OpenAPI v3 schema: no `$ref`, no
`anyOf` with null (`nullable` instead), no titles, and explicit escape hatches for free-form parts.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from runtime.api import names
from runtime.api._base import CustomObject
from runtime.api.advertisement import ResourceAdvertisement
from runtime.api.namespacemap import NamespaceMap
from runtime.api.namespaceoffloading import NamespaceOffloading
from runtime.api.namespaceselector import NamespaceOffloadingSelector
from runtime.api.quota import Quota
from runtime.api.shadowpod import ShadowPod
from runtime.api.virtualnode import VirtualNode

HOME_KINDS: tuple[type[CustomObject], ...] = (NamespaceOffloading, VirtualNode, NamespaceOffloadingSelector)
FOREIGN_KINDS: tuple[type[CustomObject], ...] = (ShadowPod, NamespaceMap, ResourceAdvertisement, Quota)
ALL_KINDS = HOME_KINDS + FOREIGN_KINDS

_DROPPED_KEYS = {"title", "$defs"}


def _structural(node: Any, defs: dict[str, Any]) -> Any:
    if isinstance(node, list):
        return [_structural(item, defs) for item in node]
    if not isinstance(node, dict):
        return node
    if "$ref" in node:
        target = defs[node["$ref"].rsplit("/", 1)[-1]]
        merged = {**target, **{k: v for k, v in node.items() if k != "$ref"}}
        return _structural(merged, defs)
    options = node.get("anyOf")
    if options is not None:
        non_null = [o for o in options if o.get("type") != "null"]
        if len(non_null) == 1:
            rest = {k: v for k, v in node.items() if k != "anyOf"}
            out = _structural({**non_null[0], **rest}, defs)
            out["nullable"] = True
            return out
    out = {}
    for key, value in node.items():
        if key == "properties":  # field names, not schema keywords: a field may be called `default`
            out[key] = {name: _structural(field, defs) for name, field in value.items()}
            continue
        if key in _DROPPED_KEYS:
            continue
        if key == "default" and value is None:
            continue  # `null` defaults are what omission means already
        out[key] = value if key in ("enum", "default", "required") else _structural(value, defs)
    if out.get("type") == "object" and "properties" not in out and "additionalProperties" not in out:
        out["x-kubernetes-preserve-unknown-fields"] = True
    if out.get("x-kubernetes-preserve-unknown-fields"):
        out["type"] = "object"
        # `additionalProperties: true` would give every field an empty schema, which prunes what
        # nests inside it (a pod's containers would arrive as `{}`): preserving needs it absent.
        if out.get("additionalProperties") is True:
            del out["additionalProperties"]
    if "properties" in out and not out.get("required"):
        out.pop("required", None)
    return out


def openapi_schema(model: type[CustomObject]) -> dict[str, Any]:
    raw = model.model_json_schema(by_alias=True, mode="validation")
    defs = raw.get("$defs", {})
    schema: dict[str, Any] = _structural(raw, defs)
    properties = schema["properties"]
    # apiVersion, kind and metadata are the API server's to validate.
    properties["apiVersion"] = {"type": "string"}
    properties["kind"] = {"type": "string"}
    properties["metadata"] = {"type": "object"}
    for field in ("apiVersion", "kind"):
        properties[field].pop("default", None)
    schema.pop("required", None)
    if "spec" in (raw.get("required") or []):
        schema["required"] = ["spec"]
    if model.crd.description:
        schema["description"] = model.crd.description
    return schema


def crd_manifest(model: type[CustomObject]) -> dict[str, Any]:
    info = model.crd
    version: dict[str, Any] = {
        "name": names.VERSION,
        "served": True,
        "storage": True,
        "schema": {"openAPIV3Schema": openapi_schema(model)},
        "additionalPrinterColumns": [
            {
                "name": c.name,
                "type": c.type,
                "jsonPath": c.json_path,
                **({"priority": c.priority} if c.priority else {}),
            }
            for c in info.printer_columns
        ],
    }
    if "status" in model.model_fields:
        version["subresources"] = {"status": {}}
    return {
        "apiVersion": "apiextensions.k8s.io/v1",
        "kind": "CustomResourceDefinition",
        "metadata": {"name": info.name, "labels": {names.MANAGED_BY_LABEL: names.MANAGED_BY}},
        "spec": {
            "group": names.GROUP,
            "scope": info.scope,
            "names": {
                "kind": info.kind,
                "listKind": f"{info.kind}List",
                "plural": info.plural,
                "singular": info.singular,
                # an empty list the API server drops: declared, it would show as a change at every preview
                **({"shortNames": list(info.short_names)} if info.short_names else {}),
                "categories": ["liqo"],
            },
            "versions": [version],
        },
    }


def all_crd_manifests() -> list[dict[str, Any]]:
    return [crd_manifest(kind) for kind in ALL_KINDS]


def home_crd_manifests() -> list[dict[str, Any]]:
    return [crd_manifest(kind) for kind in HOME_KINDS]


def foreign_crd_manifests() -> list[dict[str, Any]]:
    return [crd_manifest(kind) for kind in FOREIGN_KINDS]


# -- any type's CRD as a cluster serves it (custom objects' reflection, and its preview) -----------


def crd_problem(crd: Mapping[str, Any] | None, version: str) -> str | None:
    """Why this CRD cannot carry objects of `version` (None: it can)."""
    if crd is None:
        return "no CustomResourceDefinition"
    conditions = (crd.get("status") or {}).get("conditions") or []
    if not any(c.get("type") == "Established" and c.get("status") == "True" for c in conditions):
        return "its CustomResourceDefinition is not Established yet"
    if crd.get("metadata", {}).get("deletionTimestamp"):
        return "its CustomResourceDefinition is being deleted"
    served = [v.get("name") for v in (crd.get("spec") or {}).get("versions") or [] if v.get("served")]
    if version not in served:
        return f"its CustomResourceDefinition does not serve {version} (serves {', '.join(served) or 'none'})"
    return None


def crd_kind(crd: Mapping[str, Any]) -> str:
    return str(crd["spec"]["names"]["kind"])


def reflection_problem(
    home: Mapping[str, Any] | None, foreign: Mapping[str, Any] | None, version: str
) -> tuple[str, str] | None:
    """Why objects of a custom type cannot be reflected between these two CRDs, and on which side
    ("home" or "foreign"); None: they can."""
    if (why := crd_problem(home, version)) is not None:
        return "home", why
    if (why := crd_problem(foreign, version)) is not None:
        return "foreign", why
    if foreign is not None and home is not None and crd_kind(foreign) != crd_kind(home):
        return "foreign", f"its kind is {crd_kind(foreign)}, {crd_kind(home)} at home"
    return None
