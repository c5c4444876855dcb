"""Pure parts of the virtual kubelet and the foreign agent: docs/reflection.md's pod translation, docs/offloading.md's
advertised resources, and the virtual node's conditions."""

from __future__ import annotations

import copy
from decimal import Decimal
from typing import Any, cast

import pytest
from lightkube.resources.core_v1 import Node, Pod

from runtime.api import VirtualNodeSpec, names
from runtime.api.advertisement import PodLoad, available_for, load_of, loads_of
from runtime.forging.pods import (
    CidrMapping,
    TranslationError,
    home_pod_status,
    nothing_to_tell,
    remote_pod_metadata,
    remote_pod_spec,
    skip_lists,
)
from runtime.virtualkubelet.node import node_apply, node_conditions, status_patch

IDS = {"home_cluster_id": "home", "foreign_cluster_id": "foreign-1"}


def home_pod(**annotations: str) -> dict[str, Any]:
    return {
        "metadata": {"name": "p", "labels": {"app": "web", "tier": "front"}, "annotations": annotations},
        "spec": {
            "nodeName": "liqo-foreign-1",
            "nodeSelector": {"a": "b"},
            "schedulerName": "default-scheduler",
            "priorityClassName": "high",
            "priority": 1000,
            "runtimeClassName": names.RUNTIME_CLASS_NAME,
            "hostNetwork": True,
            "hostPID": True,
            "serviceAccountName": "default",
            "affinity": {"podAntiAffinity": {"requiredDuringSchedulingIgnoredDuringExecution": [{"x": 1}]}},
            "tolerations": [
                {"key": names.VIRTUAL_NODE_TAINT_KEY, "operator": "Exists", "effect": "NoExecute"},
                {"key": "node.kubernetes.io/not-ready", "effect": "NoExecute", "tolerationSeconds": 300},
                {"key": "dedicated", "operator": "Equal", "value": "gpu", "effect": "NoSchedule"},
            ],
            "volumes": [
                {"name": "kube-api-access-abcde", "projected": {"sources": [{"serviceAccountToken": {"path": "t"}}]}},
                {"name": "data", "emptyDir": {}},
            ],
            "initContainers": [{"name": "init", "volumeMounts": [{"name": "kube-api-access-abcde"}]}],
            "containers": [
                {"name": "app", "volumeMounts": [{"name": "kube-api-access-abcde"}, {"name": "data"}]},
            ],
        },
    }


def test_remote_spec_drops_home_scheduling_host_namespaces_and_the_home_token() -> None:
    original = home_pod()
    snapshot = copy.deepcopy(original)
    spec = remote_pod_spec(original, **IDS)
    assert original == snapshot, "the input is never changed"
    for field in ("nodeName", "nodeSelector", "schedulerName", "priorityClassName", "priority", "affinity"):
        assert field not in spec
    assert "runtimeClassName" not in spec and "serviceAccountName" not in spec
    assert spec["hostNetwork"] is False and spec["hostPID"] is False and spec["hostIPC"] is False
    assert spec["automountServiceAccountToken"] is False
    assert spec["tolerations"] == [
        {"key": "node.kubernetes.io/not-ready", "effect": "NoExecute", "tolerationSeconds": 300},
        {"key": "dedicated", "operator": "Equal", "value": "gpu", "effect": "NoSchedule"},
    ], "verbatim, but the virtual node's"
    assert [v["name"] for v in spec["volumes"]] == ["data"]
    assert spec["containers"][0]["volumeMounts"] == [{"name": "data"}]
    assert spec["initContainers"][0]["volumeMounts"] == []


def test_anti_affinity_presets() -> None:
    preset = names.ANTI_AFFINITY_PRESET_ANNOTATION
    propagated = remote_pod_spec(home_pod(**{preset: "propagate"}), **IDS)["affinity"]
    assert propagated == {"podAntiAffinity": {"requiredDuringSchedulingIgnoredDuringExecution": [{"x": 1}]}}
    hard = remote_pod_spec(
        home_pod(**{preset: "hard", names.ANTI_AFFINITY_LABELS_ANNOTATION: " app , missing"}), **IDS
    )["affinity"]["podAntiAffinity"]["requiredDuringSchedulingIgnoredDuringExecution"][0]
    assert hard["labelSelector"] == {"matchLabels": {"app": "web"}}
    soft = remote_pod_spec(home_pod(**{preset: "soft"}), **IDS)["affinity"]["podAntiAffinity"]
    term = soft["preferredDuringSchedulingIgnoredDuringExecution"][0]
    assert term["weight"] == 100 and term["podAffinityTerm"]["labelSelector"]["matchLabels"] == {
        "app": "web",
        "tier": "front",
    }
    with pytest.raises(TranslationError, match="allowed values are propagate, soft, hard"):
        remote_pod_spec(home_pod(**{preset: "sometimes"}), **IDS)
    with pytest.raises(TranslationError, match="none of the labels"):
        remote_pod_spec(home_pod(**{preset: "hard", names.ANTI_AFFINITY_LABELS_ANNOTATION: "nope"}), **IDS)


def test_remote_metadata_carries_origin_and_destination() -> None:
    meta = remote_pod_metadata(home_pod(note="kept"), **IDS)
    assert meta["labels"] == {
        "app": "web",
        "tier": "front",
        names.ORIGIN_LABEL: "home",
        names.DESTINATION_LABEL: "foreign-1",
    }
    assert meta["annotations"] == {"note": "kept"}


def test_remote_metadata_leaves_out_the_virtual_nodes_skipped_labels_and_annotations() -> None:
    """docs/reflection.md's labelsNotReflected / annotationsNotReflected apply to offloaded pods too, but never
    to the ownership labels or to the labels the remote anti-affinity selects on."""
    spec = VirtualNodeSpec.model_validate(
        {
            "clusterID": "foreign-1",
            "offloadingPatch": {
                "labelsNotReflected": ["tier", names.ORIGIN_LABEL, names.DESTINATION_LABEL],
                "annotationsNotReflected": ["cloud.example/managed"],
            },
        }
    )
    pod = home_pod(note="kept", **{"cloud.example/managed": "yes"})
    meta = remote_pod_metadata(pod, **IDS, **skip_lists(spec))
    assert meta["labels"] == {"app": "web", names.ORIGIN_LABEL: "home", names.DESTINATION_LABEL: "foreign-1"}
    assert meta["annotations"] == {"note": "kept"}
    # a hard preset selecting on `tier` needs the remote pods to carry it
    hard = home_pod(**{names.ANTI_AFFINITY_PRESET_ANNOTATION: "hard", names.ANTI_AFFINITY_LABELS_ANNOTATION: "tier"})
    assert remote_pod_metadata(hard, **IDS, **skip_lists(spec))["labels"]["tier"] == "front"
    assert remote_pod_metadata(pod, **IDS, **skip_lists(None)) == remote_pod_metadata(pod, **IDS)


def test_status_back_remaps_ips_and_counts_recreations_as_restarts() -> None:
    mapping = CidrMapping.parse("10.0.0.0/16", "10.201.0.0/16")
    remote = {
        "phase": "Running",
        "podIP": "10.0.3.7",
        "podIPs": [{"ip": "10.0.3.7"}],
        "hostIP": "192.168.1.1",
        "containerStatuses": [{"name": "app", "restartCount": 2}],
    }
    status = home_pod_status(remote, pod_cidr_mapping=mapping, host_ip="127.0.0.1", recreations=1)
    assert status["podIP"] == "10.201.3.7" and status["podIPs"] == [{"ip": "10.201.3.7"}]
    assert status["hostIP"] == "127.0.0.1" and status["containerStatuses"][0]["restartCount"] == 3
    assert mapping.translate("172.16.0.1") == "172.16.0.1", "outside the remote CIDR: unchanged"
    with pytest.raises(ValueError, match="same IP version and prefix length"):
        CidrMapping.parse("10.0.0.0/16", "10.201.0.0/24")
    with pytest.raises(ValueError, match="not-a-cidr"):
        CidrMapping.parse("not-a-cidr", "10.201.0.0/16")


def node(name: str, cpu: str, *, virtual: bool = False, ready: bool = True) -> Node:
    labels = {names.TYPE_LABEL: names.VIRTUAL_NODE_TYPE} if virtual else {}
    return cast(Node, Node.from_dict({
        "metadata": {"name": name, "labels": labels},
        "status": {"allocatable": {"cpu": cpu, "pods": "110"},
                   "conditions": [{"type": "Ready", "status": "True" if ready else "False"}]},
    }))  # fmt: skip


def pod(node_name: str, cpu: str, origin: str | None = None, phase: str = "Running") -> Pod:
    labels = {names.ORIGIN_LABEL: origin} if origin else {}
    return cast(Pod, Pod.from_dict({
        "metadata": {"name": f"p-{cpu}", "labels": labels},
        "spec": {"nodeName": node_name, "containers": [{"name": "c", "resources": {"requests": {"cpu": cpu}}}]},
        "status": {"phase": phase},
    }))  # fmt: skip


def test_advertised_resources_follow_seed_004() -> None:
    nodes = [node("a", "60"), node("b", "40"), node("virtual", "1000", virtual=True), node("down", "50", ready=False)]
    assert available_for("home", nodes, [])["cpu"] == 100
    busy = [pod("a", "50"), pod("a", "7", origin="home"), pod("b", "3", phase="Succeeded"), pod("", "9")]
    assert [load_of(p) is None for p in busy] == [False, False, True, True], "finished or unscheduled: no load"
    loads = loads_of(busy)
    assert loads[1] == PodLoad("a", "home", (("cpu", Decimal(7)), ("pods", Decimal(1))))
    available = available_for("home", nodes, loads)
    assert available["cpu"] == 50, "only what pods not offloaded by this home request counts"
    assert available["pods"] == 220 - 1, "one slot taken: the running pod not offloaded by this home"
    assert available_for("other-home", nodes, loads)["cpu"] == 43


def test_a_resource_rounded_to_zero_shows_as_a_condition() -> None:
    conditions = {c["type"]: c for c in node_conditions(True, 0, ["nvidia.com/gpu"])}
    zeroed = conditions["ResourcesRoundedToZero"]
    assert (
        zeroed["status"] == "True" and "nvidia.com/gpu" in zeroed["message"] and "fixedResources" in zeroed["message"]
    )
    assert conditions["Ready"]["status"] == "True"
    unhealthy = {c["type"]: c for c in node_conditions(False, 3, [])}
    assert unhealthy["Ready"]["status"] == "False" and "3 health checks" in unhealthy["Ready"]["message"]
    assert unhealthy["ResourcesRoundedToZero"]["status"] == "False"


@pytest.mark.parametrize(
    ("remote_status", "silent"),
    [
        ({}, True),
        ({"phase": "Pending", "conditions": [{"type": "PodScheduled", "status": "True"}]}, True),
        (
            {
                "phase": "Pending",
                "conditions": [{"type": "PodScheduled", "status": "False", "reason": "Unschedulable"}],
            },
            False,
        ),
        (
            {
                "phase": "Pending",
                "containerStatuses": [{"name": "c", "state": {"waiting": {"reason": "ErrImagePull"}}}],
            },
            False,
        ),
        ({"phase": "Running"}, False),
        ({"phase": "Failed", "reason": "Evicted"}, False),
    ],
)
def test_a_just_created_remote_pod_is_not_news_for_the_home_pod(remote_status: dict[str, Any], silent: bool) -> None:
    assert nothing_to_tell(remote_status, {"phase": "Pending"}) is silent


OUR_TAINT = {"key": names.VIRTUAL_NODE_TAINT_KEY, "value": "true", "effect": "NoExecute"}
NOT_READY = {"key": "node.kubernetes.io/not-ready", "effect": "NoExecute", "timeAdded": "2026-11-23T09:00:00Z"}


def live_node(
    applied: dict[str, Any] | None, *, labels: dict[str, str], taints: list[dict[str, Any]]
) -> dict[str, Any]:
    annotations = dict((applied or {}).get("metadata", {}).get("annotations") or {})
    return {
        "metadata": {"name": "liqo-f", "resourceVersion": "7", "labels": labels, "annotations": annotations},
        "spec": {"taints": taints},
    }


def test_the_node_sheds_labels_and_taints_that_leave_the_virtual_node_and_keeps_everyone_elses() -> None:
    declared = {"region": "europe", "zone": "a"}
    gpu = {"key": "gpu", "value": "true", "effect": "NoSchedule"}
    first = node_apply("liqo-f", declared, [OUR_TAINT, gpu], None)
    assert first is not None and "resourceVersion" not in first["metadata"], "a new Node: created by the apply"
    admin = {"key": "maintenance", "effect": "NoSchedule"}
    live = live_node(first, labels={**declared, "team": "ops"}, taints=[OUR_TAINT, gpu, admin, NOT_READY])
    assert node_apply("liqo-f", declared, [OUR_TAINT, gpu], live) is None, "nothing changed: no write"

    shrunk = node_apply("liqo-f", {"region": "europe"}, [OUR_TAINT], live)
    assert shrunk is not None
    assert shrunk["metadata"]["labels"] == {"region": "europe"}, "SSA drops what this manager stops applying"
    assert shrunk["metadata"]["resourceVersion"] == "7", "never overwrite a taint added meanwhile"
    assert shrunk["spec"]["taints"] == [OUR_TAINT, admin, NOT_READY], "the gpu taint goes, the others' stay"
    after = live_node(shrunk, labels={"region": "europe", "team": "ops"}, taints=shrunk["spec"]["taints"])
    assert node_apply("liqo-f", {"region": "europe"}, [OUR_TAINT], after) is None, "and then it is quiet"

    # an administrator removed one of ours: put back; an edited record: nothing of the others taken
    stripped = live_node(first, labels={"zone": "a"}, taints=[gpu])
    restored = node_apply("liqo-f", declared, [OUR_TAINT, gpu], stripped)
    assert restored is not None and restored["spec"]["taints"] == [OUR_TAINT, gpu]
    garbled = live_node(first, labels=declared, taints=[OUR_TAINT, gpu, admin])
    garbled["metadata"]["annotations"] = {names.VIRTUAL_NODE_APPLIED_ANNOTATION: "{not json"}
    repaired = node_apply("liqo-f", declared, [OUR_TAINT], garbled)
    assert repaired is not None and repaired["spec"]["taints"] == [OUR_TAINT, gpu, admin]


def test_capacity_and_allocatable_are_replaced_whole() -> None:
    live = {
        "capacity": {"cpu": "9", "memory": "10", "nvidia.com/gpu": "2"},
        "allocatable": {"cpu": "9", "memory": "10", "nvidia.com/gpu": "2"},
        "conditions": [{"type": "Ready", "status": "True"}],
    }
    desired = {"capacity": {"cpu": "9", "memory": "10"}, "allocatable": {"cpu": "9", "memory": "10"}}
    patch = status_patch({**desired, "conditions": live["conditions"]}, live)
    assert patch == {
        "capacity": {"cpu": "9", "memory": "10", "nvidia.com/gpu": None},
        "allocatable": {"cpu": "9", "memory": "10", "nvidia.com/gpu": None},
    }
    assert status_patch({"capacity": {}, "allocatable": {}}, live) == {
        "capacity": {"cpu": None, "memory": None, "nvidia.com/gpu": None},
        "allocatable": {"cpu": None, "memory": None, "nvidia.com/gpu": None},
    }, "every foreign node cordoned: nothing left to schedule on"
    assert status_patch({**live}, live) is None


def test_the_virtual_node_carries_the_labels_its_foreign_cluster_suggests() -> None:
    """docs/offloading.md / DESIGN: the Node's labels are the advertisement's suggested ones, the VirtualNode's
    (which win on a shared key) and the two that identify it."""
    from runtime.api.resources import ResourceAdvertisementResource, VirtualNodeResource
    from runtime.kube import Informer
    from runtime.virtualkubelet.node import VirtualNodeController

    none = cast(Any, None)
    advertisements = Informer(none, ResourceAdvertisementResource)
    controller = VirtualNodeController(
        none,
        none,
        home_cluster_id="home",
        foreign_cluster_id="foreign-1",
        virtual_nodes=Informer(none, VirtualNodeResource),
        advertisements=advertisements,
    )
    region = "topology.kubernetes.io/region"
    advertisements.store[f"{names.tenant_namespace('home')}/foreign-1"] = ResourceAdvertisementResource.from_dict(
        {
            "metadata": {"name": "foreign-1", "namespace": names.tenant_namespace("home")},
            "spec": {"clusterID": "foreign-1", "resources": {"cpu": "4"}, "labels": {region: "eu", "tier": "spot"}},
        }
    )
    spec = VirtualNodeSpec.model_validate({"clusterID": "foreign-1", "labels": {"tier": "gold"}})
    labels = controller.desired(spec)[0]["metadata"]["labels"]
    assert labels[region] == "eu" and labels["tier"] == "gold"
    assert labels[names.REMOTE_CLUSTER_ID_LABEL] == "foreign-1" and labels[names.TYPE_LABEL] == names.VIRTUAL_NODE_TYPE
