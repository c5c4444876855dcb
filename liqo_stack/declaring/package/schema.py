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
from liqo_stack.declaring.package.parts import (
    ForeignSideSettings,
    HomeSettings,
    OffloadedNamespaceSettings,
    PeeringSettings,
)

PACKAGE = "liqo-stack"
VERSION = metadata.version(PACKAGE)  # pyproject.toml's
STACK = f"{PACKAGE}:index:Stack"
HOME = f"{PACKAGE}:index:Home"
PEERING = f"{PACKAGE}:index:Peering"
FOREIGN_SIDE = f"{PACKAGE}:index:ForeignSide"
OFFLOADED_NAMESPACE = f"{PACKAGE}:index:OffloadedNamespace"
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


_SETTINGS_OUTPUT = {
    "type": "object",
    "additionalProperties": {"$ref": ANY},
    "description": "the properties the component was declared from (kubeconfig contents left out)",
}
# Each part component's outputs (liqo_stack/declaring/package/components.py).
PART_OUTPUTS: dict[str, dict[str, Any]] = {
    HOME: {
        "homeClusterId": OUTPUTS["homeClusterId"],
        "runtimeMode": OUTPUTS["runtimeMode"],
        "controlPlane": {
            "type": "array",
            "items": {"type": "string"},
            "description": "the URNs of the home control plane's resources (namespace, controller-manager, CRDs, "
            "webhooks): a Peering's `controlPlane`, which it is made after and removed before",
        },
        SETTINGS: _SETTINGS_OUTPUT
        | {"description": "the home settings it was declared from (kubeconfig contents left out): a Peering's `home`"},
    },
    PEERING: {
        "clusterId": {"type": "string", "description": "the foreign cluster's id"},
        "foreignCluster": {
            "type": "object",
            "additionalProperties": {"$ref": ANY},
            "description": "its virtual node(s), labels, taints, capacity and pod network: its entry of a Stack's "
            "`foreignClusters` output, which an OffloadedNamespace's `offeredClusters` takes",
        },
        SETTINGS: _SETTINGS_OUTPUT,
    },
    FOREIGN_SIDE: {
        "foreignCluster": {"type": "string", "description": "the foreign cluster's id"},
        "homeIdentities": {
            "type": "object",
            "additionalProperties": {"type": "string"},
            "secret": True,
            "description": "per home cluster id: the kubeconfig of the identity issued to it, which its Peering "
            "takes as `foreignCluster.identityKubeconfig`",
        },
        SETTINGS: _SETTINGS_OUTPUT,
    },
    OFFLOADED_NAMESPACE: {
        "namespace": {"type": "string", "description": "the offloaded namespace"},
        "plan": {
            "type": "object",
            "additionalProperties": {"$ref": ANY},
            "description": "its strategies, its twin namespace's name and, with offeredClusters, the clusters "
            "it selects",
        },
        SETTINGS: _SETTINGS_OUTPUT,
    },
}
SECRET_OUTPUTS = frozenset({"homeIdentities"})
PART_MODELS: dict[str, Any] = {
    HOME: HomeSettings,
    PEERING: PeeringSettings,
    FOREIGN_SIDE: ForeignSideSettings,
    OFFLOADED_NAMESPACE: OffloadedNamespaceSettings,
}

PART_DESCRIPTIONS = {
    HOME: "The installation at home: the home control plane (CRDs, controller-manager, webhooks), from the home "
    "settings of the `liqo:` config (docs/configuration.md) without foreign clusters and namespaces.",
    PEERING: "One foreign cluster's peering with a Home of the same stack: its virtual node and virtual kubelet, "
    "and with an admin kubeconfig its side there too (one-stack form); with an `identityKubeconfig` issued by "
    "that cluster's ForeignSide, nothing there (split form).",
    FOREIGN_SIDE: "A foreign cluster's own half (`liqo:foreignSide`), for one or more homes: its agent and "
    "admission policy, and per home a tenant, an identity (output `homeIdentities`), a floor and a grant.",
    OFFLOADED_NAMESPACE: "One namespace offloaded by an application team's stack, with its strategies and "
    "cluster selector, given only a provider of the home cluster (`providers.<home cluster id>`).",
}

PROVIDERS_INPUT = {
    "type": "object",
    "additionalProperties": {"$ref": KUBERNETES_PROVIDER},
    "description": "a program's own kubernetes.Provider per cluster id, used instead of a kubeconfig for "
    "that cluster; give it clusterIdentifier = the cluster id, server-side apply and mutable Secrets "
    "and ConfigMaps, as the stack's own (docs/package.md)",
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
    types = _types_of(config)
    stack = _object_type(config)
    inputs = stack["properties"] | {"providers": PROVIDERS_INPUT}
    parts = {}
    for token, model in PART_MODELS.items():
        part = model.model_json_schema(by_alias=True, mode="validation")
        types |= _types_of(part)
        found = _object_type(part)
        parts[token] = {
            "isComponent": True,
            "description": PART_DESCRIPTIONS[token],
            "inputProperties": found["properties"] | {"providers": PROVIDERS_INPUT},
            "requiredInputs": found.get("required", []),
            "properties": PART_OUTPUTS[token],
            "required": sorted(PART_OUTPUTS[token]),
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
            },
            **parts,
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


def _types_of(schema: dict[str, Any]) -> dict[str, Any]:
    return {
        type_token(name): _enum_type(definition) if "enum" in definition else _object_type(definition)
        for name, definition in sorted(schema.get("$defs", {}).items())
    }


def schema_text() -> str:
    """The schema as `package/schema.json` holds it."""
    return json.dumps(package_schema(), indent=2, sort_keys=True) + "\n"
