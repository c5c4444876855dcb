"""The generic reflector against real API servers: a reconcile that runs again before the echo of
its own apply reached the foreign store (the key added again meanwhile, as a restart's requeue does)
sends nothing more; a change made meanwhile is still written, and a twin watched anew trusts no
write made before."""

from __future__ import annotations

import asyncio

import pytest
from lightkube import AsyncClient, Client, KubeConfig
from lightkube.models.meta_v1 import ObjectMeta
from lightkube.resources.core_v1 import ConfigMap
from lightkube.types import PatchType
from prometheus_client import CollectorRegistry

from liqo_stack.dev.clusters import DevEnvironment
from runtime.forging.kinds import CONFIGMAPS
from runtime.reflection import Peering
from runtime.reflection.reflector import ReflectionMetrics, Reflector
from tests.support.kube import get_or_none, wait_until_async

pytestmark = pytest.mark.clusters


def test_a_reconcile_before_the_echo_of_its_apply_writes_nothing_more(
    dev_env: DevEnvironment, home: Client, foreign: dict[str, Client], namespaces: tuple[str, str]
) -> None:
    namespace, twin = namespaces
    home.create(ConfigMap(metadata=ObjectMeta(name="settings", namespace=namespace), data={"v": "1"}))

    def copy_data() -> dict[str, str] | None:
        found = get_or_none(foreign["foreign-1"], ConfigMap, "settings", namespace=twin)
        return None if found is None else dict(found.data or {})

    async def scenario() -> list[float]:
        home_client = AsyncClient(KubeConfig.from_file(dev_env.kubeconfig("home")))
        foreign_client = AsyncClient(KubeConfig.from_file(dev_env.kubeconfig("foreign-1")))
        stats = ReflectionMetrics(CollectorRegistry())
        peering = Peering(home_client, foreign_client, "home", "foreign-1")
        reflector = Reflector(CONFIGMAPS, peering, reflection_metrics=stats)
        applies = stats.writes.labels("foreign-1", "configmap", "apply")
        written: list[float] = []
        await reflector.start()
        reflector.follow({namespace: twin})
        try:
            await wait_until_async(lambda: copy_data() == {"v": "1"}, what="the ConfigMap reflected")
            await reflector.queue.wait_idle(30)
            written.append(applies._value.get())
            # the foreign store stops seeing events, as if the echo of the next apply were late
            reflector.scopes[namespace].tasks["foreign"].cancel()
            home.patch(ConfigMap, "settings", {"data": {"v": "2"}}, namespace=namespace, patch_type=PatchType.MERGE)
            await wait_until_async(lambda: copy_data() == {"v": "2"}, what="the change reflected")
            await reflector.queue.wait_idle(30)
            written.append(applies._value.get())
            reflector.queue.add(f"{namespace}/settings")  # again, before the echo
            await reflector.queue.wait_idle(30)
            written.append(applies._value.get())
            # a change while the echo is still late is written all the same
            home.patch(ConfigMap, "settings", {"data": {"v": "3"}}, namespace=namespace, patch_type=PatchType.MERGE)
            await wait_until_async(lambda: copy_data() == {"v": "3"}, what="the next change reflected")
            await reflector.queue.wait_idle(30)
            written.append(applies._value.get())
            # unwatched, the copy deleted meanwhile, watched anew: the write whose echo never came
            # is of no account to the new watch, which puts the copy back
            reflector.follow({})
            foreign["foreign-1"].delete(ConfigMap, "settings", namespace=twin)
            reflector.follow({namespace: twin})
            await wait_until_async(lambda: copy_data() == {"v": "3"}, what="the copy put back")
            await reflector.queue.wait_idle(30)
            written.append(applies._value.get())
            return written
        finally:
            await reflector.stop()
            await home_client.close()
            await foreign_client.close()

    assert asyncio.run(scenario()) == [1.0, 2.0, 2.0, 3.0, 4.0]


def test_a_copy_deleted_at_home_before_its_echo_came_is_deleted_once_the_echo_comes(
    dev_env: DevEnvironment, home: Client, foreign: dict[str, Client], namespaces: tuple[str, str]
) -> None:
    namespace, twin = namespaces
    home.create(ConfigMap(metadata=ObjectMeta(name="sentinel", namespace=namespace), data={"v": "1"}))

    def copy_of(name: str) -> ConfigMap | None:
        return get_or_none(foreign["foreign-1"], ConfigMap, name, namespace=twin)

    async def scenario() -> None:
        home_client = AsyncClient(KubeConfig.from_file(dev_env.kubeconfig("home")))
        foreign_client = AsyncClient(KubeConfig.from_file(dev_env.kubeconfig("foreign-1")))
        reflector = Reflector(CONFIGMAPS, Peering(home_client, foreign_client, "home", "foreign-1"))
        await reflector.start()
        reflector.follow({namespace: twin})
        try:
            await wait_until_async(lambda: copy_of("sentinel"), what="the sentinel reflected")
            await reflector.queue.wait_idle(30)
            scope = reflector.scopes[namespace]
            # the foreign store stops seeing events: the echo of the next apply is late
            scope.tasks["foreign"].cancel()
            home.create(ConfigMap(metadata=ObjectMeta(name="doomed", namespace=namespace), data={"v": "1"}))
            await wait_until_async(lambda: copy_of("doomed"), what="the copy made")
            await reflector.queue.wait_idle(30)
            home.delete(ConfigMap, "doomed", namespace=namespace)
            await wait_until_async(lambda: home_has_no("doomed"), what="deleted at home")
            await reflector.queue.wait_idle(30)
            assert copy_of("doomed") is not None  # the store never showed it: nothing to delete yet
            # the watch resumes from where it stopped: the copy's echo comes, and the copy goes
            scope.tasks["foreign"] = asyncio.create_task(scope["foreign"].run())
            await wait_until_async(lambda: copy_of("doomed") is None, what="the late copy deleted")
        finally:
            await reflector.stop()
            await home_client.close()
            await foreign_client.close()

    def home_has_no(name: str) -> bool:
        return get_or_none(home, ConfigMap, name, namespace=namespace) is None

    asyncio.run(scenario())
