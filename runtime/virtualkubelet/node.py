"""The virtual node: a Node standing for one foreign cluster, its Lease, and its health.

Labels and taints come from the VirtualNode; capacity and allocatable are the foreign cluster's
advertisement x the sharing percentage (fixed amounts win; a count that rounds to zero shows as
the ResourcesRoundedToZero condition). The Node shows exactly that: a label, taint or resource
that leaves the declaration or the advertisement leaves the Node, while labels and taints others
put there (administrators, the node lifecycle controller) stay. Labels and taints are applied
server-side with the virtual kubelet's field manager, and an annotation records which taints were
ours (SSA treats the taint list as one atomic value); capacity and allocatable are replaced whole.

A health check reads the foreign API server every interval; after `failure_threshold` failures in
a row the node turns Ready=False, so the standard taint-based eviction applies, and Ready again at
the first success. An answer is not enough to pass: 401 (credentials revoked or expired), 403 (the
home identity's RBAC gone) and 5xx (a broken control plane, e.g. its etcd) fail, and the condition's
reason says which; a 429 (the server is alive, only busy) is no verdict either way. It needs only
the home cluster to run: a virtual kubelet started while its foreign cluster is down still keeps
its Lease and turns its Node NotReady. The Node is written only when what it shows changes; the
Lease is the heartbeat.
"""

from __future__ import annotations

import asyncio
import datetime
import json
import logging
import socket
import time
from collections.abc import Awaitable, Callable, Mapping
from typing import Any

from lightkube import ApiError, AsyncClient
from lightkube.resources.coordination_v1 import Lease
from lightkube.resources.core_v1 import Node
from lightkube.types import PatchType

from runtime.api import VirtualNodeSpec, names
from runtime.api.advertisement import largest_pod_labels, pool_offer
from runtime.api.plan import shared_resources, virtual_node_labels, virtual_node_taints
from runtime.api.resources import ResourceAdvertisementResource
from runtime.kube import Informer, WorkQueue
from runtime.kube.errors import status_code_of
from runtime.kube.twins import Watched
from runtime.virtualkubelet.removal import NodeRemoval
from runtime.virtualkubelet.restarts import PeeringRestarts

log = logging.getLogger(__name__)

FIELD_MANAGER = "liqo-virtual-kubelet"
LEASE_NAMESPACE = "kube-node-lease"
LEASE_SECONDS = 40  # renewed every quarter, as the kubelet does
NODE_ADDRESS = "127.0.0.1"  # default of the virtual kubelet's own address (--node-address): external mode
KUBELET_PORT = 10250
UNREACHABLE_REASON = "ForeignClusterUnreachable"
UNAUTHORIZED_REASON = "ForeignUnauthorized"
CORDONED_CONDITION = "ForeignCordoned"  # the foreign cluster cordoned this home (docs/security.md#cordon-and-drain)
FORBIDDEN_REASON = "ForeignForbidden"
SERVER_ERROR_REASON = "ForeignServerError"
FAILURE_MESSAGES = {
    UNREACHABLE_REASON: "the foreign API server did not answer",
    UNAUTHORIZED_REASON: "the foreign API server refused the home identity's credentials (401: revoked or expired)",
    FORBIDDEN_REASON: "the foreign API server denied the home identity access (403: its RBAC was removed)",
    SERVER_ERROR_REASON: "the foreign API server failed to serve (5xx: e.g. its etcd is down)",
}
THROTTLED = 429  # alive and answering, only busy: neither a failure nor a success
# Kubernetes 1.36: the API server passes exec/attach/port-forward WebSockets through to a kubelet
# that declares this (else it translates them to SPDY, which the kubelet API does not speak).
WEBSOCKET_FEATURE = "ExtendWebSocketsToKubelet"
PRESSURE_CONDITIONS = {
    "MemoryPressure": "KubeletHasSufficientMemory",
    "DiskPressure": "KubeletHasNoDiskPressure",
    "PIDPressure": "KubeletHasSufficientPID",
}


def address_family(address: str) -> socket.AddressFamily:
    """The socket family of a node address: an IP (--node-address), IPv6 in an IPv6 or dual-stack cluster."""
    return socket.AF_INET6 if ":" in address else socket.AF_INET


def now() -> str:
    return datetime.datetime.now(datetime.UTC).strftime("%Y-%m-%dT%H:%M:%SZ")


def micro_now() -> str:
    return datetime.datetime.now(datetime.UTC).strftime("%Y-%m-%dT%H:%M:%S.%fZ")


def health_failure(status_code: int | None) -> str | None:
    """What a health check's outcome counts as: None if it passed, else the Ready condition's reason.
    `status_code`: the foreign API server's answer (2xx for a success), None for no answer at all.
    A 404 (no advertisement yet) or another 4xx is a live, authorized server; 429 is decided by the
    caller (no verdict)."""
    if status_code is None:
        return UNREACHABLE_REASON
    if status_code == 401:
        return UNAUTHORIZED_REASON
    if status_code == 403:
        return FORBIDDEN_REASON
    if status_code >= 500:
        return SERVER_ERROR_REASON
    return None


async def probe_foreign(foreign: AsyncClient, tenant: str, foreign_cluster_id: str, timeout: float) -> int | None:
    """One health check: the HTTP status the foreign API server answers a read of the cluster's
    advertisement with, as the home identity (so RBAC and storage are exercised too); None: no answer."""
    try:
        async with asyncio.timeout(timeout):
            await foreign.get(ResourceAdvertisementResource, foreign_cluster_id, namespace=tenant)
    except Exception as err:  # an error answer, or none at all (connection, TLS, timeout)
        log.debug("health check of %s: %s", foreign_cluster_id, err)
        return status_code_of(err)
    return 200


def node_conditions(
    healthy: bool,
    failures: int,
    rounded_to_zero: list[str],
    reason: str = UNREACHABLE_REASON,
    cordoned_by: str | None = None,
) -> list[dict[str, str]]:
    """The Node's conditions, without times (added when a status changes); `reason`: the last failure's;
    `cordoned_by`: the foreign cluster that cordoned this home (None: it does not)."""
    ready = (
        {"status": "True", "reason": "KubeletReady", "message": "the foreign API server answers"}
        if healthy
        else {
            "status": "False",
            "reason": reason,
            "message": f"{FAILURE_MESSAGES.get(reason, reason)}: {failures} health checks failed in a row",
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
    conditions.append(
        {
            "type": CORDONED_CONDITION,
            "status": "True" if cordoned_by else "False",
            "reason": "CordonedByForeignCluster" if cordoned_by else "NotCordoned",
            "message": (
                f"{cordoned_by} cordoned this home cluster: no new pod starts there, the running ones go on"
                if cordoned_by
                else "the foreign cluster takes new pods"
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


async def declare_not_ready(home: AsyncClient, node_name: str, reason: str, message: str) -> None:
    """A Ready Node's Ready condition turned False with `reason`, merged alone (its other conditions stay):
    its peering failed and nothing heartbeats it until the peering runs again. Left Ready, the Node would
    take pods until the node lifecycle controller's grace ran out (Kubernetes': 50 s; kwokctl's: 200 s).
    A Node NotReady already keeps its reason (a foreign cluster unreachable stays so at the restart)."""
    node = await home.get(Node, node_name)
    conditions = (node.status.conditions if node.status else None) or []
    if not any(c.type == "Ready" and c.status == "True" for c in conditions):
        return
    ready = {"type": "Ready", "status": "False", "reason": reason, "message": message[:1024]}
    condition = {**ready, "lastHeartbeatTime": now(), "lastTransitionTime": now()}
    # conditions merge by type (a strategic merge patch)
    await home.patch(Node.Status, node_name, {"status": {"conditions": [condition]}}, patch_type=PatchType.STRATEGIC)


def _taint_identity(taint: Mapping[str, Any]) -> tuple[str, str]:
    return str(taint.get("key")), str(taint.get("effect"))


def _canonical(items: list[dict[str, Any]]) -> list[str]:
    return sorted(json.dumps(item, sort_keys=True) for item in items)


def applied_record(labels: Mapping[str, str], taints: list[dict[str, Any]], unschedulable: bool = False) -> str:
    record: dict[str, Any] = {"labels": sorted(labels), "taints": taints}
    if unschedulable:  # only then: the record of a node never cordoned stays as it was
        record["unschedulable"] = True
    return json.dumps(record, sort_keys=True, separators=(",", ":"))


def previously_applied_taints(annotations: Mapping[str, str]) -> list[dict[str, Any]]:
    try:
        record = json.loads(annotations.get(names.VIRTUAL_NODE_APPLIED_ANNOTATION) or "{}")
        taints = record.get("taints") if isinstance(record, dict) else None
    except ValueError:  # edited by hand: take back nothing rather than guess
        return []
    return [t for t in taints or [] if isinstance(t, dict)]


def node_apply(
    name: str,
    labels: dict[str, str],
    taints: list[dict[str, Any]],
    live: dict[str, Any] | None,
    unschedulable: bool = False,
) -> dict[str, Any] | None:
    """The Node's metadata and spec as the virtual kubelet applies them, or None if already shown.

    Labels: server-side apply drops a label this field manager stops applying, unless another
    manager (an administrator's `kubectl label`) set it too. Taints: SSA sees the list as one value,
    so the applied list is ours plus the live taints of others, without those we applied before
    (the annotation's record) and no longer declare. On an existing Node the apply carries its
    resourceVersion, so a taint the node lifecycle controller added meanwhile is never overwritten.
    `unschedulable`: the foreign cluster cordoned this home; applied while it lasts, then left out,
    so server-side apply drops it unless an administrator's `kubectl cordon` set it too.
    """
    live_meta = (live or {}).get("metadata") or {}
    live_annotations = live_meta.get("annotations") or {}
    live_taints = ((live or {}).get("spec") or {}).get("taints") or []
    ours = {_taint_identity(t) for t in [*taints, *previously_applied_taints(live_annotations)]}
    merged = taints + [t for t in live_taints if _taint_identity(t) not in ours]
    record = applied_record(labels, taints, unschedulable)
    metadata: dict[str, Any] = {
        "name": name,
        "labels": labels,
        "annotations": {names.VIRTUAL_NODE_APPLIED_ANNOTATION: record},
    }
    if live is not None:
        live_labels = live_meta.get("labels") or {}
        if (
            all(live_labels.get(k) == v for k, v in labels.items())
            and live_annotations.get(names.VIRTUAL_NODE_APPLIED_ANNOTATION) == record
            and _canonical(merged) == _canonical(live_taints)
            and (not unschedulable or bool(((live or {}).get("spec") or {}).get("unschedulable")))
        ):
            return None
        metadata["resourceVersion"] = live_meta.get("resourceVersion")
    spec: dict[str, Any] = {"taints": merged}
    if unschedulable:
        spec["unschedulable"] = True
    return {"apiVersion": "v1", "kind": "Node", "metadata": metadata, "spec": spec}


REPLACED_WHOLE = ("capacity", "allocatable")


def status_patch(desired: dict[str, Any], live: dict[str, Any]) -> dict[str, Any] | None:
    """A merge patch of the Node's status to `desired`, or None if it shows that already.

    A merge keeps the keys it does not name, so capacity and allocatable name the resources that
    left (null removes them): a resource gone from the advertisement or from fixedResources must
    not stay schedulable.
    """
    patch: dict[str, Any] = {}
    for key, value in desired.items():
        if live.get(key) == value:
            continue
        if key in REPLACED_WHOLE and isinstance(value, dict):
            value = {**{k: None for k in live.get(key) or {} if k not in value}, **value}
        patch[key] = value
    return patch or None


def ready_condition(node: Any) -> dict[str, Any] | None:
    conditions = (node.to_dict().get("status") or {}).get("conditions") or []
    return next((c for c in conditions if c.get("type") == "Ready"), None)


class VirtualNodeController:
    def __init__(
        self,
        home: AsyncClient,
        foreign: AsyncClient,
        *,
        home_cluster_id: str,
        foreign_cluster_id: str,
        virtual_nodes: Watched,
        advertisements: Informer,
        address: str = NODE_ADDRESS,
        kubelet_port: int | None = KUBELET_PORT,
        node_name: str | None = None,
        on_unauthorized: Callable[[], Awaitable[bool]] | None = None,
        restarts: PeeringRestarts | None = None,
    ) -> None:
        """`address`: the InternalIP the home API server reaches the kubelet API at, on
        `kubelet_port` (None: no kubelet API is served, the Node declares no endpoint); `node_name`:
        its VirtualNode and Node (default: the cluster's one virtual node, else one of its pools);
        `on_unauthorized`: called when a health check is answered 401, whether it brought new
        credentials (the check is then made again at once); `restarts`: the peering's restarts in this
        process (a Node condition)."""
        self.on_unauthorized = on_unauthorized
        self.restarts = restarts or PeeringRestarts()
        self.address, self.kubelet_port = address, kubelet_port
        self.home, self.foreign = home, foreign
        self.home_cluster_id, self.foreign_cluster_id = home_cluster_id, foreign_cluster_id
        self.node_name = node_name or names.virtual_node_name(foreign_cluster_id)
        self.virtual_nodes, self.advertisements = virtual_nodes, advertisements
        self.nodes = Informer(home, Node, fields={"metadata.name": self.node_name})
        self.queue = WorkQueue(self.reconcile, workers=1, name="virtual-node")
        for informer in (self.virtual_nodes, self.advertisements, self.nodes):
            informer.add_handler(lambda _: self.queue.add(self.node_name))
        self.removal = NodeRemoval(
            home,
            foreign,
            home_cluster_id=home_cluster_id,
            foreign_cluster_id=foreign_cluster_id,
            node_name=self.node_name,
            siblings_stay=self.siblings_stay,
            unreachable_for=self.unreachable_for,
        )
        self.removed = asyncio.Event()  # set once the removal released the VirtualNode: the process may end
        self.healthy = True
        self.unhealthy_since: float | None = None  # monotonic: when the Node turned NotReady in this process
        self.failures = 0
        self.failure_reason = UNREACHABLE_REASON  # of the last failed check
        self.on_recovered: list[Callable[[], object]] = []  # called when the Node turns Ready again
        self._parsed: tuple[str, VirtualNodeSpec] | None = None  # (resourceVersion, its spec)

    @property
    def informers(self) -> list[Informer]:
        return [self.nodes]

    def spec(self) -> VirtualNodeSpec | None:
        """The VirtualNode's spec, parsed once per version (every reconcile of reflection asks)."""
        vn = self.virtual_nodes.store.get(f"{names.LIQO_NAMESPACE}/{self.node_name}")
        if vn is None:
            return None
        version = vn.metadata.resourceVersion
        if self._parsed is None or self._parsed[0] != version:
            self._parsed = (version, VirtualNodeSpec.model_validate(vn["spec"]))
        return self._parsed[1]

    def offered(self, spec: VirtualNodeSpec) -> dict[str, str]:
        """The advertisement's figures for this node: its pool's nodes (offloadingPatch.nodeSelector)
        or, without a selector, the whole cluster."""
        tenant = names.tenant_namespace(self.home_cluster_id)
        advertisement = self.advertisements.store.get(f"{tenant}/{self.foreign_cluster_id}")
        return pool_offer((advertisement or {}).get("spec") or {}, spec.offloading_patch.node_selector)

    def unreachable_for(self) -> float | None:
        """Seconds since the foreign API server stopped answering as it should (None: it does)."""
        return None if self.healthy or self.unhealthy_since is None else time.monotonic() - self.unhealthy_since

    def siblings_stay(self) -> bool:
        """Another virtual node of this foreign cluster (a node pool) stays: its twins are not ours to await."""
        return any(
            vn.metadata.name != self.node_name
            and not vn.metadata.deletionTimestamp
            and (vn.get("spec") or {}).get("clusterID") == self.foreign_cluster_id
            for vn in self.virtual_nodes.store.values()
        )

    def cordoned(self) -> bool:
        """The foreign cluster says (its advertisement) that it cordoned this home."""
        tenant = names.tenant_namespace(self.home_cluster_id)
        advertisement = self.advertisements.store.get(f"{tenant}/{self.foreign_cluster_id}")
        return bool(((advertisement or {}).get("spec") or {}).get("cordoned"))

    def suggested_labels(self) -> dict[str, str]:
        """docs/offloading.md: the labels the foreign cluster suggests for its virtual node (its advertisement's)."""
        tenant = names.tenant_namespace(self.home_cluster_id)
        advertisement = self.advertisements.store.get(f"{tenant}/{self.foreign_cluster_id}")
        return dict(((advertisement or {}).get("spec") or {}).get("labels") or {})

    def desired(self, spec: VirtualNodeSpec) -> tuple[dict[str, Any], dict[str, Any]]:
        """The Node's metadata+spec, and its status without condition times."""
        shared = shared_resources(self.offered(spec), spec.sharing_percentage, spec.fixed_resources)
        tenant = names.tenant_namespace(self.home_cluster_id)
        advertisement = self.advertisements.store.get(f"{tenant}/{self.foreign_cluster_id}")
        largest = largest_pod_labels(
            (advertisement or {}).get("spec") or {},
            spec.offloading_patch.node_selector,
            spec.sharing_percentage,
            shared.capacity,
        )
        labels = {
            # the VirtualNode's labels (the stack's, the home side's word) win over the suggested ones
            **virtual_node_labels(self.foreign_cluster_id, {**self.suggested_labels(), **spec.labels}),
            "kubernetes.io/hostname": self.node_name,
            "kubernetes.io/os": "linux",
            "kubernetes.io/arch": "amd64",
            "node.kubernetes.io/instance-type": "liqo-virtual-node",
            **largest,
        }
        body = {
            "metadata": {"name": self.node_name, "labels": labels},
            "spec": {"taints": [t.to_wire() for t in virtual_node_taints(spec.taints)]},
        }
        status = {
            "capacity": shared.capacity,
            "allocatable": shared.capacity,
            "conditions": [
                *node_conditions(
                    self.healthy,
                    self.failures,
                    shared.rounded_to_zero,
                    self.failure_reason,
                    cordoned_by=self.foreign_cluster_id if self.cordoned() else None,
                ),
                self.restarts.condition(),
            ],
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
        stored: Any = self.virtual_nodes.store.get(f"{names.LIQO_NAMESPACE}/{self.node_name}")
        if stored.metadata.deletionTimestamp:  # its peering ends (removal.py); nothing else does this
            if self.removal.holds(stored):
                if await self.removal.step(stored, self.nodes.store.get(self.node_name)):
                    self.removed.set()
                else:
                    self.queue.add_after(self.node_name, self.removal.poll_seconds)
            return
        await self.removal.ensure_finalizer(stored)
        body, status = self.desired(spec)
        current = self.nodes.store.get(self.node_name)
        live = current.to_dict() if current is not None else None
        old = (live or {}).get("status") or {}
        if not self.advertisements.synced.is_set():
            # The foreign cluster not heard from since this process started: what it offers is
            # unknown, not zero. Keep what the Node shows rather than wipe it.
            status.pop("capacity")
            status.pop("allocatable")
            zeroed = next((c for c in old.get("conditions") or [] if c.get("type") == "ResourcesRoundedToZero"), None)
            if zeroed is not None:
                status["conditions"] = [c if c["type"] != zeroed["type"] else zeroed for c in status["conditions"]]
        labels, taints = body["metadata"]["labels"], body["spec"]["taints"]
        applied = node_apply(self.node_name, labels, taints, live, unschedulable=self.cordoned())
        if applied is not None:
            node = await self.home.apply(Node.from_dict(applied), field_manager=FIELD_MANAGER, force=True)  # type: ignore[call-overload]
            if live is None:  # just created: its status is what the apply returned
                old = node.to_dict().get("status") or {}
        status["conditions"] = with_times(old.get("conditions") or [], status["conditions"])
        patch = status_patch(status, old)
        if patch is not None:
            await self.home.patch(Node.Status, self.node_name, {"status": patch}, patch_type=PatchType.MERGE)

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

    def resume_health(self) -> None:
        """Start from the health the Node shows: a restart during an outage keeps it NotReady until a
        check succeeds, rather than turning it Ready for `failure_threshold` checks (which would lift
        the not-ready taint and restart every pod's tolerationSeconds)."""
        node = self.nodes.store.get(self.node_name)
        ready = ready_condition(node) if node is not None else None
        if ready and ready.get("status") == "False" and ready.get("reason") in FAILURE_MESSAGES:
            spec = self.spec()
            self.healthy = False
            self.unhealthy_since = time.monotonic()  # the clock starts again with the process
            self.failure_reason = str(ready["reason"])
            self.failures = spec.health_check.failure_threshold if spec else 3

    async def check_health(self) -> None:
        tenant = names.tenant_namespace(self.home_cluster_id)
        while True:
            spec = self.spec()
            interval = spec.health_check.interval_seconds if spec else 10
            threshold = spec.health_check.failure_threshold if spec else 3
            timeout = max(1.0, interval / 2)
            code = await probe_foreign(self.foreign, tenant, self.foreign_cluster_id, timeout)
            if code == 401 and self.on_unauthorized is not None and await self.on_unauthorized():
                code = await probe_foreign(self.foreign, tenant, self.foreign_cluster_id, timeout)
            self.observe(code, threshold)
            await asyncio.sleep(interval)

    def observe(self, code: int | None, threshold: int) -> None:
        """One health check's answer (`probe_foreign`): the Node changes once `threshold` fail in a
        row, or at the first success; a different failure while NotReady changes only the reason
        shown. A 429 leaves everything as it is."""
        if code == THROTTLED:
            return
        failure = health_failure(code)
        self.failures = 0 if failure is None else self.failures + 1
        healthy = failure is None or self.failures < threshold
        reason = failure if failure is not None and not healthy else self.failure_reason
        if healthy != self.healthy or reason != self.failure_reason:
            if healthy != self.healthy:
                log.warning(
                    "foreign cluster %s %s", self.foreign_cluster_id, "healthy" if healthy else f"unhealthy: {reason}"
                )
            recovered = healthy and not self.healthy
            self.healthy, self.failure_reason = healthy, reason
            self.unhealthy_since = None if healthy else (self.unhealthy_since or time.monotonic())
            self.queue.add(self.node_name)
            for callback in self.on_recovered if recovered else ():
                callback()
