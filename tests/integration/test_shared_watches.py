"""Namespace views of one cluster-wide informer (runtime/kube/shared.py) against a real API server: each
view holds and hands on only its namespace, a namespace followed later starts from what is there, and
every view of a kind shares one watch, stopped with the last view."""

from __future__ import annotations

import asyncio
from collections.abc import Iterator

import pytest
from lightkube import AsyncClient, Client, KubeConfig
from lightkube.models.meta_v1 import ObjectMeta
from lightkube.resources.core_v1 import ConfigMap, Namespace

from liqo_stack.dev.clusters import DevEnvironment
from runtime.kube import Event
from runtime.kube.shared import SharedWatches
from tests.support.kube import wait_until_async

pytestmark = pytest.mark.clusters


@pytest.fixture
def two_namespaces(home: Client, unique_name: str) -> Iterator[tuple[str, str]]:
    pair = (f"{unique_name}-a", f"{unique_name}-b")
    for name in pair:
        home.create(Namespace(metadata=ObjectMeta(name=name)))
    yield pair
    for name in pair:
        home.delete(Namespace, name)


def configmap(name: str, namespace: str) -> ConfigMap:
    return ConfigMap(metadata=ObjectMeta(name=name, namespace=namespace), data={"k": "v"})


def test_views_share_one_watch_and_see_only_their_namespace(
    dev_env: DevEnvironment, home: Client, two_namespaces: tuple[str, str]
) -> None:
    first, second = two_namespaces
    home.create(configmap("before", first))
    home.create(configmap("before", second))

    async def scenario() -> None:
        client = AsyncClient(KubeConfig.from_file(dev_env.kubeconfig("home")))
        watches = SharedWatches(client)
        view_a = watches.view(ConfigMap, first)
        events_a: list[Event] = []
        view_a.add_handler(events_a.append)
        task_a = asyncio.create_task(view_a.run())
        await asyncio.wait_for(view_a.synced.wait(), 30)
        assert f"{first}/before" in view_a.store and not any(k.startswith(f"{second}/") for k in view_a.store)
        assert [e.key for e in events_a if e.key.endswith("/before")] == [f"{first}/before"]

        # a namespace followed later starts from the shared store: same informer, no second watch
        view_b = watches.view(ConfigMap, second)
        task_b = asyncio.create_task(view_b.run())
        await asyncio.wait_for(view_b.synced.wait(), 30)
        assert view_b.shared is view_a.shared and view_b.store.keys() >= {f"{second}/before"}
        assert not any(k.startswith(f"{first}/") for k in view_b.store)

        home.create(configmap("after", second))
        home.delete(ConfigMap, "before", namespace=first)
        await wait_until_async(lambda: f"{second}/after" in view_b.store and f"{first}/before" not in view_a.store)
        assert f"{second}/after" not in view_a.store
        assert [e.type for e in events_a if e.key == f"{first}/before"] == ["ADDED", "DELETED"]

        task_a.cancel()
        task_b.cancel()
        await asyncio.gather(task_a, task_b, return_exceptions=True)
        assert view_a.shared.informer is None, "the last view stopped the shared watch"
        await client.close()

    asyncio.run(scenario())
