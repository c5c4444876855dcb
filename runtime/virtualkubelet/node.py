"""The virtual node: a Node standing for one foreign cluster, its Lease, and its health.

Labels and taints come from the VirtualNode; capacity and allocatable are the foreign cluster's
advertisement x the sharing percentage (fixed amounts win; a count that rounds to zero shows as
the ResourcesRoundedToZero condition). A health check reads the foreign API server every
interval; after `failure_threshold` failures in a row the node turns Ready=False, so the standard
taint-based eviction applies, and Ready again at the first success. The Node is written only when
what it shows changes; the Lease is the heartbeat.
"""

from __future__ import annotations

import asyncio
import datetime
import logging
from typing import Any

from lightkube import ApiError, AsyncClient
from lightkube.resources.coordination_v1 import Lease
from lightkube.resources.core_v1 import Node
from lightkube.types import PatchType

from runtime.api import VirtualNodeSpec, names
from runtime.api.plan import shared_resources, virtual_node_labels, virtual_node_taints
from runtime.kube import Informer, WorkQueue
from runtime.kube.resources import ResourceAdvertisementResource

log = logging.getLogger(__name__)

LEASE_NAMESPACE = "kube-node-lease"
LEASE_SECONDS = 40  # renewed every quarter, as the kubelet does
NODE_ADDRESS = "127.0.0.1"  # the virtual kubelet's own address: where its kubelet API listens
KUBELET_PORT = 10250
# Kubernetes 1.36: the API server passes exec/attach/port-forward WebSockets through to a kubelet
# that declares this (else it translates them to SPDY, which the kubelet API does not speak).
WEBSOCKET_FEATURE = "ExtendWebSocketsToKubelet"
PRESSURE_CONDITIONS = {
    "MemoryPressure": "KubeletHasSufficientMemory",
    "DiskPressure": "KubeletHasNoDiskPressure",
    "PIDPressure": "KubeletHasSufficientPID",
}


def now() -> str:
    return datetime.datetime.now(datetime.UTC).strftime("%Y-%m-%dT%H:%M:%SZ")


def micro_now() -> str:
    return datetime.datetime.now(datetime.UTC).strftime("%Y-%m-%dT%H:%M:%S.%fZ")


def node_conditions(healthy: bool, failures: int, rounded_to_zero: list[str]) -> list[dict[str, str]]:
    """The Node's conditions, without times (added when a status changes)."""
    ready = (
        {"status": "True", "reason": "KubeletReady", "message": "the foreign API server answers"}
        if healthy
        else {
            "status": "False",
            "reason": "ForeignClusterUnreachable",
            "message": f"the foreign API server failed {failures} health checks in a row",
        }
    )
    conditions = [{"type": "Ready", **ready}]
    conditions += [
        {"type": kind, "status": "False", "reason": reason, "message": "not applicable to a virtual node"}
        for kind, reason in PRESSURE_CONDITIONS.items()
    ]
    zeroed = ", ".join(rounded_to_zero)
    conditions.append(
        {
            "type": "ResourcesRoundedToZero",
            "status": "True" if rounded_to_zero else "False",
            "reason": "SharingRoundedDown" if rounded_to_zero else "NoneRoundedToZero",
            "message": (
                f"the foreign cluster offers {zeroed}, but the share rounds down to zero; "
                "set fixedResources for it in the stack config"
                if rounded_to_zero
                else "every offered resource has a usable share"
            ),
        }
    )
    return conditions


def with_times(old: list[dict[str, Any]], new: list[dict[str, str]]) -> list[dict[str, Any]]:
    """Keep each condition's times while it stays the same (no write for an unchanged node)."""
    previous = {c.get("type"): c for c in old}
    merged = []
    for condition in new:
        before = previous.get(condition["type"])
        if before and all(before.get(k) == v for k, v in condition.items()):
            merged.append(before)
        else:
            merged.append({**condition, "lastHeartbeatTime": now(), "lastTransitionTime": now()})
    return merged


class VirtualNodeController:
    def __init__(
        self,
        home: AsyncClient,
        foreign: AsyncClient,
        *,
        home_cluster_id: str,
        foreign_cluster_id: str,
        virtual_nodes: Informer,
        advertisements: Informer,
        address: str = NODE_ADDRESS,
        kubelet_port: int | None = KUBELET_PORT,
    ) -> None:
        """`address`: the InternalIP the home API server reaches the kubelet API at, on
        `kubelet_port` (None: no kubelet API is served, the Node declares no endpoint)."""
        self.address, self.kubelet_port = address, kubelet_port
        self.home, self.foreign = home, foreign
        self.home_cluster_id, self.foreign_cluster_id = home_cluster_id, foreign_cluster_id
        self.node_name = names.virtual_node_name(foreign_cluster_id)
        self.virtual_nodes, self.advertisements = virtual_nodes, advertisements
        self.nodes = Informer(home, Node, fields={"metadata.name": self.node_name})
        self.queue = WorkQueue(self.reconcile, workers=1, name="virtual-node")
        for informer in (self.virtual_nodes, self.advertisements, self.nodes):
            informer.add_handler(lambda _: self.queue.add(self.node_name))
        self.healthy = True
        self.failures = 0

    @property
    def informers(self) -> list[Informer]:
        return [self.nodes]

    def spec(self) -> VirtualNodeSpec | None:
        vn = self.virtual_nodes.store.get(f"{names.LIQO_NAMESPACE}/{self.node_name}")
        return VirtualNodeSpec.model_validate(vn["spec"]) if vn is not None else None

    def offered(self) -> dict[str, str]:
        tenant = names.tenant_namespace(self.home_cluster_id)
        advertisement = self.advertisements.store.get(f"{tenant}/{self.foreign_cluster_id}")
        return dict(((advertisement or {}).get("spec") or {}).get("resources") or {})

    def desired(self, spec: VirtualNodeSpec) -> tuple[dict[str, Any], dict[str, Any]]:
        """The Node's metadata+spec, and its status without condition times."""
        shared = shared_resources(self.offered(), spec.sharing_percentage, spec.fixed_resources)
        labels = {
            **virtual_node_labels(self.foreign_cluster_id, spec.labels),
            "kubernetes.io/hostname": self.node_name,
            "kubernetes.io/os": "linux",
            "kubernetes.io/arch": "amd64",
            "node.kubernetes.io/instance-type": "liqo-virtual-node",
        }
        body = {
            "metadata": {"name": self.node_name, "labels": labels},
            "spec": {"taints": [t.to_wire() for t in virtual_node_taints(spec.taints)]},
        }
        status = {
            "capacity": shared.capacity,
            "allocatable": shared.capacity,
            "conditions": node_conditions(self.healthy, self.failures, shared.rounded_to_zero),
            # no Hostname: the node's name resolves nowhere, and the API server would prefer it
            "addresses": [{"type": "InternalIP", "address": self.address}],
            "nodeInfo": {
                "architecture": "amd64",
                "operatingSystem": "linux",
                "kubeletVersion": "v1.36.3-liqo-stack",
                "kubeProxyVersion": "",
                "osImage": f"liqo-stack virtual node of {self.foreign_cluster_id}",
                "kernelVersion": "",
                "containerRuntimeVersion": "liqo://offloading",
                "machineID": self.foreign_cluster_id,
                "systemUUID": self.foreign_cluster_id,
                "bootID": "",
            },
        }
        if self.kubelet_port:
            status["daemonEndpoints"] = {"kubeletEndpoint": {"Port": self.kubelet_port}}
            status["declaredFeatures"] = [WEBSOCKET_FEATURE]
        return body, status

    async def reconcile(self, _: str) -> None:
        spec = self.spec()
        if spec is None:
            return  # no VirtualNode (yet, or unpeered): nothing to stand for
        body, status = self.desired(spec)
        current = self.nodes.store.get(self.node_name)
        if current is None:
            status["conditions"] = with_times([], status["conditions"])
            try:
                await self.home.create(Node.from_dict({**body, "status": status}))  # type: ignore[call-overload]
            except ApiError as err:
                if err.status.code != 409:
                    raise
            return
        live = current.to_dict()
        meta_changed = any(
            (live["metadata"].get("labels") or {}).get(k) != v for k, v in body["metadata"]["labels"].items()
        )
        ours = {(t["key"], t.get("effect")) for t in body["spec"]["taints"]}
        others = [t for t in (live.get("spec") or {}).get("taints") or [] if (t["key"], t.get("effect")) not in ours]
        taints = body["spec"]["taints"] + others  # the node lifecycle controller's taints stay
        if meta_changed or sorted(map(str, taints)) != sorted(map(str, (live.get("spec") or {}).get("taints") or [])):
            patch = {"metadata": {"labels": body["metadata"]["labels"]}, "spec": {"taints": taints}}
            await self.home.patch(Node, self.node_name, patch, patch_type=PatchType.MERGE)
        old = live.get("status") or {}
        status["conditions"] = with_times(old.get("conditions") or [], status["conditions"])
        if any(old.get(k) != v for k, v in status.items()):
            await self.home.patch(Node.Status, self.node_name, {"status": status}, patch_type=PatchType.MERGE)

    # -- heartbeat and health ---------------------------------------------------------------
    async def keep_lease(self) -> None:
        while True:
            try:
                await self._renew_lease()
            except Exception as err:  # the home API server away: try again at the next beat
                log.warning("lease renewal failed: %s", err)
            await asyncio.sleep(LEASE_SECONDS / 4)

    async def _renew_lease(self) -> None:
        node = self.nodes.store.get(self.node_name)
        if node is None:
            return
        spec = {"holderIdentity": self.node_name, "leaseDurationSeconds": LEASE_SECONDS, "renewTime": micro_now()}
        try:
            await self.home.patch(
                Lease, self.node_name, {"spec": spec}, namespace=LEASE_NAMESPACE, patch_type=PatchType.MERGE
            )
        except ApiError as err:
            if err.status.code != 404:
                raise
            owner = {"apiVersion": "v1", "kind": "Node", "name": self.node_name, "uid": node.metadata.uid}
            meta = {"name": self.node_name, "namespace": LEASE_NAMESPACE, "ownerReferences": [owner]}
            await self.home.create(Lease.from_dict({"metadata": meta, "spec": spec}))  # type: ignore[call-overload]

    async def check_health(self) -> None:
        tenant = names.tenant_namespace(self.home_cluster_id)
        while True:
            spec = self.spec()
            interval = spec.health_check.interval_seconds if spec else 10
            threshold = spec.health_check.failure_threshold if spec else 3
            try:
                await asyncio.wait_for(
                    self.foreign.get(ResourceAdvertisementResource, self.foreign_cluster_id, namespace=tenant),
                    timeout=max(1.0, interval / 2),
                )
                reachable = True
            except ApiError:
                reachable = True  # an answer, even "not found", is a live API server
            except Exception as err:  # any failure to get an answer is a failed check
                log.debug("health check of %s failed: %s", self.foreign_cluster_id, err)
                reachable = False
            self.failures = 0 if reachable else self.failures + 1
            healthy = reachable or self.failures < threshold
            if healthy != self.healthy:
                log.warning("foreign cluster %s %s", self.foreign_cluster_id, "reachable" if healthy else "unreachable")
                self.healthy = healthy
                self.queue.add(self.node_name)
            await asyncio.sleep(interval)
