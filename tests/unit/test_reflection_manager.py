"""The ReflectionManager's own contract: which twins its members follow, when, and what a change of
the VirtualNode's settings sets going (runtime/reflection/manager.py). Its members here record what
they are told; the reflectors are the real ones, their requeues recorded."""

from __future__ import annotations

import asyncio
import functools
from typing import Any, cast

from runtime.api import VirtualNodeSpec, names
from runtime.api.resources import NamespaceOffloadingResource
from runtime.kube import Event
from runtime.kube.twins import Twins
from runtime.reflection import Peering, ReflectionManager


class Offloadings:
    """An ObjectSource of NamespaceOffloadings: a store and the handlers of its events."""

    def __init__(self) -> None:
        self.store: dict[str, Any] = {}
        self.handlers: list[Any] = []

    def add_handler(self, handler: Any) -> None:
        self.handlers.append(handler)

    def put(self, namespace: str, status: dict[str, Any], *, deleting: bool = False) -> None:
        metadata: dict[str, Any] = {"name": names.NAMESPACE_OFFLOADING_NAME, "namespace": namespace}
        if deleting:
            metadata["deletionTimestamp"] = "2026-11-27T00:00:00Z"
        obj = NamespaceOffloadingResource.from_dict({"metadata": metadata, "spec": {}, "status": status})
        key = f"{namespace}/{names.NAMESPACE_OFFLOADING_NAME}"
        self.store[key] = obj
        for handler in self.handlers:
            handler(Event("MODIFIED", key, obj))


class Member:
    def __init__(self) -> None:
        self.followed: list[dict[str, str]] = []
        self.settings_told = self.retries_told = 0
        self.started = self.stopped = False

    async def start(self) -> None:
        self.started = True

    def follow(self, twins: Twins) -> None:
        self.followed.append(dict(twins))

    def on_settings(self) -> None:
        self.settings_told += 1

    def retry_failed(self) -> int:
        self.retries_told += 1
        return 2  # keys it let go

    async def stop(self) -> None:
        self.stopped = True


def ready_in(*clusters: str, twin: str = "app-home", required: tuple[str, ...] = ()) -> dict[str, Any]:
    conditions = {
        c: [{"type": "OffloadingRequired", "status": "True"}, {"type": "Ready", "status": "True"}] for c in clusters
    }
    for c in required:  # selected, its twin not Ready (e.g. the cluster unreachable)
        conditions[c] = [{"type": "OffloadingRequired", "status": "True"}, {"type": "Ready", "status": "False"}]
    return {"remoteNamespaceName": twin, "offloadingPhase": "Ready", "remoteNamespacesConditions": conditions}


def manager_with(spec: dict[str, Any]) -> tuple[ReflectionManager, Offloadings, Member]:
    offloadings = Offloadings()
    peering = Peering(
        cast(Any, None),
        cast(Any, None),
        "home",
        "foreign-1",
        node_spec=lambda: VirtualNodeSpec.model_validate(spec["now"]),
    )
    manager = ReflectionManager(peering, cast(Any, offloadings), cast(Any, Offloadings()))
    member = Member()
    manager.members = [member]  # the real reflectors stay: their settings and requeues are the manager's
    return manager, offloadings, member


def test_members_follow_the_twins_ready_in_this_cluster_once_started() -> None:
    manager, offloadings, member = manager_with({"now": {"clusterID": "foreign-1"}})
    offloadings.put("app", ready_in("foreign-1"))
    offloadings.put("elsewhere", ready_in("foreign-2", twin="elsewhere-home"))
    assert member.followed == [], "nothing followed before the home informers synced (start)"
    asyncio.run(manager.start())
    assert member.started and member.followed[-1] == {"app": "app-home"}


def test_an_unready_twin_stays_followed_and_a_withdrawn_one_goes() -> None:
    """Nothing is lost while the cluster is unreachable: its twin stays followed until the offloading
    no longer selects the cluster, or is deleted."""
    manager, offloadings, member = manager_with({"now": {"clusterID": "foreign-1"}})
    offloadings.put("app", ready_in("foreign-1"))
    offloadings.put("web", ready_in("foreign-1", twin="web-home"))
    asyncio.run(manager.start())
    offloadings.put("app", ready_in(required=("foreign-1",)))  # unreachable: Ready False
    assert member.followed[-1] == {"app": "app-home", "web": "web-home"}
    offloadings.put("app", ready_in("foreign-2"))  # selects foreign-2 only now
    assert member.followed[-1] == {"web": "web-home"}
    offloadings.put("web", ready_in("foreign-1", twin="web-home"), deleting=True)
    assert member.followed[-1] == {}


def test_a_twin_never_ready_here_is_not_followed_while_waiting() -> None:
    manager, offloadings, member = manager_with({"now": {"clusterID": "foreign-1"}})
    asyncio.run(manager.start())
    offloadings.put("new", ready_in(required=("foreign-1",), twin="new-home"))
    assert member.followed[-1] == {}, "not Ready here yet, and not followed before: nothing to keep"


def test_settings_reach_every_member_and_requeue_only_the_kinds_whose_policy_changed() -> None:
    spec: dict[str, Any] = {"now": {"clusterID": "foreign-1"}}
    manager, _, member = manager_with(spec)
    requeued: list[str] = []
    for reflector in manager.reflectors:
        reflector.requeue_all = functools.partial(requeued.append, reflector.kind.name)  # type: ignore[method-assign]
    asyncio.run(manager.start())
    told = member.settings_told
    spec["now"] = {"clusterID": "foreign-1", "reflection": {"configmap": {"workers": 3}}}
    manager.on_settings()
    assert member.settings_told == told + 1
    assert requeued == [], "workers alone change nothing to reconcile"
    spec["now"] = {"clusterID": "foreign-1", "reflection": {"configmap": {"type": "AllowList", "workers": 3}}}
    manager.on_settings()
    followers = {r.kind.name for r in manager.reflectors if r.kind.follows and r.kind.follows[0] == "configmap"}
    assert set(requeued) == {"configmap", *followers}


def test_one_cluster_gives_a_namespaces_custom_objects_their_status() -> None:
    manager, offloadings, _ = manager_with({"now": {"clusterID": "foreign-1"}})
    offloadings.put("app", ready_in("foreign-1", "foreign-2"))
    assert manager.status_source("app"), "the first by id of the clusters Ready"
    offloadings.put("app", ready_in("foreign-0", "foreign-1"))
    assert not manager.status_source("app")
    assert not manager.status_source("absent")


def test_a_recovered_cluster_has_every_member_retry_what_failed_and_says_how_much() -> None:
    manager, _, member = manager_with({"now": {"clusterID": "foreign-1"}})
    assert manager.retry_failed() == 2
    assert member.retries_told == 1


class DrainingMember(Member):
    """A member whose stop drains until every member of its manager is draining: stopped one after
    another, the first would wait for ever (each drain ends only at its deadline when its foreign
    cluster does not answer)."""

    def __init__(self, draining: list[DrainingMember], size: int, fails: bool = False) -> None:
        super().__init__()
        self.draining, self.size, self.fails = draining, size, fails
        self.all_draining = asyncio.Event()

    async def stop(self) -> None:
        self.draining.append(self)
        if len(self.draining) == self.size:
            for member in self.draining:
                member.all_draining.set()
        await self.all_draining.wait()
        self.stopped = True
        if self.fails:
            raise RuntimeError("its queue's workers failed")


def test_members_stop_side_by_side_and_every_one_stops_when_one_fails() -> None:
    manager, _, _ = manager_with({"now": {"clusterID": "foreign-1"}})
    draining: list[DrainingMember] = []
    members = [DrainingMember(draining, 3), DrainingMember(draining, 3, fails=True), DrainingMember(draining, 3)]
    manager.members = list(members)

    async def stop() -> BaseException | None:
        try:
            async with asyncio.timeout(30):  # a bound on the test only: side by side, it ends in a few turns
                await manager.stop()
        except RuntimeError as failure:
            return failure
        return None

    failure = asyncio.run(stop())
    assert [member.stopped for member in members] == [True, True, True]
    assert isinstance(failure, RuntimeError), "the failed stop is raised once every member has stopped"
