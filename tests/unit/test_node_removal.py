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
    from liqo_stack import manifests

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
