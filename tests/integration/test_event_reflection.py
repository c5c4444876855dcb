"""The event reflector against real API servers: a new foreign event is created at home; a home event
its store has not seen yet (its own create, still on the way back through the watch) is applied
in place instead of failing on the conflict."""

from __future__ import annotations

import asyncio
import datetime
from typing import Any

import pytest
from lightkube import AsyncClient, Client, KubeConfig
from lightkube.models.meta_v1 import ObjectMeta
from lightkube.resources.core_v1 import ConfigMap, Event
from lightkube.types import PatchType

from liqo_stack.dev.clusters import DevEnvironment
from runtime.api import ReflectionPolicy, VirtualNodeSpec, names
from runtime.reflection import Peering
from runtime.reflection.events import EventReflector
from tests.support.kube import wait_until_async

pytestmark = pytest.mark.clusters


def config_map_changed(name: str, twin: str, *, about: str, uid: str) -> Any:
    """A foreign controller's event about ConfigMap `about` of the twin namespace, happened now."""
    stamp = datetime.datetime.now(datetime.UTC).replace(microsecond=0).isoformat().replace("+00:00", "Z")
    return Event.from_dict(
        {
            "metadata": {"name": name, "namespace": twin},
            "involvedObject": {"kind": "ConfigMap", "name": about, "namespace": twin, "uid": uid},
            "reason": "Changed",
            "message": f"{about} changed there",
            "type": "Normal",
            "count": 1,
            "firstTimestamp": stamp,
            "lastTimestamp": stamp,
        }
    )


def test_an_event_missing_from_the_store_but_there_is_updated_in_place(
    dev_env: DevEnvironment, home: Client, foreign: dict[str, Client], namespaces: tuple[str, str]
) -> None:
    namespace, twin = namespaces
    target: Any = home.create(ConfigMap(metadata=ObjectMeta(name="settings", namespace=namespace)))
    foreign["foreign-1"].create(config_map_changed("settings.changed", twin, about="settings", uid="1"))

    async def home_object(kind: str, home_namespace: str, name: str, uid: str | None) -> dict[str, Any] | None:
        return target.to_dict() if (kind, home_namespace, name) == ("ConfigMap", namespace, "settings") else None

    def reflected() -> list[Any]:
        listed = home.list(Event, namespace=namespace, labels={names.EVENT_REFLECTED_FROM_LABEL: "foreign-1"})
        return [e for e in listed if e.reason == "Changed"]

    async def scenario() -> tuple[Any, Any]:
        home_client = AsyncClient(KubeConfig.from_file(dev_env.kubeconfig("home")))
        foreign_client = AsyncClient(KubeConfig.from_file(dev_env.kubeconfig("foreign-1")))
        reflector = EventReflector(Peering(home_client, foreign_client, "home", "foreign-1"), home_object)
        await reflector.start()
        reflector.follow({namespace: twin})
        try:
            (first,) = await wait_until_async(reflected, what="the foreign event created at home")
            # the home store stops seeing events, as if our own create had not come back yet
            scope = reflector.scopes[namespace]
            scope.tasks["home"].cancel()
            scope["home"].store.clear()
            foreign["foreign-1"].patch(
                Event, "settings.changed", {"count": 2}, namespace=twin, patch_type=PatchType.MERGE
            )
            (second,) = await wait_until_async(
                lambda: [e for e in reflected() if e.count == 2], what="the count updated at home"
            )
            return first, second
        finally:
            await reflector.stop()
            await home_client.close()
            await foreign_client.close()

    first, second = asyncio.run(scenario())
    assert first.count == 1 and first.involvedObject.uid == target.metadata.uid
    assert second.metadata.uid == first.metadata.uid, "the same home event, updated in place"


def test_with_an_allow_list_only_events_about_annotated_objects_come_home(
    dev_env: DevEnvironment, home: Client, foreign: dict[str, Client], namespaces: tuple[str, str]
) -> None:
    """reflection.event.type AllowList (docs/reflection.md): an event comes home only when the home object it is
    about (or the event) is annotated liqo.io/allow-reflection."""
    namespace, twin = namespaces
    targets: dict[str, Any] = {}
    for name, allowed in (("hidden", {}), ("shown", {names.ALLOW_REFLECTION_ANNOTATION: "true"})):
        meta = ObjectMeta(name=name, namespace=namespace, annotations=allowed)
        targets[name] = home.create(ConfigMap(metadata=meta)).to_dict()
    # one worker, and events named in the order they are queued (listed by name, or watched as created):
    # once the second one is home, the first one has been decided
    for order, name in enumerate(("hidden", "shown")):
        foreign["foreign-1"].create(config_map_changed(f"{order}-{name}.changed", twin, about=name, uid=name))

    async def home_object(kind: str, home_namespace: str, name: str, uid: str | None) -> dict[str, Any] | None:
        return targets.get(name) if (kind, home_namespace) == ("ConfigMap", namespace) else None

    def reflected() -> list[Any]:
        return list(home.list(Event, namespace=namespace, labels={names.EVENT_REFLECTED_FROM_LABEL: "foreign-1"}))

    async def scenario() -> list[Any]:
        home_client = AsyncClient(KubeConfig.from_file(dev_env.kubeconfig("home")))
        foreign_client = AsyncClient(KubeConfig.from_file(dev_env.kubeconfig("foreign-1")))
        spec = VirtualNodeSpec.model_validate(
            {"clusterID": "foreign-1", "reflection": {"event": {"type": ReflectionPolicy.ALLOW_LIST, "workers": 1}}}
        )
        peering = Peering(home_client, foreign_client, "home", "foreign-1", node_spec=lambda: spec)
        reflector = EventReflector(peering, home_object)
        await reflector.start()
        reflector.follow({namespace: twin})
        try:
            await wait_until_async(
                lambda: [e for e in reflected() if e.involvedObject.name == "shown"], what="the allowed event at home"
            )
            return reflected()
        finally:
            await reflector.stop()
            await home_client.close()
            await foreign_client.close()

    events = asyncio.run(scenario())
    assert [e.involvedObject.name for e in events] == ["shown"], "the unannotated object's event stays there"
