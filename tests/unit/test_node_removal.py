"""The end of a peering (runtime/virtualkubelet/removal.py): what the drain does to each pod, when
the twins count as gone, and how a bare pod ends."""

from __future__ import annotations

from typing import Any

import pytest

from runtime.api import names
from runtime.forging.pods import aborted_status
from runtime.virtualkubelet.removal import REMOVED_REASON, drain_action, has_finalizer, removed_message, twins_left

OWNER = {"apiVersion": "apps/v1", "kind": "ReplicaSet", "name": "web-1", "uid": "u", "controller": True}


def pod(
    phase: str = "Running", *, owners: list[dict[str, Any]] | None = None, deleting: bool = False
) -> dict[str, Any]:
    meta: dict[str, Any] = {"name": "p", "namespace": "apps", "ownerReferences": owners or []}
    if deleting:
        meta["deletionTimestamp"] = "2026-01-01T00:00:00Z"
    return {"metadata": meta, "status": {"phase": phase}}


@pytest.mark.parametrize(
    ("body", "action"),
    [
        (pod(owners=[OWNER]), "evict"),  # its controller makes a new one elsewhere
        (pod("Pending", owners=[OWNER]), "evict"),
        (pod(), "fail"),  # nothing would recreate it
        (pod("Pending"), "fail"),
        (pod(owners=[{**OWNER, "controller": False}]), "fail"),  # an owner that is no controller
        (pod("Succeeded", owners=[OWNER]), "keep"),  # finished: its status is final
        (pod("Failed"), "keep"),
        (pod(owners=[OWNER], deleting=True), "wait"),  # released once its remote copy is gone
        (pod("Failed", deleting=True), "wait"),
    ],
)
def test_what_the_drain_does_to_a_pod(body: dict[str, Any], action: str) -> None:
    assert drain_action(body) == action


def test_a_bare_pod_ends_failed_with_the_removal_as_its_reason() -> None:
    running = {
        "phase": "Running",
        "conditions": [{"type": "Ready", "status": "True"}, {"type": "PodScheduled", "status": "True"}],
        "containerStatuses": [
            {"name": "c", "ready": True, "state": {"running": {"startedAt": "2026-01-01T00:00:00Z"}}}
        ],
    }
    ended = aborted_status(running, removed_message("foreign-2"), "2026-01-02T00:00:00Z", REMOVED_REASON)
    assert (ended["phase"], ended["reason"]) == ("Failed", "VirtualNodeRemoved")
    assert "foreign-2" in ended["message"]
    assert ended["conditions"][0]["status"] == "False" and ended["conditions"][0]["reason"] == REMOVED_REASON
    terminated = ended["containerStatuses"][0]["state"]["terminated"]
    assert terminated["reason"] == REMOVED_REASON and terminated["startedAt"] == "2026-01-01T00:00:00Z"


def test_the_twins_count_as_gone_once_neither_requested_nor_reported() -> None:
    assert twins_left(None) == [], "no NamespaceMap: never offloaded there, or the tenant already gone"
    assert twins_left({"spec": {"desiredMapping": {}}, "status": {"currentMapping": {}}}) == []
    requested = {"spec": {"desiredMapping": {"apps": "apps-home"}}, "status": {}}
    assert twins_left(requested) == ["apps"]
    being_deleted = {"spec": {"desiredMapping": {}}, "status": {"currentMapping": {"apps": {"phase": "Terminating"}}}}
    assert twins_left(being_deleted) == ["apps"], "withdrawn, but its twin is still being deleted"


def test_only_our_finalizer_holds_the_virtual_node() -> None:
    class Meta:
        def __init__(self, finalizers: list[str] | None) -> None:
            self.finalizers = finalizers

    class VirtualNode:
        def __init__(self, finalizers: list[str] | None) -> None:
            self.metadata = Meta(finalizers)

    assert has_finalizer(VirtualNode([names.VIRTUAL_NODE_FINALIZER, "other.io/x"]))
    assert not has_finalizer(VirtualNode(["other.io/x"]))
    assert not has_finalizer(VirtualNode(None))


def test_a_virtual_kubelet_may_remove_its_own_node_and_hold_its_own_virtual_node_only() -> None:
    """Cluster mode runs the virtual kubelet as its ServiceAccount: removal.py's finalizer patch and
    Node delete must be in its ClusterRole (the image test caught their absence), for its own only."""
    from liqo_stack.declaring import manifests

    rules = manifests.virtual_kubelet_rules("foreign-1")

    def allowed(group: str, resource: str, verb: str, name: str) -> bool:
        return any(
            group in rule["apiGroups"]
            and resource in rule["resources"]
            and verb in rule["verbs"]
            and name in rule.get("resourceNames", [name])
            for rule in rules
        )

    assert allowed(names.GROUP, "virtualnodes", "patch", "liqo-foreign-1")
    assert allowed("", "nodes", "delete", "liqo-foreign-1")
    assert not allowed(names.GROUP, "virtualnodes", "patch", "liqo-foreign-2")
    assert not allowed("", "nodes", "delete", "fake-node-1")


class Home:
    """The home API server's answers to a removal's writes, recorded; the foreign one never answers."""

    def __init__(self, pods: list[Any]) -> None:
        self.pods = pods
        self.calls: list[tuple[str, str, Any]] = []

    async def list(self, *_: Any, **__: Any) -> Any:
        for found in self.pods:
            yield found

    async def delete(self, resource: Any, name: str, **kwargs: Any) -> None:
        self.calls.append(("delete", name, kwargs.get("grace_period")))

    async def patch(self, resource: Any, name: str, body: Any, **_: Any) -> None:
        self.calls.append(("patch", name, body))

    async def create(self, obj: Any, **_: Any) -> Any:
        self.calls.append(("create", type(obj).__name__, obj))
        return obj


class Unreachable:
    async def get(self, *_: Any, **__: Any) -> Any:
        raise ConnectionError("the foreign API server does not answer")


def deleting_virtual_node(after: str | None) -> Any:
    from runtime.api.resources import VirtualNodeResource

    annotations = {names.ABANDON_UNREACHABLE_AFTER_ANNOTATION: after} if after is not None else {}
    meta = {
        "name": "liqo-foreign-2",
        "namespace": names.LIQO_NAMESPACE,
        "finalizers": [names.VIRTUAL_NODE_FINALIZER],
        "deletionTimestamp": "2026-11-27T00:00:00Z",
        "resourceVersion": "9",
        "annotations": annotations,
    }
    return VirtualNodeResource.from_dict({"metadata": meta, "spec": {"clusterID": "foreign-2"}})


def removal(home: Home, unreachable_for: float | None) -> Any:
    from typing import cast

    from runtime.virtualkubelet.removal import NodeRemoval

    return NodeRemoval(
        cast(Any, home),
        cast(Any, Unreachable()),
        home_cluster_id="home",
        foreign_cluster_id="foreign-2",
        unreachable_for=lambda: unreachable_for,
    )


def test_an_unreachable_cluster_is_waited_for_unless_the_stack_said_to_abandon_it() -> None:
    """The Node gone, the twins can only be known from the foreign cluster: without the setting (or
    before its time) the removal waits for it; once due, the VirtualNode is released and a Warning
    event says what stays behind there."""
    import asyncio

    from runtime.virtualkubelet.removal import ABANDONED_REASON, abandon_after

    assert abandon_after(deleting_virtual_node(None)) is None
    assert abandon_after(deleting_virtual_node("not a number")) is None
    assert abandon_after(deleting_virtual_node("600")) == 600
    for after, unreachable in ((None, 3600.0), ("600", 30.0), ("600", None)):
        home = Home([])
        with pytest.raises(ConnectionError):  # it asks the foreign cluster for the twins, and waits
            asyncio.run(removal(home, unreachable).step(deleting_virtual_node(after), None))
        assert home.calls == []
    home = Home([])
    assert asyncio.run(removal(home, 601.0).step(deleting_virtual_node("600"), None)) is True
    [event] = [obj for verb, _, obj in home.calls if verb == "create"]
    assert event.reason == ABANDONED_REASON and "offloading.liqo.io/origin=home" in event.message
    assert "liqo-tenant-home" in event.message
    [released] = [body for verb, name, body in home.calls if verb == "patch" and name == "liqo-foreign-2"]
    assert released["metadata"]["finalizers"] is None


def test_an_abandoned_clusters_terminating_pods_are_released_from_the_node() -> None:
    import asyncio

    from lightkube.resources.core_v1 import Node, Pod

    terminating = Pod.from_dict(pod(owners=[OWNER], deleting=True))
    node = Node.from_dict({"metadata": {"name": "liqo-foreign-2"}, "spec": {"unschedulable": True}})
    waiting = Home([terminating])
    assert asyncio.run(removal(waiting, 30.0).step(deleting_virtual_node("600"), node)) is False
    assert waiting.calls == [], "not due: the pod waits for its remote copy"
    due = Home([terminating])
    assert asyncio.run(removal(due, 601.0).step(deleting_virtual_node("600"), node)) is False
    assert ("delete", "p", 0) in due.calls
