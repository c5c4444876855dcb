"""A reconcile that finds the store behind our own write decides nothing (a create answered 409
AlreadyExists, a ShadowPod not yet showing our patch), so the echo of that write must bring the
key back, not be dropped as an echo. A remote pod the foreign scheduler cannot place gets no later
event that would (seen in CI: the home pod never showed PodScheduled=False)."""

from __future__ import annotations

import asyncio
import copy
from collections.abc import Callable
from typing import Any, cast

from lightkube import ApiError
from lightkube.models.meta_v1 import Status
from lightkube.resources.core_v1 import Pod

from runtime.api import VirtualNodeSpec
from runtime.api.resources import NamespaceOffloadingResource, ShadowPodResource
from runtime.controllers.shadowpod import ShadowPodController
from runtime.kube import Event, Informer
from runtime.kube.twins import TwinScope
from runtime.reflection import Peering
from runtime.virtualkubelet.pods import PodOffloader

NAMESPACE, TWIN, NODE = "ns", "ns-twin", "liqo-foreign-1"


class ForeignCreates:
    """Answers creates as an API server does: the first gets a resourceVersion, any next one 409; and
    patches, each a new resourceVersion from 150 up (`before_answer`: what happens between the
    patch and its answer). The stores are what this test drives; this stands only for the answers."""

    def __init__(self) -> None:
        self.created: list[Any] = []
        self.patches: list[Any] = []
        self.before_answer: Callable[[Any], None] = lambda patched: None

    async def patch(self, resource: Any, name: str, patch: Any, **_: Any) -> Any:
        body = copy.deepcopy(self.created[0].to_dict())
        body["metadata"]["labels"] = {**body["metadata"].get("labels", {}), **patch["metadata"]["labels"]}
        body["metadata"]["resourceVersion"] = str(150 + len(self.patches))
        self.patches.append(patch)
        patched = resource.from_dict(body)
        self.before_answer(patched)
        return patched

    async def create(self, obj: Any) -> Any:
        if any(o.metadata.name == obj.metadata.name for o in self.created):
            raise ApiError(status=Status(code=409, reason="AlreadyExists", message="already exists"))
        body = obj.to_dict()
        body["metadata"]["resourceVersion"] = str(100 + len(self.created))
        self.created.append(type(obj).from_dict(body))
        return self.created[-1]


def home_pod() -> Any:
    return Pod.from_dict(
        {
            "metadata": {"name": "p", "namespace": NAMESPACE, "uid": "u-1", "resourceVersion": "7"},
            "spec": {"nodeName": NODE, "containers": [{"name": "c", "image": "i"}]},
            "status": {"phase": "Pending", "conditions": [{"type": "PodScheduled", "status": "True"}]},
        }
    )


def offloader(foreign: ForeignCreates) -> tuple[PodOffloader, TwinScope]:
    peering = Peering(
        cast(Any, None),
        cast(Any, foreign),
        "home",
        "foreign-1",
        node_names=(NODE,),
        spec_of=lambda _: VirtualNodeSpec.model_validate({"clusterID": "foreign-1"}),
    )
    pods = PodOffloader(peering, Informer(cast(Any, None), NamespaceOffloadingResource), node_address="127.0.0.1")
    scope = TwinScope(NAMESPACE, TWIN, pods.open_scope(NAMESPACE, TWIN), pods.written)
    for name, informer in scope.informers.items():  # as scope.start wires them, without the watches
        informer.add_handler(lambda event, name=name: pods.on_event(scope, name, event))  # type: ignore[misc]
    pods.scopes[NAMESPACE] = scope
    return pods, scope


def deliver(informer: Any, event_type: str, obj: Any) -> None:
    """The event as the informer's watch hands it over: stored first, then dispatched."""
    key = f"{obj.metadata.namespace}/{obj.metadata.name}"
    informer.store[key] = informer._stored(obj)
    informer._dispatch([Event(cast(Any, event_type), key, informer.store[key])])


def test_the_echo_of_a_shadowpod_create_the_store_had_not_shown_brings_the_pod_back() -> None:
    async def scenario() -> tuple[bool, bool]:
        foreign = ForeignCreates()
        pods, scope = offloader(foreign)
        await pods._create_shadow(home_pod(), scope)  # the first reconcile: created
        # the remote pod's event came first and queued the pod again; its shadow not in the store
        await pods._create_shadow(home_pod(), scope)  # 409: ours, not shown yet
        queued_at_once = f"{NAMESPACE}/p" in pods.queue._queued
        deliver(scope["shadows"], "ADDED", ShadowPodResource.from_dict(foreign.created[0].to_dict()))
        return queued_at_once, f"{NAMESPACE}/p" in pods.queue._queued

    queued_at_once, queued_by_the_echo = asyncio.run(scenario())
    assert not queued_at_once, "nothing to decide until the store shows the ShadowPod"
    assert queued_by_the_echo, "the echo of the create brings the pod back"


def test_a_shadowpod_create_echoed_while_the_409_was_on_its_way_brings_the_pod_back_at_once() -> None:
    async def scenario() -> bool:
        foreign = ForeignCreates()
        pods, scope = offloader(foreign)
        await pods._create_shadow(home_pod(), scope)
        deliver(scope["shadows"], "ADDED", ShadowPodResource.from_dict(foreign.created[0].to_dict()))
        assert f"{NAMESPACE}/p" not in pods.queue._queued, "an echo, with nothing waiting on it"
        await pods._create_shadow(home_pod(), scope)  # a reconcile that read the store just before
        return f"{NAMESPACE}/p" in pods.queue._queued

    assert asyncio.run(scenario())


def test_the_agent_is_brought_back_by_the_echo_of_a_pod_create_the_store_had_not_shown() -> None:
    async def scenario() -> tuple[bool, bool]:
        foreign = ForeignCreates()
        agent = ShadowPodController(cast(Any, foreign), "foreign-1")
        shadow = ShadowPodResource.from_dict(
            {
                "metadata": {"name": "p", "namespace": TWIN, "uid": "s-1"},
                "spec": {"pod": {"containers": [{"name": "c", "image": "i"}]}},
            }
        )
        await agent._create_pod(shadow)
        await agent._create_pod(shadow)  # 409: ours, the pod informer behind
        queued_at_once = f"{TWIN}/p" in agent.queue._queued
        deliver(agent.pods, "ADDED", Pod.from_dict(foreign.created[0].to_dict()))
        return queued_at_once, f"{TWIN}/p" in agent.queue._queued

    queued_at_once, queued_by_the_echo = asyncio.run(scenario())
    assert not queued_at_once
    assert queued_by_the_echo


def test_a_shadowpod_the_store_shows_before_our_patch_is_compared_once_the_patch_is_in() -> None:
    async def scenario() -> tuple[int, bool, int]:
        foreign = ForeignCreates()
        pods, scope = offloader(foreign)
        await pods._create_shadow(home_pod(), scope)
        deliver(scope["shadows"], "ADDED", ShadowPodResource.from_dict(foreign.created[0].to_dict()))
        await pods._update_shadow(relabelled("web"), scope["shadows"].store[f"{TWIN}/p"], scope)  # patched
        # relabelled again before the store shows the patch: nothing to compare it with yet
        await pods._update_shadow(relabelled("db"), scope["shadows"].store[f"{TWIN}/p"], scope)
        patched_early = len(foreign.patches)
        deliver(scope["shadows"], "MODIFIED", ShadowPodResource.from_dict(patched_body(foreign, "web", "150")))
        queued = f"{NAMESPACE}/p" in pods.queue._queued
        await pods._update_shadow(relabelled("db"), scope["shadows"].store[f"{TWIN}/p"], scope)
        return patched_early, queued, len(foreign.patches)

    patched_early, queued_by_the_echo, patches = asyncio.run(scenario())
    assert patched_early == 1, "no patch made from a store behind the last one"
    assert queued_by_the_echo, "compared again once the store shows our patch"
    assert patches == 2, "then the second change is carried"


def test_a_patch_whose_echo_came_before_its_answer_holds_nothing_back() -> None:
    """The record is made after the echo (and the agent's status write after it) came: it matches no
    event to come, and a later change of the home pod is compared at once all the same."""

    async def scenario() -> int:
        foreign = ForeignCreates()
        pods, scope = offloader(foreign)
        await pods._create_shadow(home_pod(), scope)
        shadows = scope["shadows"]
        deliver(shadows, "ADDED", ShadowPodResource.from_dict(foreign.created[0].to_dict()))

        def echoed_first(patched: Any) -> None:
            deliver(shadows, "MODIFIED", patched)
            by_the_agent = copy.deepcopy(patched.to_dict())
            by_the_agent["metadata"]["resourceVersion"] = "199"
            deliver(shadows, "MODIFIED", ShadowPodResource.from_dict(by_the_agent))

        foreign.before_answer = echoed_first
        await pods._update_shadow(relabelled("web"), shadows.store[f"{TWIN}/p"], scope)
        foreign.before_answer = lambda patched: None
        await pods._update_shadow(relabelled("db"), shadows.store[f"{TWIN}/p"], scope)
        return len(foreign.patches)

    assert asyncio.run(scenario()) == 2


def relabelled(tier: str) -> Any:
    pod = home_pod()
    pod.metadata.labels = {"tier": tier}
    pod.metadata.resourceVersion = f"7-{tier}"
    return pod


def patched_body(foreign: ForeignCreates, tier: str, version: str) -> dict[str, Any]:
    body: dict[str, Any] = copy.deepcopy(foreign.created[0].to_dict())
    body["metadata"]["labels"] = {**body["metadata"].get("labels", {}), "tier": tier}
    body["metadata"]["resourceVersion"] = version
    return body


class HomeDeletes:
    """The home API server's answers to the offloader's writes: deletes recorded, patches accepted."""

    def __init__(self) -> None:
        self.deleted: list[str] = []

    async def delete(self, resource: Any, name: str, **_: Any) -> None:
        self.deleted.append(name)

    async def patch(self, resource: Any, name: str, patch: Any, **_: Any) -> Any:
        return None


def test_a_deleted_pod_that_ran_waits_for_a_twin_not_followed_yet_and_one_that_never_ran_goes() -> None:
    """A process started while its foreign cluster is down follows no twin of it (none Ready): a home
    pod deleted meanwhile may still run there, so it stays Terminating (as on any unreachable node)
    rather than being released; one that never ran there is released at once."""
    home = HomeDeletes()
    peering = Peering(cast(Any, home), cast(Any, None), "home", "foreign-1", node_names=(NODE,))
    offloadings = Informer(cast(Any, None), NamespaceOffloadingResource)
    unreachable = [{"type": "OffloadingRequired", "status": "True"}, {"type": "Ready", "status": "False"}]
    offloadings.store[f"{NAMESPACE}/offloading"] = NamespaceOffloadingResource.from_dict(
        {
            "metadata": {"name": "offloading", "namespace": NAMESPACE},
            "spec": {},
            "status": {"remoteNamespaceName": TWIN, "remoteNamespacesConditions": {"foreign-1": unreachable}},
        }
    )
    pods = PodOffloader(peering, offloadings, node_address="127.0.0.1")

    def deleting(name: str, phase: str) -> Any:
        body = home_pod().to_dict()
        body["metadata"].update(name=name, deletionTimestamp="2026-11-27T00:00:00Z", deletionGracePeriodSeconds=30)
        body["status"]["phase"] = phase
        return Pod.from_dict(body)

    for pod in (deleting("ran", "Running"), deleting("never-ran", "Pending")):
        pods.node_pods[NODE].store[f"{NAMESPACE}/{pod.metadata.name}"] = pod
        asyncio.run(pods.reconcile(f"{NAMESPACE}/{pod.metadata.name}"))
    assert home.deleted == ["never-ran"]
