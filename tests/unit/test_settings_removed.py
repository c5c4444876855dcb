"""A setting taken out of the stack leaves its object as it was before the setting was made.

Server-side apply prunes what a field manager no longer declares; a map it sends empty, after it
had filled it, comes back null, which our CRD schemas refuse (`spec.resources in body must be of
type object`). So the custom objects the stack declares carry no empty map: left out, the field
goes whole. tests/e2e/test_foreign_guards.py checks it with `pulumi up` against the API server.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pulumi

from liqo_stack.declaring import manifests
from liqo_stack.declaring.config import GrantConfig
from runtime.api import NamespaceOffloadingSpec, VirtualNodeSpec, names
from runtime.api.core import NodeSelector
from runtime.api.namespaceselector import LabelSelector, NamespaceOffloadingSelectorSpec
from runtime.api.quota import QuotaSpec
from runtime.api.virtualnode import OffloadingPatch, ReflectorSettings
from tests.unit.test_components import RecordingMocks, mocks, run_program, stack_config  # noqa: F401


def empty_maps(value: Any, path: str = "") -> list[str]:
    """Where `value` holds an empty map, as dotted paths."""
    if isinstance(value, dict):
        if not value:
            return [path or "."]
        return [found for key, item in value.items() for found in empty_maps(item, f"{path}.{key}")]
    return []


def test_a_grant_taken_out_is_left_out_of_the_quota_not_sent_empty() -> None:
    granted = manifests.quota("home", GrantConfig(resources={"cpu": "8"}).quota(), "peering")
    assert granted["spec"]["resources"] == {"cpu": "8"}
    taken_out = manifests.quota("home", GrantConfig().quota(), "peering")
    assert "resources" not in taken_out["spec"]
    assert taken_out == manifests.quota("home", QuotaSpec(), "peering"), "as if never granted"
    assert taken_out["spec"] == {
        "user": names.home_identity_username("home"),
        "limitsEnforcement": "Soft",
        "cordoned": False,
    }


def test_the_apply_form_drops_empty_maps_of_optional_fields_at_any_depth_and_keeps_the_rest() -> None:
    spec = VirtualNodeSpec(
        clusterID="foreign-1",
        offloading_patch=OffloadingPatch(node_selector={}),  # empty inside an optional model: both go
        reflection={"configmap": ReflectorSettings()},
    )
    applied = spec.to_apply()
    assert "fixedResources" not in applied and "labels" not in applied and "offloadingPatch" not in applied
    assert applied["reflection"] == {"configmap": {"type": "DenyList", "workers": 3}}
    assert applied["taints"] == [] and applied["storageClasses"] == [], "lists are atomic in our CRDs: kept"
    assert applied["healthCheck"] == {"intervalSeconds": 10, "failureThreshold": 3}
    assert spec.to_wire()["fixedResources"] == {}, "the wire form itself is unchanged"
    # a required map stays, even empty: leaving it out would make the object invalid
    selector = NamespaceOffloadingSelectorSpec(namespace_selector=LabelSelector(match_labels={}))
    assert selector.to_apply()["namespaceSelector"] == {}
    # an empty NodeSelector still says something (no term): it is not a map with nothing in it
    offloading = NamespaceOffloadingSpec(cluster_selector=NodeSelector())
    assert offloading.to_apply()["clusterSelector"] == {"nodeSelectorTerms": []}


def with_every_optional_map(tmp_path: Path) -> dict[str, Any]:
    """The unit stack's config, with each setting that fills a map of a custom object."""
    config = stack_config(tmp_path)
    foreign = json.loads(config["liqo:foreignClusters"])
    foreign[0]["fixedResources"] = {"nvidia.com/gpu": "1"}
    foreign[0]["grant"] = {"resources": {"cpu": "8", "memory": "16Gi"}}
    foreign[1]["virtualNodes"] = [{"name": "gpu", "nodeSelector": {"pool": "gpu"}, "labels": {"pool": "gpu"}}]
    config["liqo:foreignClusters"] = json.dumps(foreign)
    config["liqo:reflection"] = json.dumps({"skipLabels": ["team"], "skipAnnotations": ["note"]})
    config["liqo:namespaceSelectors"] = json.dumps([{"name": "shop", "selector": "team=shop"}])
    return config


def custom_objects(recorded: RecordingMocks) -> dict[tuple[str, str, str], dict[str, Any]]:
    """The objects of our CRDs the program declared, by (cluster, kind, name)."""
    return {
        (recorded.cluster_of(r), r.inputs["kind"], r.inputs["metadata"]["name"]): r.inputs
        for r in recorded.objects()
        if str(r.inputs.get("apiVersion", "")).startswith(f"{names.GROUP}/")
    }


def test_no_custom_object_the_stack_declares_carries_an_empty_map_with_or_without_its_settings(
    mocks: RecordingMocks,  # noqa: F811
    tmp_path: Path,
) -> None:
    run_program()
    without = custom_objects(mocks)
    mocks.resources.clear()
    pulumi.runtime.set_all_config(with_every_optional_map(tmp_path))
    run_program()
    with_settings = custom_objects(mocks)

    kinds = {kind for _, kind, _ in with_settings}
    assert kinds == {"VirtualNode", "NamespaceOffloading", "NamespaceOffloadingSelector", "Quota"}, kinds
    for key, obj in [*without.items(), *with_settings.items()]:
        assert empty_maps(obj["spec"]) == [], f"{key}: empty maps the API server would turn into null"
    quota, node = ("foreign-1", "Quota", "home"), ("home", "VirtualNode", "liqo-foreign-1")
    assert with_settings[quota]["spec"]["resources"] == {"cpu": "8", "memory": "16Gi"}
    assert with_settings[node]["spec"]["fixedResources"] == {"nvidia.com/gpu": "1"}
    assert with_settings[node]["spec"]["offloadingPatch"] == {
        "labelsNotReflected": ["team"],
        "annotationsNotReflected": ["note"],
    }
    assert "resources" not in without[quota]["spec"]
    assert "fixedResources" not in without[node]["spec"] and "offloadingPatch" not in without[node]["spec"]
