"""The end of a peering: what the virtual kubelet does before its VirtualNode may go.

The virtual kubelet puts `names.VIRTUAL_NODE_FINALIZER` on its VirtualNode; when the VirtualNode is
deleted (the foreign cluster taken out of the stack config, `pulumi destroy`, or by hand), the
Node is removed as Kubernetes removes a node that leaves, in this order:
1. cordoned (spec.unschedulable), so the scheduler places nothing more there;
2. drained: a pod with a controller is deleted, so its controller makes a new one elsewhere (its
   remote copy goes and the pod is released as for any deleted pod); a bare pod, which nothing
   would recreate, ends Failed with reason VirtualNodeRemoved; finished pods stay as they are;
3. deleted, once no pod on it is still being deleted (so none is left Terminating on a Node that
   no longer exists); its Lease goes with it (owner reference);
4. the twin namespaces withdrawn: the controller-manager stops selecting a cluster whose
   VirtualNode is being deleted and whose Node is gone, so the foreign agent deletes the twins it
   made for this home (labelled with origin and destination), with the remote pods, ShadowPods and
   reflected objects in them. The finalizer goes once the foreign cluster's NamespaceMap reports
   no twin left.
Only a deletionTimestamp on the VirtualNode starts this: a restarted virtual kubelet that finds a
VirtualNode (or finds none yet) deletes nothing. Each step is decided again from what the API
servers say, so a removal interrupted by a restart resumes where it stood. A foreign cluster that
stays unreachable holds the finalizer, as an unoffload waits for it, unless the stack said to give
up on it (`liqo:foreignClusters[].abandonUnreachableAfter`, the VirtualNode's
`liqo-stack.io/abandon-unreachable-after` annotation): once its API server has not answered for that
long, step 4 is abandoned: a Warning event `PeeringAbandoned` on the VirtualNode says what stays
behind in that cluster, and the finalizer goes. The clock is this process's health checks: it
starts again with a restarted virtual kubelet.
"""

from __future__ import annotations

import datetime
import logging
from collections.abc import Callable
from typing import Any

from lightkube import ApiError, AsyncClient
from lightkube.resources.core_v1 import Node, Pod
from lightkube.types import PatchType

from runtime.api import names
from runtime.api.resources import NamespaceMapResource, VirtualNodeResource
from runtime.forging.pods import TERMINAL_PHASES, aborted_status, merge_patch
from runtime.kube import unless_gone
from runtime.kube.warnings import Warnings

log = logging.getLogger(__name__)

REMOVED_REASON = "VirtualNodeRemoved"
ABANDONED_REASON = "PeeringAbandoned"
POLL_SECONDS = 1.0  # between steps while pods, the Node or the twins are still going


def removed_message(foreign_cluster_id: str) -> str:
    return (
        f"the virtual node of {foreign_cluster_id} was removed (its peering ended): "
        "the pod was stopped there and, having no controller, is not recreated"
    )


def has_finalizer(virtual_node: Any) -> bool:
    return names.VIRTUAL_NODE_FINALIZER in (virtual_node.metadata.finalizers or [])


def abandon_after(virtual_node: Any) -> float | None:
    """The seconds an unreachable cluster is waited for before its twins are abandoned (None: forever)."""
    annotations = (virtual_node.metadata.annotations if virtual_node.metadata else None) or {}
    value = annotations.get(names.ABANDON_UNREACHABLE_AFTER_ANNOTATION)
    try:
        return float(value) if value is not None and float(value) >= 0 else None
    except ValueError:  # edited by hand into nonsense: wait, as without it
        return None


def left_behind(home_cluster_id: str, foreign_cluster_id: str) -> str:
    """What an abandoned peering leaves in the foreign cluster, as an administrator finds it there."""
    return (
        f"left behind in {foreign_cluster_id}, to delete there if it ever answers: the twin namespaces labelled "
        f"{names.ORIGIN_LABEL}={home_cluster_id},{names.DESTINATION_LABEL}={foreign_cluster_id} (with the "
        f"offloaded pods, ShadowPods and reflected objects in them) and the tenant namespace "
        f"{names.tenant_namespace(home_cluster_id)} (the home identity and its NamespaceMap)"
    )


def twins_left(namespace_map: dict[str, Any] | None) -> list[str]:
    """The home namespaces whose twin the foreign cluster still requests or still reports."""
    if namespace_map is None:
        return []
    desired = (namespace_map.get("spec") or {}).get("desiredMapping") or {}
    current = (namespace_map.get("status") or {}).get("currentMapping") or {}
    return sorted(set(desired) | set(current))


def drain_action(pod: dict[str, Any]) -> str:
    """What the drain does to a pod on the node: "wait" (being deleted: released once its remote
    copy is gone), "keep" (finished), "evict" (its controller recreates it) or "fail" (bare)."""
    if (pod.get("metadata") or {}).get("deletionTimestamp"):
        return "wait"
    if (pod.get("status") or {}).get("phase") in TERMINAL_PHASES:
        return "keep"
    owners = (pod.get("metadata") or {}).get("ownerReferences") or []
    return "evict" if any(o.get("controller") for o in owners) else "fail"


class NodeRemoval:
    """Removes the Node of a VirtualNode being deleted, then releases the VirtualNode (module docstring)."""

    def __init__(
        self,
        home: AsyncClient,
        foreign: AsyncClient,
        *,
        home_cluster_id: str,
        foreign_cluster_id: str,
        node_name: str | None = None,
        siblings_stay: Callable[[], bool] = lambda: False,
        unreachable_for: Callable[[], float | None] = lambda: None,
    ) -> None:
        """`siblings_stay`: whether another virtual node of the cluster (a node pool) stays, which keeps
        the twins: this node's removal then ends with its Node. `unreachable_for`: seconds since the
        foreign API server last answered a health check (None: it answers)."""
        self.unreachable_for = unreachable_for
        self.warnings = Warnings(home, "liqo-virtual-kubelet")
        self.home, self.foreign = home, foreign
        self.home_cluster_id, self.foreign_cluster_id = home_cluster_id, foreign_cluster_id
        self.node_name = node_name or names.virtual_node_name(foreign_cluster_id)
        self.siblings_stay = siblings_stay
        self.poll_seconds = POLL_SECONDS

    @staticmethod
    def holds(virtual_node: Any) -> bool:
        """Whether the VirtualNode still waits for this removal (our finalizer is on it)."""
        return has_finalizer(virtual_node)

    async def step(self, virtual_node: Any, node: Any | None) -> bool:
        """One pass over the removal; True once the finalizer is released."""
        if node is not None:
            await self._cordon(node)
            abandoning = not self.siblings_stay() and self._abandon_due(virtual_node)
            if await self._drain(release_terminating=abandoning):
                return False
            log.info("virtual node %s drained: deleting it", self.node_name)
            with unless_gone():
                await self.home.delete(Node, self.node_name)
            return False  # the twins' withdrawal follows the Node's deletion (controller-manager)
        if not self.siblings_stay() and self._abandon_due(virtual_node):
            await self._abandon(virtual_node)
            return True
        left = [] if self.siblings_stay() else twins_left(await self._namespace_map())
        if left:
            log.info("virtual node %s removed; waiting for the twins of %s to go", self.node_name, left)
            return False
        await self.release(virtual_node)
        log.info("virtual node %s removed: its VirtualNode released", self.node_name)
        return True

    def _abandon_due(self, virtual_node: Any) -> bool:
        after, unreachable = abandon_after(virtual_node), self.unreachable_for()
        return after is not None and unreachable is not None and unreachable >= after

    async def _abandon(self, virtual_node: Any) -> None:
        message = (
            f"the removal of {self.node_name} gave up on {self.foreign_cluster_id}, which has not answered for "
            f"{self.unreachable_for() or 0:.0f} s (abandonUnreachableAfter): "
            + left_behind(self.home_cluster_id, self.foreign_cluster_id)
        )
        log.warning("%s", message)
        try:
            await self.warnings.warn(virtual_node.to_dict(), ABANDONED_REASON, message[:1024])
        except Exception as err:  # the log says it too; the release must not wait on an event
            log.warning("could not record the abandon of %s as an event: %s", self.node_name, err)
        await self.release(virtual_node)

    async def ensure_finalizer(self, virtual_node: Any) -> None:
        """Held from the first time the virtual kubelet serves the VirtualNode on. The merge patch
        carries the resourceVersion: a finalizer someone added meanwhile is never overwritten."""
        if has_finalizer(virtual_node):
            return
        await self._set_finalizers(
            virtual_node, [*(virtual_node.metadata.finalizers or []), names.VIRTUAL_NODE_FINALIZER]
        )

    async def release(self, virtual_node: Any) -> None:
        kept = [f for f in virtual_node.metadata.finalizers or [] if f != names.VIRTUAL_NODE_FINALIZER]
        with unless_gone():
            await self._set_finalizers(virtual_node, kept or None)

    async def _set_finalizers(self, virtual_node: Any, finalizers: list[str] | None) -> None:
        meta = {"finalizers": finalizers, "resourceVersion": virtual_node.metadata.resourceVersion}
        await self.home.patch(
            VirtualNodeResource,
            virtual_node.metadata.name,
            {"metadata": meta},
            namespace=virtual_node.metadata.namespace,
            patch_type=PatchType.MERGE,
        )

    async def _cordon(self, node: Any) -> None:
        if not (node.spec and node.spec.unschedulable):
            with unless_gone():
                await self.home.patch(
                    Node, self.node_name, {"spec": {"unschedulable": True}}, patch_type=PatchType.MERGE
                )

    async def _drain(self, *, release_terminating: bool = False) -> bool:
        """Evict or fail every pod on the node; True while some are still going. `release_terminating`:
        the cluster is abandoned, so a pod waiting for its remote copy to go is released now (as the
        home pod garbage collector releases the pods of an out-of-service node)."""
        pods: list[Any] = [
            p async for p in self.home.list(Pod, namespace="*", fields={"spec.nodeName": self.node_name})
        ]
        going = False
        for pod in pods:
            body = pod.to_dict()
            action = drain_action(body)
            namespace, name = pod.metadata.namespace, pod.metadata.name
            if action in ("wait", "evict"):
                going = True
            if action == "wait" and release_terminating:
                log.warning("draining %s: pod %s/%s released, its cluster abandoned", self.node_name, namespace, name)
                with unless_gone():
                    await self.home.delete(Pod, name, namespace=namespace, grace_period=0)
            if action == "evict":
                log.info(
                    "draining %s: pod %s/%s deleted for its controller to recreate", self.node_name, namespace, name
                )
                with unless_gone():
                    await self.home.delete(Pod, name, namespace=namespace)
            elif action == "fail":
                log.info("draining %s: bare pod %s/%s ends Failed", self.node_name, namespace, name)
                status = body.get("status") or {}
                stamp = datetime.datetime.now(datetime.UTC).strftime("%Y-%m-%dT%H:%M:%SZ")
                failed = aborted_status(status, removed_message(self.foreign_cluster_id), stamp, REMOVED_REASON)
                with unless_gone():
                    await self.home.patch(
                        Pod.Status,
                        name,
                        {"status": merge_patch(status, failed)},
                        namespace=namespace,
                        patch_type=PatchType.MERGE,
                    )
        return going

    async def _namespace_map(self) -> dict[str, Any] | None:
        tenant = names.tenant_namespace(self.home_cluster_id)
        try:
            found = await self.foreign.get(
                NamespaceMapResource, names.namespace_map_name(self.home_cluster_id), namespace=tenant
            )
        except ApiError as err:
            if err.status.code == 404:
                return None  # never offloaded to, or the tenant already gone: no twin of ours
            raise
        return dict(found.to_dict())
