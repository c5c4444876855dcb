"""The Pulumi package schema of liqo-stack, generated from the pydantic models of the stack config.

One source of truth: the `Stack` component's inputs are the `liqo:` settings (liqo_stack/config.py,
docs/configuration.md), with the same names, types, descriptions and secrets. `package/schema.json`
is this schema written out for readers and for `pulumi package add ./package/schema.json`-style
tooling; tests/unit/test_package.py fails when it is stale (`python -m liqo_stack.declaring.package schema`
rewrites it).
"""

from __future__ import annotations

import json
from importlib import metadata
from typing import Any

from liqo_stack.declaring.config import StackConfig

PACKAGE = "liqo-stack"
VERSION = metadata.version(PACKAGE)  # pyproject.toml's
STACK = f"{PACKAGE}:index:Stack"
# pulumi-kubernetes, whose provider resources a program may pass (`providers`): the version the stack
# runs with (pinned in pyproject.toml; tools/toolchain.toml builds its plugin at that release).
KUBERNETES_VERSION = metadata.version("pulumi-kubernetes")
KUBERNETES_PROVIDER = f"/kubernetes/v{KUBERNETES_VERSION}/schema.json#/provider"
ANY = "pulumi.json#/Any"

# Settings that hold credentials: secret in every SDK and in the state.
SECRET_PROPERTIES = frozenset({"kubeconfig", "identityKubeconfig"})

STACK_DESCRIPTION = (
    "A home cluster extended onto foreign clusters: the home control plane, one peering (virtual node, "
    "virtual kubelet, foreign agent) per foreign cluster, and the offloaded namespaces. Its properties are "
    "the `liqo:` settings of docs/configuration.md; `providers` lets a program pass its own "
    "`kubernetes.Provider` per cluster id instead of a kubeconfig."
)
SETTINGS = "settings"
OUTPUTS: dict[str, dict[str, Any]] = {
    # stack_plan (liqo_stack/plan.py), as the Python stack exports it
    "homeClusterId": {"type": "string", "description": "the home cluster's id"},
    "runtimeMode": {"type": "string", "description": "how the runtime runs: cluster or external"},
    "foreignClusters": {
        "type": "object",
        "additionalProperties": {"$ref": ANY},
        "description": "per foreign cluster id: its virtual node(s), labels, taints, capacity and pod network",
    },
    "namespaces": {
        "type": "object",
        "additionalProperties": {"$ref": ANY},
        "description": "per offloaded namespace: its strategies and its twin namespace in each cluster",
    },
    SETTINGS: {
        "type": "object",
        "additionalProperties": {"$ref": ANY},
        "description": "the settings the component declared the stack from (kubeconfig contents left out): what "
        "the policy pack checks, as it checks a Python stack's `liqo:` config",
    },
}


def type_token(definition: str) -> str:
    """A config model's Pulumi type: `ForeignCluster`, `NamespaceOffloadingConfig` -> `NamespaceOffloading`."""
    return f"{PACKAGE}:index:{definition.removesuffix('Config')}"


def _property(schema: dict[str, Any]) -> dict[str, Any]:
    """A JSON schema of pydantic's (one property) as a Pulumi schema property."""
    found: dict[str, Any] = {}
    if "description" in schema:
        found["description"] = schema["description"]
    branches = [b for b in schema.get("anyOf", []) if b.get("type") != "null"]
    if branches:  # `X | None` is X, not required; `A | B` is a union
        if len(branches) == 1:
            return found | _property(branches[0])
        return found | {"oneOf": [_property(b) for b in branches]}
    if "$ref" in schema:
        return found | {"$ref": "#/types/" + type_token(schema["$ref"].removeprefix("#/$defs/"))}
    kind = schema.get("type")
    if kind == "array":
        return found | {"type": "array", "items": _property(schema.get("items", {}))}
    if kind == "object":
        values = schema.get("additionalProperties")
        return found | {"type": "object", "additionalProperties": _property(values if isinstance(values, dict) else {})}
    if kind in ("string", "integer", "number", "boolean"):
        return found | {"type": kind}
    return found | {"$ref": ANY}


def _object_type(schema: dict[str, Any]) -> dict[str, Any]:
    properties = {}
    for name, field in schema.get("properties", {}).items():
        properties[name] = _property(field) | ({"secret": True} if name in SECRET_PROPERTIES else {})
    found: dict[str, Any] = {"type": "object", "properties": properties}
    if schema.get("required"):
        found["required"] = sorted(schema["required"])
    if "description" in schema:
        found["description"] = schema["description"]
    return found


def _enum_type(schema: dict[str, Any]) -> dict[str, Any]:
    found: dict[str, Any] = {"type": "string", "enum": [{"value": value} for value in schema["enum"]]}
    if "description" in schema:
        found["description"] = schema["description"]
    return found


def package_schema() -> dict[str, Any]:
    """The package's schema: the `Stack` component and the config's object and enum types."""
    config = StackConfig.model_json_schema(by_alias=True, mode="validation")
    types = {
        type_token(name): _enum_type(definition) if "enum" in definition else _object_type(definition)
        for name, definition in sorted(config.get("$defs", {}).items())
    }
    stack = _object_type(config)
    inputs = stack["properties"] | {
        "providers": {
            "type": "object",
            "additionalProperties": {"$ref": KUBERNETES_PROVIDER},
            "description": "a program's own kubernetes.Provider per cluster id, used instead of a kubeconfig for "
            "that cluster; give it clusterIdentifier = the cluster id, server-side apply and mutable Secrets "
            "and ConfigMaps, as the stack's own (docs/package.md)",
        }
    }
    return {
        "name": PACKAGE,
        "displayName": "liqo-stack",
        "version": VERSION,
        "description": "Extend a Kubernetes cluster onto others through virtual nodes (Liqo's model), declared "
        "with Pulumi.",
        "keywords": ["kubernetes", "multi-cluster", "liqo", "category/cloud", "kind/component"],
        "license": "Apache-2.0",
        "resources": {
            STACK: {
                "isComponent": True,
                "description": STACK_DESCRIPTION,
                "inputProperties": inputs,
                "requiredInputs": stack.get("required", []),
                "properties": OUTPUTS,
                "required": sorted(OUTPUTS),
            }
        },
        "types": types,
        "language": {
            "nodejs": {
                "packageName": "liqo-stack",
                "dependencies": {"@pulumi/kubernetes": KUBERNETES_VERSION},
                "respectSchemaVersion": True,
            },
            "python": {"requires": {"pulumi-kubernetes": f"=={KUBERNETES_VERSION}"}, "respectSchemaVersion": True},
        },
    }


def schema_text() -> str:
    """The schema as `package/schema.json` holds it."""
    return json.dumps(package_schema(), indent=2, sort_keys=True) + "\n"
