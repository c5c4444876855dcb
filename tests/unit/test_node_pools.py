"""Node pools (issue 38, section 3): a foreign cluster offered as several virtual nodes, each standing
for the foreign nodes its offloadingPatch.nodeSelector picks."""

from __future__ import annotations

import json
from decimal import Decimal
from pathlib import Path
from typing import Any, cast

import pulumi
import pytest
from lightkube.resources.core_v1 import Node

from liqo_stack.declaring.config import ConfigError, parse
from runtime.api import names
from runtime.api.advertisement import PodLoad, available_by_node, available_for, node_offers, pool_offer
from runtime.forging.pods import remote_pod_spec_with
from runtime.virtualkubelet.kubelet import served_nodes
from tests.unit import test_components
from tests.unit.test_components import RecordingMocks, run_program, stack_config
from tests.unit.test_config import config, foreign, problem_at

mocks = test_components.mocks  # the fixture: the program run with Pulumi's mocks

GPU = {"pool": "gpu"}
GENERAL = {"pool": "general"}


def pools(*entries: dict[str, Any]) -> dict[str, Any]:
    return config(foreignClusters=[foreign(virtualNodes=list(entries))])


# -- stack config ---------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("settings", "path", "said"),
    [
        (
            pools({"name": "gpu", "nodeSelector": GPU}, {"name": "gpu", "nodeSelector": GENERAL}),
            "liqo:foreignClusters[0].virtualNodes",
            "repeated: ['gpu']",
        ),
        (
            pools({"name": "gpu", "nodeSelector": {}}),
            "liqo:foreignClusters[0].virtualNodes[0].nodeSelector",
            "leave virtualNodes out",
        ),
        (pools({"name": "gpu"}), "liqo:foreignClusters[0].virtualNodes[0].nodeSelector", "is required"),
        (
            pools({"name": "GPU_pool", "nodeSelector": GPU}),
            "liqo:foreignClusters[0].virtualNodes[0].name",
            "no pool name",
        ),
        (
            pools({"name": "a", "nodeSelector": GPU}, {"name": "b", "nodeSelector": GPU}),
            "liqo:foreignClusters[0].virtualNodes",
            "select the same foreign nodes",
        ),
        (
            pools({"name": "gpu", "nodeSelector": GPU, "sharingPercentage": 0}),
            "liqo:foreignClusters[0].virtualNodes[0].sharingPercentage",
            "greater than or equal to 1",
        ),
        (
            config(foreignClusters=[foreign("c" * 40, virtualNodes=[{"name": "p" * 30, "nodeSelector": GPU}])]),
            "liqo:foreignClusters[0]",
            "over 63 characters",
        ),
        (
            config(
                foreignClusters=[
                    foreign("foreign", virtualNodes=[{"name": "1", "nodeSelector": GPU}]),
                    foreign("foreign-1"),
                ]
            ),
            "liqo:foreignClusters[0].virtualNodes",
            "pool '1' makes the virtual node liqo-foreign-1",
        ),
    ],
)
def test_bad_pools_are_named_by_field(settings: dict[str, Any], path: str, said: str) -> None:
    with pytest.raises(ConfigError) as err:
        parse(settings)
    assert said in problem_at(err.value, path)


def test_no_pools_is_the_one_virtual_node_of_today() -> None:
    assert parse(config()).foreign_clusters[0].virtual_nodes == []


# -- what the stack makes of them -----------------------------------------------------------------


def with_pools(tmp_path: Path) -> dict[str, Any]:
    settings = stack_config(tmp_path)
    clusters = json.loads(settings["liqo:foreignClusters"])
    clusters[0]["virtualNodes"] = [
        {"name": "gpu", "nodeSelector": GPU, "labels": {"accelerator": "gpu"}, "sharingPercentage": 100},
        {"name": "general", "nodeSelector": GENERAL},
    ]
    settings["liqo:foreignClusters"] = json.dumps(clusters)
    settings["liqo:runtime"] = json.dumps({"mode": "cluster"})
    return settings


def home_objects(mocks: RecordingMocks, kind: str) -> dict[str, dict[str, Any]]:
    return {m["metadata"]["name"]: m for m in mocks.in_cluster("home") if m["kind"] == kind}


def test_without_pools_the_virtual_node_keeps_its_names(mocks: RecordingMocks) -> None:
    """An existing stack sees no rename nor replace: same resource and object names, no selector."""
    run_program()
    [resource] = [r for r in mocks.resources if r.typ.endswith(":VirtualNode") and "foreign-1" in r.name]
    assert resource.name == "home:virtualnode-foreign-1", "the resource name of before pools"
    node = home_objects(mocks, "VirtualNode")["liqo-foreign-1"]
    assert "nodeSelector" not in node["spec"].get("offloadingPatch", {})
    [container] = home_objects(mocks, "Deployment")["liqo-virtual-kubelet-foreign-1"]["spec"]["template"]["spec"][
        "containers"
    ]
    assert not [a for a in container["args"] if a.startswith("--pool")]


def test_each_pool_is_a_virtual_node_of_its_own(mocks: RecordingMocks, tmp_path: Path) -> None:
    from runtime.__main__ import build_parser

    pulumi.runtime.set_all_config(with_pools(tmp_path))
    run_program()

    nodes = home_objects(mocks, "VirtualNode")
    assert set(nodes) == {"liqo-foreign-1-gpu", "liqo-foreign-1-general", "liqo-foreign-2"}
    gpu = nodes["liqo-foreign-1-gpu"]["spec"]
    assert gpu["offloadingPatch"]["nodeSelector"] == GPU
    assert gpu["labels"]["accelerator"] == "gpu" and gpu["labels"]["region"] == "europe", "pool's over cluster's"
    assert gpu["sharingPercentage"] == 100
    assert nodes["liqo-foreign-1-general"]["spec"]["sharingPercentage"] == 90, "the cluster's default"
    # one virtual kubelet serves both pools (they share the cluster's twin namespaces)
    deployments = home_objects(mocks, "Deployment")
    assert "liqo-virtual-kubelet-foreign-1" in deployments
    [container] = deployments["liqo-virtual-kubelet-foreign-1"]["spec"]["template"]["spec"]["containers"]
    args = build_parser().parse_args([a.replace("$(POD_IP)", "10.0.0.7") for a in container["args"]])
    assert args.pool == [("gpu", None), ("general", None)]
    # and may delete and release those Nodes and VirtualNodes (and the cluster's own, while pools replace it)
    role = home_objects(mocks, "ClusterRole")["liqo-virtual-kubelet-foreign-1"]
    [deletes] = [r for r in role["rules"] if r.get("resources") == ["nodes"] and r["verbs"] == ["delete"]]
    assert deletes["resourceNames"] == ["liqo-foreign-1", "liqo-foreign-1-gpu", "liqo-foreign-1-general"]


# -- capacity: the advertisement per node, summed per pool -----------------------------------------


def node(name: str, labels: dict[str, str], cpu: str) -> Node:
    return cast(
        Node,
        Node.from_dict(
            {
                "metadata": {"name": name, "labels": labels},
                "status": {
                    "allocatable": {"cpu": cpu, "pods": "110"},
                    "conditions": [{"type": "Ready", "status": "True"}],
                },
            }
        ),
    )


def test_each_pool_offers_its_own_nodes_less_their_own_pods() -> None:
    nodes = [node("g1", GPU, "8"), node("n1", GENERAL, "4"), node("n2", GENERAL, "4")]
    loads = [
        PodLoad("g1", None, (("cpu", Decimal(3)), ("pods", Decimal(1)))),  # the foreign cluster's own pod
        PodLoad("n1", "home", (("cpu", Decimal(2)), ("pods", Decimal(1)))),  # offloaded by this home: free
        PodLoad("n2", "other-home", (("cpu", Decimal("0.5")), ("pods", Decimal(1)))),
    ]
    per_node = available_by_node("home", nodes, loads)
    assert per_node["g1"]["cpu"] == 5 and per_node["n1"]["cpu"] == 4 and per_node["n2"]["cpu"] == Decimal("3.5")
    assert available_for("home", nodes, loads)["cpu"] == Decimal("12.5"), "the whole cluster: their sum"
    spec = {"resources": {"cpu": "12500m"}, "nodes": node_offers(nodes, per_node)}
    assert pool_offer(spec, GPU) == {"cpu": "5", "pods": "109"}
    assert pool_offer(spec, GENERAL) == {"cpu": "7500m", "pods": "219"}
    assert pool_offer(spec, None) == {"cpu": "12500m"}, "no selector: the cluster's figures"
    assert pool_offer(spec, {"pool": "tpu"}) == {}, "a pool that picks no node offers nothing"


# -- the remote pod -----------------------------------------------------------------------------------


def test_the_pools_selector_replaces_the_home_one_in_the_remote_pod() -> None:
    home_pod = {
        "metadata": {"name": "p", "namespace": "ns"},
        "spec": {
            "nodeSelector": {"kubernetes.io/hostname": "liqo-foreign-1-gpu"},
            "containers": [{"name": "c", "image": "i"}],
        },
    }
    assert remote_pod_spec_with(home_pod, None, GPU)["nodeSelector"] == GPU
    remote = remote_pod_spec_with(home_pod, None)
    assert "nodeSelector" not in remote, "docs/reflection.md: home scheduling constraints go"


# -- which virtual nodes one virtual kubelet serves ------------------------------------------------------


def test_the_stack_named_pools_are_served_and_a_replaced_node_only_until_removed() -> None:
    default, gpu, general = (names.virtual_node_name("f", p) for p in (None, "gpu", "general"))
    existing = {default: True, gpu: False}
    served, ports = served_nodes(existing, "f", ["gpu", "general"], 10250)
    assert served == (gpu, general, default), "the pools first; the replaced one kept for its removal"
    assert ports == {gpu: 10250, general: 10251, default: None}
    served, ports = served_nodes(existing, "f", ["gpu", "general"], 10250, [11000, 12000])
    assert ports == {gpu: 11000, general: 12000, default: None}


def test_without_pools_given_the_existing_virtual_nodes_are_served() -> None:
    default, gpu, general = (names.virtual_node_name("f", p) for p in (None, "gpu", "general"))
    assert served_nodes({}, "f", [], 10250) == ((default,), {default: 10250})
    assert served_nodes({gpu: True, general: False}, "f", [], 10250) == (
        (general, gpu),
        {general: 10250, gpu: 10251},
    )
    assert served_nodes({gpu: True, default: True}, "f", [], None)[0] == (default, gpu), "the cluster's first"
