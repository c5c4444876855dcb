"""Custom resources (runtime/reflection/custom.py) against real API servers, driven by hand: the
VirtualNode settings changed live, each type's reflector's queue waited on, so that what it does NOT do (bring a
status home, reflect while disabled, touch a foreign object that is not ours) is shown after it
decided, not after a while. The e2e tier (tests/e2e/test_custom_resources.py) runs it in the runtime."""

from __future__ import annotations

import asyncio
from collections.abc import Iterator
from typing import Any

import pytest
from lightkube import AsyncClient, Client, KubeConfig
from lightkube.generic_resource import create_namespaced_resource
from lightkube.resources.apiextensions_v1 import CustomResourceDefinition
from lightkube.resources.core_v1 import Event
from lightkube.types import PatchType
from prometheus_client import CollectorRegistry

from liqo_stack.dev.clusters import DevEnvironment
from runtime.api import VirtualNodeSpec, names
from runtime.reflection import Peering
from runtime.reflection.custom import CustomResources
from runtime.reflection.reflector import ReflectionMetrics
from tests.support.crds import open_crd
from tests.support.kube import get_or_none, wait_until, wait_until_async

pytestmark = pytest.mark.clusters

GROUP = "integration.liqo-stack.dev"
Widget = create_namespaced_resource(GROUP, "v1", "Widget", "widgets")  # its CRD has a status subresource
Gadget = create_namespaced_resource(GROUP, "v1", "Gadget", "gadgets")  # its CRD has none
CRDS = [open_crd(GROUP, "Widget", "widgets", status=True), open_crd(GROUP, "Gadget", "gadgets", status=False)]
ALLOWED = {names.ALLOW_REFLECTION_ANNOTATION: "true"}


@pytest.fixture(scope="module")
def crds(home: Client, foreign: dict[str, Client]) -> Iterator[None]:
    """Both CRDs at home and in foreign-1, Established; deleted (with their objects) afterwards."""
    clusters = [home, foreign["foreign-1"]]
    for client in clusters:
        for body in CRDS:  # applied: a run cut short may have left them
            client.apply(CustomResourceDefinition.from_dict(body), field_manager="tests")  # type: ignore[call-overload]
    for client in clusters:
        for body in CRDS:
            name = body["metadata"]["name"]
            wait_until(lambda c=client, n=name: established(c, n), 30, f"{name} Established")  # type: ignore[misc]
    yield
    for client in clusters:
        for body in CRDS:
            client.delete(CustomResourceDefinition, body["metadata"]["name"])


def established(client: Client, name: str) -> bool:
    found: Any = client.get(CustomResourceDefinition, name)
    return any(c.type == "Established" and c.status == "True" for c in (found.status.conditions or []))


def custom_object(resource: Any, name: str, namespace: str, spec: dict[str, Any], **meta: Any) -> Any:
    kind = resource._api_info.resource.kind
    return resource.from_dict(
        {
            "apiVersion": f"{GROUP}/v1",
            "kind": kind,
            "metadata": {"name": name, "namespace": namespace, **meta},
            "spec": spec,
        }
    )


class Harness:
    """Peering of home and foreign-1 whose VirtualNode spec the test sets (`settings`), and the
    `CustomResources` of that peering, which runs a reflector per opted-in type its CRDs allow, as a
    virtual kubelet does, for one home namespace and its twin."""

    def __init__(self, dev_env: DevEnvironment, namespace: str, twin: str) -> None:
        self.home = AsyncClient(KubeConfig.from_file(dev_env.kubeconfig("home")))
        self.foreign = AsyncClient(KubeConfig.from_file(dev_env.kubeconfig("foreign-1")))
        self.spec = VirtualNodeSpec.model_validate({"clusterID": "foreign-1"})
        self.peering = Peering(self.home, self.foreign, "home", "foreign-1", node_spec=lambda: self.spec)
        self.stats = ReflectionMetrics(CollectorRegistry())
        self.status_source = True  # foreign-1 gives the namespace's custom objects their status
        self.resources = CustomResources(
            self.peering, status_source=lambda _: self.status_source, reflection_metrics=self.stats
        )
        self.twins = {namespace: twin}

    def settings(self, *entries: dict[str, Any]) -> None:
        """The VirtualNode's spec.customResources now, taken up live as the virtual kubelet does."""
        self.spec = VirtualNodeSpec.model_validate({"clusterID": "foreign-1", "customResources": list(entries)})
        self.resources.on_settings()

    async def reflector(self, plural: str) -> Any:
        """The type's reflector, once both CRDs are known and allow it."""
        return await wait_until_async(
            lambda: self.resources.reflectors.get(f"{plural}.{GROUP}"), what=f"{plural} reflected"
        )

    def writes(self, plural: str, verb: str) -> float:
        return float(self.stats.writes.labels("foreign-1", f"{plural}.{GROUP}", verb)._value.get())

    async def __aenter__(self) -> Harness:
        await self.resources.start()
        self.resources.follow(self.twins)
        return self

    async def __aexit__(self, *_: object) -> None:
        await self.resources.stop()
        await self.home.close()
        await self.foreign.close()


async def decided(reflector: Any, side: str, namespace: str, key: str, seen: Any = lambda obj: True) -> None:
    """Until the reflector's scope has synced (and so requeued all it holds) and `side`'s store holds
    `key` as `seen` wants it (its event queued the key), then until the queue has run it."""
    await wait_until_async(
        lambda: (
            (scope := reflector.scopes.get(namespace)) is not None
            and scope.tasks["synced"].done()
            and (obj := scope[side].store.get(key)) is not None
            and seen(obj)
        ),
        what=f"{key} seen in the {side} store",
    )
    await reflector.queue.wait_idle(30)


def entry(plural: str, **settings: Any) -> dict[str, Any]:
    return {"group": GROUP, "version": "v1", "resource": plural, **settings}


def test_status_comes_back_only_when_asked_and_the_home_crd_has_a_status_subresource(
    crds: None, dev_env: DevEnvironment, home: Client, foreign: dict[str, Client], namespaces: tuple[str, str]
) -> None:
    namespace, twin = namespaces
    there = foreign["foreign-1"]
    home.create(custom_object(Widget, "w", namespace, {"size": 1}, annotations=ALLOWED))
    home.create(custom_object(Gadget, "g", namespace, {"size": 1}, annotations=ALLOWED))
    reported = {"phase": "Ready"}

    async def scenario() -> None:
        async with Harness(dev_env, namespace, twin) as harness:
            harness.settings(entry("widgets", reflectStatus=False), entry("gadgets", reflectStatus=True))
            widgets = await harness.reflector("widgets")
            gadgets = await harness.reflector("gadgets")
            await wait_until_async(
                lambda: get_or_none(there, Widget, "w", twin) and get_or_none(there, Gadget, "g", twin)
            )
            # the foreign operator reports: through the status subresource, or the object itself
            there.patch(Widget.Status, "w", {"status": reported}, namespace=twin, patch_type=PatchType.MERGE)
            there.patch(Gadget, "g", {"status": reported}, namespace=twin, patch_type=PatchType.MERGE)
            with_status = lambda obj: obj.get("status") == reported  # noqa: E731
            await decided(widgets, "foreign", namespace, f"{twin}/w", with_status)
            await decided(gadgets, "foreign", namespace, f"{twin}/g", with_status)
            assert home.get(Widget, "w", namespace=namespace).get("status") is None, "reflectStatus false"
            assert home.get(Gadget, "g", namespace=namespace).get("status") is None, "no status subresource at home"
            assert harness.writes("widgets", "status") == harness.writes("gadgets", "status") == 0
            # asked for: the widget's status comes home (the changed setting requeues its objects)
            harness.settings(entry("widgets", reflectStatus=True), entry("gadgets", reflectStatus=True))
            await widgets.queue.wait_idle(30)
            await gadgets.queue.wait_idle(30)
            assert home.get(Widget, "w", namespace=namespace).get("status") == reported
            assert home.get(Gadget, "g", namespace=namespace).get("status") is None
            assert (harness.writes("widgets", "status"), harness.writes("gadgets", "status")) == (1, 0)

    asyncio.run(scenario())


def test_only_the_namespaces_status_source_brings_the_status_home(
    crds: None, dev_env: DevEnvironment, home: Client, foreign: dict[str, Client], namespaces: tuple[str, str]
) -> None:
    """With several clusters, one gives the status (the manager's `status_source`); when that changes
    (an offloading changed), the types whose status comes back look again."""
    namespace, twin = namespaces
    there = foreign["foreign-1"]
    home.create(custom_object(Widget, "sourced", namespace, {"size": 1}, annotations=ALLOWED))
    reported = {"phase": "Ready"}

    async def scenario() -> None:
        async with Harness(dev_env, namespace, twin) as harness:
            harness.status_source = False  # another cluster gives it
            harness.settings(entry("widgets", reflectStatus=True))
            widgets = await harness.reflector("widgets")
            await wait_until_async(lambda: get_or_none(there, Widget, "sourced", twin))
            there.patch(Widget.Status, "sourced", {"status": reported}, namespace=twin, patch_type=PatchType.MERGE)
            await decided(widgets, "foreign", namespace, f"{twin}/sourced", lambda obj: obj.get("status") == reported)
            assert home.get(Widget, "sourced", namespace=namespace).get("status") is None, "not the source"
            harness.status_source = True
            harness.resources.status_source_changed(namespace)
            await widgets.queue.wait_idle(30)
            assert home.get(Widget, "sourced", namespace=namespace).get("status") == reported

    asyncio.run(scenario())


def test_workers_0_holds_a_type_back_and_removes_nothing_until_workers_come_back(
    crds: None, dev_env: DevEnvironment, home: Client, foreign: dict[str, Client], namespaces: tuple[str, str]
) -> None:
    namespace, twin = namespaces
    there = foreign["foreign-1"]
    home.create(custom_object(Widget, "before", namespace, {"size": 1}, annotations=ALLOWED))

    async def scenario() -> None:
        async with Harness(dev_env, namespace, twin) as harness:
            harness.settings(entry("widgets", workers=3))
            widgets = await harness.reflector("widgets")
            await wait_until_async(lambda: get_or_none(there, Widget, "before", twin), what="reflected")
            harness.settings(entry("widgets", workers=0))
            home.create(custom_object(Widget, "held", namespace, {"size": 2}, annotations=ALLOWED))
            await decided(widgets, "home", namespace, f"{namespace}/held")
            home.delete(Widget, "before", namespace=namespace)
            await wait_until_async(lambda: widgets.scopes[namespace]["home"].store.get(f"{namespace}/before") is None)
            await widgets.queue.wait_idle(30)
            assert get_or_none(there, Widget, "held", twin) is None, "workers 0: nothing reflected"
            assert get_or_none(there, Widget, "before", twin) is not None, "workers 0: nothing removed"
            harness.settings(entry("widgets", workers=2))  # a type's changed settings requeue its objects
            await wait_until_async(
                lambda: get_or_none(there, Widget, "held", twin) and get_or_none(there, Widget, "before", twin) is None,
                what="the held-back widget reflected and the deleted one's copy removed",
            )

    asyncio.run(scenario())


def test_a_widget_the_twin_already_holds_that_is_not_ours_is_left_alone_and_reported(
    crds: None, dev_env: DevEnvironment, home: Client, foreign: dict[str, Client], namespaces: tuple[str, str]
) -> None:
    namespace, twin = namespaces
    there = foreign["foreign-1"]
    there.create(custom_object(Widget, "theirs", twin, {"owner": "foreign team"}))
    home.create(custom_object(Widget, "theirs", namespace, {"owner": "home"}, annotations=ALLOWED))

    async def scenario() -> None:
        async with Harness(dev_env, namespace, twin) as harness:
            harness.settings(entry("widgets"))
            widgets = await harness.reflector("widgets")
            await decided(widgets, "home", namespace, f"{namespace}/theirs")
            assert harness.writes("widgets", "apply") == harness.writes("widgets", "delete") == 0

    asyncio.run(scenario())
    untouched: Any = there.get(Widget, "theirs", namespace=twin)
    assert untouched["spec"] == {"owner": "foreign team"}
    assert names.ORIGIN_LABEL not in (untouched.metadata.labels or {})

    def conflict() -> Any:
        events: list[Any] = list(home.list(Event, namespace=namespace, fields={"involvedObject.name": "theirs"}))
        return next((e for e in events if e.reason == "ReflectionConflict"), None)

    event = wait_until(conflict, 30, "a ReflectionConflict event on the home widget")
    assert event.type == "Warning" and event.involvedObject.kind == "Widget"
    assert f"foreign-1 already holds a Widget {twin}/theirs that liqo did not create" in event.message
