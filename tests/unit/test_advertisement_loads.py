"""The advertisement follows pod events: each event updates that pod's load, a recomputation sums
the loads (no pod is decoded then), and an event that moves no figure schedules nothing."""

from __future__ import annotations

import asyncio
from typing import Any, cast

from lightkube.resources.core_v1 import Namespace, Node, Pod

from runtime.api import names
from runtime.api.advertisement import advertisement_patch, suggested_labels
from runtime.controllers.advertisement import AdvertisementController
from runtime.kube.informing import Event, EventType, Informer
from runtime.kube.packing import Packer

HOME = "home-1"
PACKER = Packer(Pod)


def pod(name: str, cpu: str, *, node: str = "node-1", phase: str = "Running", origin: str | None = None) -> Any:
    labels = {names.ORIGIN_LABEL: origin} if origin else {}
    return PACKER.pack(
        Pod.from_dict(
            {
                "metadata": {"name": name, "namespace": "ns", "labels": labels},
                "spec": {"nodeName": node, "containers": [{"name": "c", "resources": {"requests": {"cpu": cpu}}}]},
                "status": {"phase": phase},
            }
        )
    )


def controller() -> tuple[AdvertisementController, list[dict[str, str]], list[str]]:
    offloaded = Informer(cast(Any, None), Pod, packed=True)  # the ShadowPod controller's, in the agent
    adverts = AdvertisementController(cast(Any, None), "foreign-1", offloaded_pods=offloaded)
    adverts.nodes.store["node-1"] = Node.from_dict(
        {
            "metadata": {"name": "node-1"},
            "status": {
                "allocatable": {"cpu": "10", "pods": "100"},
                "conditions": [{"type": "Ready", "status": "True"}],
            },
        }
    )
    adverts.tenants.store["tenant"] = Namespace.from_dict(
        {"metadata": {"name": "tenant", "labels": {names.TENANT_HOME_LABEL: HOME}}}
    )
    published: list[dict[str, str]] = []
    scheduled: list[str] = []

    async def publish(
        namespace: str,
        resources: dict[str, str],
        labels: dict[str, str],
        nodes: list[dict[str, Any]],
        cordoned: bool = False,
    ) -> None:
        published.append(resources)

    adverts._publish = publish  # type: ignore[method-assign]
    adverts.queue.add_after = lambda key, delay: scheduled.append(key)  # type: ignore[method-assign]
    return adverts, published, scheduled


def send(informer: Informer, kind: EventType, obj: Any) -> None:
    key = f"{obj.metadata.namespace}/{obj.metadata.name}"
    if kind == "DELETED":
        informer.store.pop(key, None)
    else:
        informer.store[key] = obj
    informer._dispatch([Event(kind, key, obj)])


def test_each_pod_event_moves_the_advertised_figures() -> None:
    adverts, published, scheduled = controller()

    def advertised() -> dict[str, str]:
        asyncio.run(adverts._reconcile("all"))
        return published[-1]

    assert advertised() == {"cpu": "10", "pods": "100"}
    send(adverts.local_pods, "ADDED", pod("local", "2", phase="Pending"))
    send(adverts.offloaded_pods, "ADDED", pod("by-other-home", "3", origin="home-2"))
    send(adverts.offloaded_pods, "ADDED", pod("by-this-home", "4", origin=HOME))
    assert len(scheduled) == 3
    assert advertised() == {"cpu": "5", "pods": "98"}, "10 less the local 2 and the other home's 3"

    send(adverts.local_pods, "MODIFIED", pod("local", "2", phase="Running"))
    assert len(scheduled) == 3, "Pending -> Running holds the same: nothing to recompute"

    send(adverts.local_pods, "MODIFIED", pod("local", "2", phase="Succeeded"))
    send(adverts.offloaded_pods, "DELETED", pod("by-other-home", "3", origin="home-2"))
    assert len(scheduled) == 5
    assert advertised() == {"cpu": "10", "pods": "100"}, "finished and deleted pods hold nothing"

    # a pod that gains an origin label moves between the two informers; the order of their events is free
    send(adverts.offloaded_pods, "ADDED", pod("moved", "1", origin="home-2"))
    send(adverts.local_pods, "DELETED", pod("local", "2", phase="Succeeded"))
    send(adverts.local_pods, "ADDED", pod("moved", "1"))
    send(adverts.offloaded_pods, "DELETED", pod("moved", "1", origin="home-2"))
    assert advertised() == {"cpu": "9", "pods": "99"}, "counted once, from the informer that holds it"


def labelled_node(name: str, labels: dict[str, str] | None = None, ready: bool = True) -> Node:
    return cast(
        Node,
        Node.from_dict(
            {
                "metadata": {"name": name, "labels": labels or {}},
                "status": {"conditions": [{"type": "Ready", "status": "True" if ready else "False"}]},
            }
        ),
    )


def test_a_cluster_suggests_the_region_and_zone_all_its_nodes_share() -> None:
    """docs/offloading.md: the labels suggested for the virtual node (geographical region, ...), from the
    well-known topology labels on which every Ready physical node agrees."""
    region, zone = "topology.kubernetes.io/region", "topology.kubernetes.io/zone"
    one_zone = [labelled_node("a", {region: "eu", zone: "eu-1"}), labelled_node("b", {region: "eu", zone: "eu-1"})]
    assert suggested_labels(one_zone) == {region: "eu", zone: "eu-1"}
    spread = [labelled_node("a", {region: "eu", zone: "eu-1"}), labelled_node("b", {region: "eu", zone: "eu-2"})]
    assert suggested_labels(spread) == {region: "eu"}
    not_ready = labelled_node("c", {region: "us"}, ready=False)
    virtual = labelled_node("v", {region: "us", names.TYPE_LABEL: names.VIRTUAL_NODE_TYPE})
    assert suggested_labels([*spread, not_ready, virtual]) == {region: "eu"}, "only Ready physical nodes count"
    assert suggested_labels([labelled_node("a", {region: "eu"}), labelled_node("b")]) == {}


def test_the_advertisement_carries_the_suggested_labels_and_drops_the_ones_gone() -> None:
    stored = {"spec": {"clusterID": "f", "resources": {"cpu": "4"}, "labels": {"r": "eu", "z": "eu-1"}}}
    assert advertisement_patch("f", stored, {"cpu": "4"}, {"r": "eu", "z": "eu-1"}) is None, "nothing to write"
    assert advertisement_patch("f", stored, {"cpu": "4"}, {"r": "eu"}) == {
        "clusterID": "f",
        "resources": {"cpu": "4"},
        "labels": {"r": "eu", "z": None},
        "nodes": [],
        "cordoned": False,
    }
    assert advertisement_patch("f", None, {"cpu": "4"}, {}) == {
        "clusterID": "f",
        "resources": {"cpu": "4"},
        "labels": {},
        "nodes": [],
        "cordoned": False,
    }
