"""Informer against a real API server: paginated list, watch events, 410 -> relist with deletes."""

from __future__ import annotations

import asyncio
from typing import Any, cast

import pytest
from lightkube import AsyncClient, Client, KubeConfig
from lightkube.generic_resource import create_namespaced_resource
from lightkube.models.meta_v1 import ObjectMeta
from lightkube.resources.apiextensions_v1 import CustomResourceDefinition
from lightkube.resources.core_v1 import ConfigMap, Namespace, Pod

from liqo_stack.dev.clusters import DevEnvironment
from runtime.kube import EngineMetrics, Event, Informer
from runtime.kube.packing import Packed
from tests.support.kube import wait_until_async

pytestmark = pytest.mark.clusters


def configmap(name: str, namespace: str, value: str = "v") -> ConfigMap:
    return ConfigMap(
        metadata=ObjectMeta(name=name, namespace=namespace, labels={"informer-test": "yes"}), data={"k": value}
    )


@pytest.fixture
def namespace(home: Client, unique_name: str) -> Any:
    home.create(Namespace(metadata=ObjectMeta(name=unique_name)))
    yield unique_name
    home.delete(Namespace, unique_name)


@pytest.mark.parametrize("packed", [False, True], ids=["decoded", "packed"])
def test_lists_in_pages_then_follows_changes(
    dev_env: DevEnvironment, home: Client, namespace: str, packed: bool
) -> None:
    for i in range(7):
        home.create(configmap(f"cm-{i}", namespace))

    async def scenario() -> tuple[list[Event], dict[str, Any], int]:
        client = AsyncClient(KubeConfig.from_file(dev_env.kubeconfig("home")))
        informer = Informer(
            client, ConfigMap, namespace=namespace, labels={"informer-test": "yes"}, page_size=2, packed=packed
        )
        events: list[Event] = []
        informer.add_handler(events.append)
        task = asyncio.create_task(informer.run())
        await asyncio.wait_for(informer.synced.wait(), 30)
        listed = len(events)
        home.create(configmap("cm-new", namespace))
        home.patch(ConfigMap, "cm-0", {"data": {"k": "changed"}}, namespace=namespace)
        home.delete(ConfigMap, "cm-1", namespace=namespace)
        await wait_until_async(lambda: len(events) >= listed + 3)
        task.cancel()
        await client.close()
        return events, informer.store, listed

    events, store, listed = asyncio.run(scenario())
    assert listed == 7
    assert {e.type for e in events[:7]} == {"ADDED"}
    assert [(e.type, e.key) for e in events[7:]] == [
        ("ADDED", f"{namespace}/cm-new"),
        ("MODIFIED", f"{namespace}/cm-0"),
        ("DELETED", f"{namespace}/cm-1"),
    ]
    assert sorted(store) == sorted(f"{namespace}/cm-{i}" for i in [0, 2, 3, 4, 5, 6, "new"])
    assert store[f"{namespace}/cm-0"].data == {"k": "changed"}
    assert all(isinstance(obj, Packed) == packed for obj in store.values())
    assert store[f"{namespace}/cm-0"].to_dict()["data"] == {"k": "changed"}
    assert events[-1].obj.metadata.name == "cm-1", "a DELETED event carries the object"
    assert "managedFields" not in store[f"{namespace}/cm-new"].to_dict()["metadata"]


def test_expired_resource_version_relists_and_synthesises_deletes(
    dev_env: DevEnvironment, home: Client, namespace: str, unique_name: str
) -> None:
    """A restart resumes from an old state; what was deleted meanwhile must still be reported.

    A resourceVersion from before a kind's CRD existed is older than anything the API server can
    replay for that kind, so the watch gets 410 Gone, as after a long disconnection.
    """
    marker: Any = home.create(configmap("marker", namespace))
    old_version: str = marker.metadata.resourceVersion
    group = f"{unique_name}.test.liqo.io"
    crd = {
        "apiVersion": "apiextensions.k8s.io/v1",
        "kind": "CustomResourceDefinition",
        "metadata": {"name": f"things.{group}"},
        "spec": {
            "group": group,
            "scope": "Namespaced",
            "names": {"kind": "Thing", "plural": "things", "singular": "thing", "listKind": "ThingList"},
            "versions": [
                {
                    "name": "v1",
                    "served": True,
                    "storage": True,
                    "schema": {"openAPIV3Schema": {"type": "object", "x-kubernetes-preserve-unknown-fields": True}},
                }
            ],
        },
    }
    home.create(cast(CustomResourceDefinition, CustomResourceDefinition.from_dict(crd)))
    home.wait(CustomResourceDefinition, f"things.{group}", for_conditions=["Established"])
    thing = create_namespaced_resource(group, "v1", "Thing", "things")
    for name in ("stays", "goes"):
        home.create(thing.from_dict({"metadata": {"name": name, "namespace": namespace}}))

    async def scenario() -> tuple[list[Event], dict[str, Any], int]:
        client = AsyncClient(KubeConfig.from_file(dev_env.kubeconfig("home")))
        first = Informer(client, thing, namespace=namespace)
        task = asyncio.create_task(first.run())
        await asyncio.wait_for(first.synced.wait(), 30)
        task.cancel()
        remembered = dict(first.store)
        home.delete(thing, "goes", namespace=namespace)  # while nobody watches

        second = Informer(client, thing, namespace=namespace)
        second.resume(remembered, resource_version=old_version)
        events: list[Event] = []
        second.add_handler(events.append)
        task = asyncio.create_task(second.run())
        await wait_until_async(lambda: second.relists >= 1)
        task.cancel()
        await client.close()
        return events, second.store, second.relists

    try:
        events, store, relists = asyncio.run(scenario())
    finally:
        home.delete(CustomResourceDefinition, f"things.{group}")
    assert relists == 1
    assert [(e.type, e.key) for e in events] == [("DELETED", f"{namespace}/goes")], "unchanged objects stay silent"
    assert sorted(store) == [f"{namespace}/stays"]
    assert "managedFields" not in store[f"{namespace}/stays"]["metadata"], "stored without apply bookkeeping"


def test_a_pod_informer_outlives_bookmarks_and_watch_timeouts(
    dev_env: DevEnvironment, home: Client, namespace: str
) -> None:
    """The API server sends a BOOKMARK shortly before each watch times out; a Pod's bookmark has
    `spec.containers: null`. Three short watches in a row: the informer must still be running,
    resumed from the bookmarks (no relist), and still see new pods."""

    async def scenario() -> tuple[bool, int, list[Event]]:
        client = AsyncClient(KubeConfig.from_file(dev_env.kubeconfig("home")))
        metrics = EngineMetrics()  # counts the informer's watch requests
        informer = Informer(client, Pod, namespace=namespace, watch_timeout_seconds=4, metrics=metrics)
        events: list[Event] = []
        informer.add_handler(events.append)
        task = asyncio.create_task(informer.run())
        await asyncio.wait_for(informer.synced.wait(), 30)
        listed_at = informer.resource_version
        # a Pod changed in another namespace: the bookmarks' resourceVersion (the API server's Pod
        # watch cache) moves past it; with no Pod changing anywhere it may not move for a minute
        home.create(cast(Pod, Pod.from_dict({"metadata": {"name": elsewhere, "namespace": "default"}, **spec})))

        def watches() -> float:
            labels = {"cluster": "", "verb": "watch", "resource": "Pod"}
            return metrics.registry.get_sample_value("liqo_api_calls_total", labels) or 0

        # three watches ended and a fourth began, resumed from a resourceVersion that only bookmarks
        # can have moved (nothing changes in this namespace); a dead task would stop the count
        await wait_until_async(lambda: watches() >= 4 and informer.resource_version != listed_at, 60, "3 watches")
        bookmarked = informer.resource_version != listed_at
        home.create(cast(Pod, Pod.from_dict({"metadata": {"name": "late", "namespace": namespace}, **spec})))
        await wait_until_async(lambda: any(e.key == f"{namespace}/late" for e in events))
        alive = not task.done()
        task.cancel()
        await client.close()
        return alive and bookmarked, informer.relists, events

    spec = {"spec": {"containers": [{"name": "c", "image": "x"}]}}
    elsewhere = f"{namespace}-elsewhere"
    try:
        ok, relists, events = asyncio.run(scenario())
    finally:
        home.delete(Pod, elsewhere, namespace="default", grace_period=0)
    assert ok, "the informer stopped, or never advanced its resourceVersion on a bookmark"
    assert relists == 1
    assert (events[0].type, events[0].key) == ("ADDED", f"{namespace}/late")  # then its scheduling, if any
    assert {e.key for e in events} == {f"{namespace}/late"}
