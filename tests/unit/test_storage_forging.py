"""docs/reflection.md's storage fabric, the pure parts: which claims a virtual kubelet provisions, the remote
claim, the home PV, the StorageClass and settings the stack installs for it."""

from __future__ import annotations

from typing import Any

import pytest

from liqo_stack.declaring import manifests
from liqo_stack.declaring.config import ConfigError, parse
from runtime.api import VirtualNodeSpec, names
from runtime.api.virtualnode import StorageType
from runtime.forging.objects import ReflectionSettings, applied_hash, up_to_date
from runtime.forging.storage import (
    PLACEHOLDER_PATH,
    home_volume,
    provisions_here,
    remote_claim,
    volume_name,
    volume_outdated,
)

NODE = "liqo-foreign-1"


def home_claim(**overrides: Any) -> dict[str, Any]:
    claim: dict[str, Any] = {
        "apiVersion": "v1",
        "kind": "PersistentVolumeClaim",
        "metadata": {
            "name": "data",
            "namespace": "shop",
            "uid": "1234",
            "labels": {"app": "db", "team": "a"},
            "annotations": {
                names.SELECTED_NODE_ANNOTATION: NODE,
                "volume.kubernetes.io/storage-provisioner": names.STORAGE_PROVISIONER,
                "pv.kubernetes.io/bind-completed": "yes",
                "backup": "daily",
            },
        },
        "spec": {
            "storageClassName": names.STORAGE_CLASS_NAME,
            "accessModes": ["ReadWriteOnce"],
            "resources": {"requests": {"storage": "1Gi"}},
            "selector": {"matchLabels": {"disk": "ssd"}},
        },
    }
    for key, value in overrides.items():
        claim["spec" if key != "annotations" else "metadata"][key] = value
    return claim


def forge(claim: dict[str, Any], storage_class: str | None = "local", **settings: Any) -> dict[str, Any]:
    return remote_claim(
        claim,
        twin="shop-home",
        storage_class=storage_class,
        home_cluster_id="home",
        foreign_cluster_id="foreign-1",
        settings=ReflectionSettings(**settings),
    )


def test_only_liqo_claims_whose_first_pod_went_to_this_virtual_node_are_provisioned_here() -> None:
    assert provisions_here(home_claim(), NODE)
    assert not provisions_here(home_claim(), "liqo-foreign-2")
    assert not provisions_here(home_claim(storageClassName="standard"), NODE)
    assert not provisions_here(home_claim(annotations={}), NODE), "not scheduled yet"
    assert provisions_here(home_claim(volumeName=volume_name(home_claim())), NODE)
    assert not provisions_here(home_claim(volumeName="someone-elses"), NODE)


def test_the_remote_claim_is_the_home_one_with_the_negotiated_class_and_without_home_bookkeeping() -> None:
    remote = forge(home_claim(), labels_not_reflected=frozenset({"team"}))
    assert remote["metadata"]["namespace"] == "shop-home" and remote["metadata"]["name"] == "data"
    assert remote["metadata"]["labels"] == {
        "app": "db",
        names.ORIGIN_LABEL: "home",
        names.DESTINATION_LABEL: "foreign-1",
    }
    annotations = remote["metadata"]["annotations"]
    assert annotations["backup"] == "daily"
    assert annotations[names.HOME_CLAIM_UID_ANNOTATION] == "1234"
    assert not any(k.startswith(("volume.kubernetes.io/", "pv.kubernetes.io/")) for k in annotations)
    assert remote["spec"] == {
        "storageClassName": "local",
        "accessModes": ["ReadWriteOnce"],
        "resources": {"requests": {"storage": "1Gi"}},
        "volumeMode": "Filesystem",
    }
    assert "storageClassName" not in forge(home_claim(), storage_class=None)["spec"], "the foreign default"


def test_the_remote_claim_is_unchanged_when_only_home_bookkeeping_changes() -> None:
    first = forge(home_claim())
    bound = home_claim(volumeName="pvc-1234")
    bound["metadata"]["annotations"]["pv.kubernetes.io/bound-by-controller"] = "yes"
    again = forge(bound)
    assert applied_hash(first) and up_to_date(again, {**first, "status": {"phase": "Bound"}})


def test_the_home_volume_stands_for_the_remote_one_on_the_virtual_node_only() -> None:
    pending = home_volume(
        home_claim(), {"status": {"phase": "Pending"}}, node_name=NODE, home_cluster_id="home", foreign_cluster_id="f"
    )
    assert pending["metadata"]["name"] == "pvc-1234"
    assert pending["metadata"]["annotations"] == {names.PROVISIONED_BY_ANNOTATION: names.STORAGE_PROVISIONER}
    assert pending["metadata"]["labels"] == {names.ORIGIN_LABEL: "home", names.DESTINATION_LABEL: "f"}
    spec = pending["spec"]
    assert spec["capacity"] == {"storage": "1Gi"} and spec["accessModes"] == ["ReadWriteOnce"]
    assert spec["storageClassName"] == names.STORAGE_CLASS_NAME
    assert spec["persistentVolumeReclaimPolicy"] == "Delete"
    assert spec["claimRef"] == {
        "apiVersion": "v1",
        "kind": "PersistentVolumeClaim",
        "namespace": "shop",
        "name": "data",
        "uid": "1234",
    }
    assert spec["hostPath"] == {"path": PLACEHOLDER_PATH}
    assert spec["nodeAffinity"]["required"]["nodeSelectorTerms"] == [
        {"matchExpressions": [{"key": "kubernetes.io/hostname", "operator": "In", "values": [NODE]}]}
    ]
    remote_bound = {"status": {"phase": "Bound", "capacity": {"storage": "2Gi"}, "accessModes": ["ReadWriteMany"]}}
    bound = home_volume(home_claim(), remote_bound, node_name=NODE, home_cluster_id="home", foreign_cluster_id="f")
    assert bound["spec"]["capacity"] == {"storage": "2Gi"} and bound["spec"]["accessModes"] == ["ReadWriteMany"]
    assert volume_outdated(bound, pending) and not volume_outdated(bound, bound)


@pytest.mark.parametrize(
    ("classes", "chosen"),
    [
        ([], None),
        ([StorageType(storage_class_name="a"), StorageType(storage_class_name="b")], "a"),
        ([StorageType(storage_class_name="a"), StorageType(storage_class_name="b", default=True)], "b"),
    ],
)
def test_the_negotiated_default_class(classes: list[StorageType], chosen: str | None) -> None:
    assert VirtualNodeSpec(cluster_id="f", storage_classes=classes).remote_storage_class() == chosen


def test_the_stack_installs_the_liqo_storage_class_and_lets_virtual_kubelets_manage_home_volumes() -> None:
    storage_class = manifests.storage_class()
    assert storage_class["metadata"]["name"] == "liqo"
    assert storage_class["provisioner"] == "liqo.io/storage"
    assert storage_class["volumeBindingMode"] == "WaitForFirstConsumer"
    assert any(
        "persistentvolumes" in rule["resources"] and {"create", "delete"} <= set(rule["verbs"])
        for rule in manifests.VIRTUAL_KUBELET_RULES
    )


def stack(storage_classes: Any) -> dict[str, Any]:
    return {
        "home": {"clusterId": "home", "kubeconfig": "x"},
        "foreignClusters": [{"clusterId": "f", "kubeconfig": "x", "storageClasses": storage_classes}],
    }


def test_storage_classes_in_the_stack_config_reach_the_virtual_node() -> None:
    from liqo_stack.declaring.plan import virtual_node_spec

    config = parse(stack([{"storageClassName": "local"}, {"storageClassName": "ssd", "default": True}]))
    spec = virtual_node_spec(config, config.foreign_clusters[0])
    assert spec.to_wire()["storageClasses"] == [
        {"storageClassName": "local", "default": False},
        {"storageClassName": "ssd", "default": True},
    ]
    assert spec.remote_storage_class() == "ssd"


@pytest.mark.parametrize(
    ("classes", "message"),
    [
        (
            [{"storageClassName": "a", "default": True}, {"storageClassName": "b", "default": True}],
            "liqo:foreignClusters[0].storageClasses: at most one storage class may be the default",
        ),
        ([{"storageClassName": "a"}, {"storageClassName": "a"}], "liqo:foreignClusters[0].storageClasses: each"),
        ([{"storageClassName": "Not_A_Name"}], "liqo:foreignClusters[0].storageClasses[0].storageClassName: must be"),
        ([{"name": "a"}], "liqo:foreignClusters[0].storageClasses[0].name: is not a known setting"),
    ],
)
def test_bad_storage_classes_name_the_field(classes: Any, message: str) -> None:
    with pytest.raises(ConfigError) as raised:
        parse(stack(classes))
    assert message in str(raised.value)
