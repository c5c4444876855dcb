"""Custom resource definitions the tests install: an open schema, as many operators' CRDs have."""

from __future__ import annotations

from typing import Any


def open_crd(group: str, kind: str, plural: str, *, status: bool) -> dict[str, Any]:
    """A namespaced CRD serving v1 that keeps any spec and status; `status`: with a status subresource."""
    open_object = {"type": "object", "x-kubernetes-preserve-unknown-fields": True}
    return {
        "apiVersion": "apiextensions.k8s.io/v1",
        "kind": "CustomResourceDefinition",
        "metadata": {"name": f"{plural}.{group}"},
        "spec": {
            "group": group,
            "scope": "Namespaced",
            "names": {"kind": kind, "plural": plural, "singular": kind.lower(), "listKind": f"{kind}List"},
            "versions": [
                {
                    "name": "v1",
                    "served": True,
                    "storage": True,
                    "schema": {
                        "openAPIV3Schema": {
                            "type": "object",
                            "properties": {"spec": open_object, "status": open_object},
                        }
                    },
                    **({"subresources": {"status": {}}} if status else {}),
                }
            ],
        },
    }
