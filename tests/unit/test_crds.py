"""CRDs generated from the pydantic models: names, versions, structural schemas, seed manifests."""

from __future__ import annotations

import json
from collections.abc import Iterator
from typing import Any

import pytest

from runtime.api import (
    ALL_KINDS,
    NamespaceMappingStrategy,
    NamespaceOffloading,
    PodOffloadingStrategy,
    all_crd_manifests,
    foreign_crd_manifests,
    home_crd_manifests,
)

GROUP = "offloading.liqo.io"

# kind -> (plural, short names, has a status subresource, spec required)
EXPECTED = {
    "NamespaceOffloading": ("namespaceoffloadings", ["nso", "nsoff"], True, False),
    "VirtualNode": ("virtualnodes", ["vn"], True, True),
    "ShadowPod": ("shadowpods", ["shpod"], True, True),
    "NamespaceMap": ("namespacemaps", ["nm"], True, False),
    "ResourceAdvertisement": ("resourceadvertisements", ["adv"], False, True),
    "NamespaceOffloadingSelector": ("namespaceoffloadingselectors", ["nsosel"], True, True),
    "Quota": ("quotas", [], False, False),
}
CLUSTER_SCOPED = {"NamespaceOffloadingSelector"}  # it matches namespaces cluster-wide

CRDS = {crd["spec"]["names"]["kind"]: crd for crd in all_crd_manifests()}


def version_of(crd: dict[str, Any]) -> dict[str, Any]:
    versions = crd["spec"]["versions"]
    assert len(versions) == 1
    version: dict[str, Any] = versions[0]
    return version


def schema_of(kind: str) -> dict[str, Any]:
    schema: dict[str, Any] = version_of(CRDS[kind])["schema"]["openAPIV3Schema"]
    return schema


def nodes(node: dict[str, Any], path: str = "") -> Iterator[tuple[str, dict[str, Any]]]:
    """Every schema node under `node`, with a readable path."""
    yield path or "<root>", node
    for name, child in (node.get("properties") or {}).items():
        yield from nodes(child, f"{path}.{name}")
    if isinstance(node.get("items"), dict):
        yield from nodes(node["items"], f"{path}[]")
    if isinstance(node.get("additionalProperties"), dict):
        yield from nodes(node["additionalProperties"], f"{path}{{}}")


def at(schema: dict[str, Any], dotted: str) -> dict[str, Any]:
    node = schema
    for part in dotted.split("."):
        node = node["properties"][part]
    return node


def resolves(schema: dict[str, Any], dotted: str) -> bool:
    """Whether a printer column's path names a field of the schema (map values included)."""
    node = schema
    for part in dotted.split("."):
        if part in (node.get("properties") or {}):
            node = node["properties"][part]
        elif isinstance(node.get("additionalProperties"), dict):
            node = node["additionalProperties"]
        else:
            return False
    return True


def test_one_crd_per_kind_in_the_group() -> None:
    crds = all_crd_manifests()
    assert [crd["spec"]["names"]["kind"] for crd in crds] == [model.crd.kind for model in ALL_KINDS]
    assert sorted(CRDS) == sorted(EXPECTED)
    for crd in crds:
        assert crd["apiVersion"] == "apiextensions.k8s.io/v1"
        assert crd["kind"] == "CustomResourceDefinition"
        assert crd["spec"]["group"] == GROUP
        assert crd["spec"]["scope"] == ("Cluster" if crd["spec"]["names"]["kind"] in CLUSTER_SCOPED else "Namespaced")
        assert crd["metadata"]["name"] == f"{crd['spec']['names']['plural']}.{GROUP}"
        assert crd["metadata"]["labels"] == {"app.kubernetes.io/managed-by": "liqo-stack"}


@pytest.mark.parametrize("kind", sorted(EXPECTED))
def test_names(kind: str) -> None:
    plural, short_names, _, _ = EXPECTED[kind]
    assert CRDS[kind]["spec"]["names"] == {
        "kind": kind,
        "listKind": f"{kind}List",
        "plural": plural,
        "singular": kind.lower(),
        **({"shortNames": short_names} if short_names else {}),  # an empty list would drift (dropped)
        "categories": ["liqo"],
    }


def test_short_names_are_unique() -> None:
    short = [name for crd in CRDS.values() for name in crd["spec"]["names"].get("shortNames", [])]
    assert len(short) == len(set(short))


@pytest.mark.parametrize("kind", sorted(EXPECTED))
def test_v1beta1_is_served_and_stored(kind: str) -> None:
    version = version_of(CRDS[kind])
    assert (version["name"], version["served"], version["storage"]) == ("v1beta1", True, True)


@pytest.mark.parametrize("kind", sorted(EXPECTED))
def test_status_subresource_exactly_when_the_model_has_status(kind: str) -> None:
    _, _, has_status, _ = EXPECTED[kind]
    version = version_of(CRDS[kind])
    if has_status:
        assert version["subresources"] == {"status": {}}
        assert "status" in schema_of(kind)["properties"]
    else:
        assert "subresources" not in version
        assert "status" not in schema_of(kind)["properties"]


@pytest.mark.parametrize("kind", sorted(EXPECTED))
def test_printer_columns(kind: str) -> None:
    columns = version_of(CRDS[kind])["additionalPrinterColumns"]
    assert columns, "every kind prints at least one column"
    assert columns[-1] == {"name": "Age", "type": "date", "jsonPath": ".metadata.creationTimestamp"}
    schema = schema_of(kind)
    for column in columns:
        assert set(column) <= {"name", "type", "jsonPath", "priority"}
        assert column["type"] in {"string", "integer", "number", "boolean", "date"}
        path = column["jsonPath"]
        assert path.startswith(".")
        if path.startswith((".spec.", ".status.")):
            assert resolves(schema, path[1:]), f"{path}: the column reads a field the schema does not define"


def test_namespace_offloading_columns() -> None:
    assert version_of(CRDS["NamespaceOffloading"])["additionalPrinterColumns"] == [
        {"name": "NamespaceMappingStrategy", "type": "string", "jsonPath": ".spec.namespaceMappingStrategy"},
        {"name": "PodOffloadingStrategy", "type": "string", "jsonPath": ".spec.podOffloadingStrategy"},
        {"name": "OffloadingPhase", "type": "string", "jsonPath": ".status.offloadingPhase"},
        {"name": "RemoteNamespace", "type": "string", "jsonPath": ".status.remoteNamespaceName", "priority": 1},
        {"name": "Age", "type": "date", "jsonPath": ".metadata.creationTimestamp"},
    ]


# -- structural schemas -----------------------------------------------------------------------


@pytest.mark.parametrize("kind", sorted(EXPECTED))
def test_schema_is_structural(kind: str) -> None:
    schema = schema_of(kind)
    text = json.dumps(schema)
    for forbidden in ('"$ref"', '"$defs"', '"anyOf"', '"allOf"', '"oneOf"', '"not"', '"title"', '"const"'):
        assert forbidden not in text, forbidden
    for path, node in nodes(schema):
        assert "type" in node, f"{path}: every node needs a type"
        if "properties" in node:
            assert node["type"] == "object", path
            assert "additionalProperties" not in node, f"{path}: properties and additionalProperties exclude"
        if node["type"] == "array":
            assert isinstance(node.get("items"), dict), f"{path}: an array needs items"
        if node.get("x-kubernetes-preserve-unknown-fields"):
            assert node["type"] == "object", path
        if "required" in node:
            assert node["required"], f"{path}: an empty required list"
            assert set(node["required"]) <= set(node.get("properties") or {}), path
        if "default" in node:
            assert node["default"] is not None, path
        if "enum" in node:
            assert node.get("default", node["enum"][0]) in node["enum"], path


@pytest.mark.parametrize("kind", sorted(EXPECTED))
def test_schema_root(kind: str) -> None:
    _, _, _, spec_required = EXPECTED[kind]
    schema = schema_of(kind)
    assert schema["type"] == "object"
    assert schema["description"]
    properties = schema["properties"]
    assert properties["apiVersion"] == {"type": "string"}
    assert properties["kind"] == {"type": "string"}
    assert properties["metadata"] == {"type": "object"}
    assert properties["spec"]["type"] == "object"
    assert schema.get("required") == (["spec"] if spec_required else None)


def test_namespace_offloading_schema() -> None:
    spec = at(schema_of("NamespaceOffloading"), "spec")
    mapping = spec["properties"]["namespaceMappingStrategy"]
    assert mapping["type"] == "string"
    assert mapping["enum"] == ["DefaultName", "EnforceSameName", "SelectedName"]
    assert mapping["default"] == "DefaultName"
    pods = spec["properties"]["podOffloadingStrategy"]
    assert pods["type"] == "string"
    assert pods["enum"] == ["LocalAndRemote", "Local", "Remote"]
    assert pods["default"] == "LocalAndRemote"
    assert spec["properties"]["remoteNamespaceName"] == {"type": "string", "nullable": True}

    terms = at(spec, "clusterSelector.nodeSelectorTerms")
    assert terms["type"] == "array"
    expression = terms["items"]["properties"]["matchExpressions"]["items"]
    assert expression["required"] == ["key", "operator"]
    assert expression["properties"]["operator"]["enum"] == ["In", "NotIn", "Exists", "DoesNotExist", "Gt", "Lt"]
    assert expression["properties"]["values"] == {"type": "array", "items": {"type": "string"}, "nullable": True}


def test_namespace_offloading_status_schema() -> None:
    status = at(schema_of("NamespaceOffloading"), "status")
    assert status["nullable"] is True
    assert status["properties"]["offloadingPhase"]["enum"] == [
        "Ready",
        "NoClusterSelected",
        "InProgress",
        "SomeFailed",
        "AllFailed",
        "Terminating",
    ]
    conditions = status["properties"]["remoteNamespacesConditions"]
    assert conditions["type"] == "object"
    assert conditions["additionalProperties"]["type"] == "array"
    assert conditions["additionalProperties"]["items"]["properties"]["status"]["enum"] == ["True", "False", "Unknown"]


def test_shadow_pod_spec_preserves_the_pod() -> None:
    spec = at(schema_of("ShadowPod"), "spec")
    assert spec["required"] == ["pod"]
    pod = spec["properties"]["pod"]
    assert pod["type"] == "object"
    assert pod["x-kubernetes-preserve-unknown-fields"] is True


def test_virtual_node_spec_schema() -> None:
    spec = at(schema_of("VirtualNode"), "spec")
    assert spec["required"] == ["clusterID"]
    sharing = spec["properties"]["sharingPercentage"]
    assert (sharing["type"], sharing["minimum"], sharing["maximum"], sharing["default"]) == ("integer", 1, 100, 90)
    assert spec["properties"]["labels"] == {"type": "object", "additionalProperties": {"type": "string"}}
    taint = spec["properties"]["taints"]["items"]
    assert taint["properties"]["effect"]["enum"] == ["NoSchedule", "PreferNoSchedule", "NoExecute"]
    reflector = spec["properties"]["reflection"]["additionalProperties"]
    assert reflector["properties"]["type"]["enum"] == ["DenyList", "AllowList"]
    assert reflector["properties"]["workers"]["minimum"] == 0


def test_resource_advertisement_uses_cluster_id_alias() -> None:
    spec = at(schema_of("ResourceAdvertisement"), "spec")
    assert spec["required"] == ["clusterID"]
    assert spec["properties"]["resources"] == {"type": "object", "additionalProperties": {"type": "string"}}


# -- seed manifests validate with the models --------------------------------------------------

SEED_NAMESPACE_OFFLOADING: dict[str, Any] = {
    "apiVersion": "offloading.liqo.io/v1beta1",
    "kind": "NamespaceOffloading",
    "metadata": {"name": "offloading", "namespace": "foo", "creationTimestamp": None},
    "spec": {
        "clusterSelector": {"nodeSelectorTerms": []},
        "namespaceMappingStrategy": "DefaultName",
        "podOffloadingStrategy": "LocalAndRemote",
    },
    "status": {},
}


def test_seed_namespace_offloading_validates() -> None:
    obj = NamespaceOffloading.model_validate(SEED_NAMESPACE_OFFLOADING)
    assert (obj.api_version, obj.kind) == ("offloading.liqo.io/v1beta1", "NamespaceOffloading")
    assert (obj.metadata.name, obj.metadata.namespace) == ("offloading", "foo")
    assert obj.spec.namespace_mapping_strategy is NamespaceMappingStrategy.DEFAULT_NAME
    assert obj.spec.pod_offloading_strategy is PodOffloadingStrategy.LOCAL_AND_REMOTE
    assert obj.spec.cluster_selector.node_selector_terms == []
    assert obj.spec.remote_namespace_name is None
    assert obj.status is not None
    assert obj.status.offloading_phase is None
    assert obj.to_wire() == {
        "apiVersion": "offloading.liqo.io/v1beta1",
        "kind": "NamespaceOffloading",
        "metadata": {"name": "offloading", "namespace": "foo"},
        "spec": {
            "clusterSelector": {"nodeSelectorTerms": []},
            "namespaceMappingStrategy": "DefaultName",
            "podOffloadingStrategy": "LocalAndRemote",
        },
        "status": {},
    }


def test_model_defaults_match_the_crd_defaults() -> None:
    obj = NamespaceOffloading.model_validate({"metadata": {"name": "offloading", "namespace": "foo"}})
    spec = at(schema_of("NamespaceOffloading"), "spec")
    assert obj.kind == "NamespaceOffloading"
    assert obj.api_version == "offloading.liqo.io/v1beta1"
    assert obj.spec.namespace_mapping_strategy.value == spec["properties"]["namespaceMappingStrategy"]["default"]
    assert obj.spec.pod_offloading_strategy.value == spec["properties"]["podOffloadingStrategy"]["default"]


# -- home / foreign split ---------------------------------------------------------------------


def plurals(crds: list[dict[str, Any]]) -> list[str]:
    return [crd["spec"]["names"]["plural"] for crd in crds]


def test_home_and_foreign_split() -> None:
    home = plurals(home_crd_manifests())
    foreign = plurals(foreign_crd_manifests())
    assert home == ["namespaceoffloadings", "virtualnodes", "namespaceoffloadingselectors"]
    assert foreign == ["shadowpods", "namespacemaps", "resourceadvertisements", "quotas"]
    assert sorted(home + foreign) == sorted(plurals(all_crd_manifests()))


def test_split_manifests_equal_the_full_ones() -> None:
    assert home_crd_manifests() + foreign_crd_manifests() == all_crd_manifests()


def test_a_shadowpods_pod_is_preserved_whole() -> None:
    # additionalProperties next to preserve-unknown-fields makes the API server prune nested fields
    from runtime.api import ShadowPod
    from runtime.api.crds import openapi_schema

    pod = openapi_schema(ShadowPod)["properties"]["spec"]["properties"]["pod"]
    assert pod == {"type": "object", "x-kubernetes-preserve-unknown-fields": True, "x-kubernetes-map-type": "atomic"}
