"""Home side: namespaces labelled `liqo-stack.io/on-demand-offloading=true` are offloaded while they need it.

- A pod of such a namespace asks for a virtual node and cannot run without the namespace offloaded
  (runtime.api.ondemand.waits_for_offloading), or the scheduler left it unscheduled for lack of
  resources at home while a virtual node would fit it (starved_at_home, virtual_node_fitting), and
  the namespace has no NamespaceOffloading: one is made, with the namespace's annotations or the
  stack's defaults (the controller-manager's flags), labelled `liqo-stack.io/offloaded-on-demand`:
  the ownership marker. An offloading without it (by hand, the stack, a selector) is never touched.
- Once it is Ready, its waiting pods that were admitted before it (so without the virtual nodes'
  toleration the pod webhook adds) are given that toleration, which a pod may gain after creation,
  and the scheduler places them; pods already bound to a virtual node are offloaded by its kubelet.
- An offloading of ours is deleted once, for the grace period, no pod of the namespace has been on a
  virtual node, no claim of it has been reflected and no pod waits for it; never while one is.
  The idle time counts from this process's start at most, so a restart delays a removal, never hastens it.
Each step is an Event on the namespace that says why.

The pods and claims at home are watched only while some namespace is opted in or holds an offloading
of ours (gauge liqo_on_demand_pods_watched): a cluster that offloads no namespace on demand does not
pay, in this process, for every pod event it has.
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Callable
from typing import Any

from lightkube import AsyncClient
from lightkube.models.core_v1 import Container, PodSpec, PodStatus
from lightkube.resources.core_v1 import PersistentVolumeClaim, Pod
from lightkube.types import PatchType
from prometheus_client import Gauge

from runtime.api import OffloadingPhase, PodOffloadingStrategy, names
from runtime.api.namespaceoffloading import namespace_reference, owned_offloading
from runtime.api.ondemand import (
    VIRTUAL_NODE_TOLERATION,
    OnDemandDefaults,
    asks_for_virtual_node,
    claim_is_remote,
    free_on_virtual_nodes,
    lacks_toleration,
    runs_on_virtual_node,
    settings_for,
    starved_at_home,
    virtual_node_fitting,
    waits_for_offloading,
)
from runtime.api.resources import NamespaceOffloadingResource
from runtime.api.selectors import format_selector
from runtime.kube import Event, Informer, WorkQueue, unless_gone
from runtime.kube.controlling import leading
from runtime.kube.informing import call_when_synced
from runtime.kube.packing import unpacked
from runtime.kube.serving import EngineMetrics
from runtime.kube.warnings import Warnings

log = logging.getLogger(__name__)

FIELD_MANAGER = "liqo-on-demand-offloading"
WATCHED_METRIC = "liqo_on_demand_pods_watched"


def _requests_only(container: Container) -> Container:
    return Container(name=container.name, resources=container.resources)


def as_the_trigger_reads(pod: Any) -> Any:
    """Informer trim: every pod at home is held, so only what the triggers (requests included: what
    a virtual node has free) and the idle check read."""
    spec = pod.spec
    if spec is not None:
        pod.spec = PodSpec(
            containers=[_requests_only(c) for c in spec.containers or []],
            initContainers=[_requests_only(c) for c in spec.initContainers] if spec.initContainers else None,
            nodeName=spec.nodeName,
            nodeSelector=spec.nodeSelector,
            affinity=spec.affinity,
            runtimeClassName=spec.runtimeClassName,
            tolerations=spec.tolerations,
        )
    if pod.status is not None:
        pod.status = PodStatus(phase=pod.status.phase, reason=pod.status.reason, conditions=pod.status.conditions)
    return pod


def _labels(obj: Any) -> dict[str, str]:
    return dict((obj.metadata.labels if obj is not None and obj.metadata else None) or {})


class OnDemandController:
    def __init__(
        self,
        home: AsyncClient,
        offloadings: Informer,
        namespaces: Informer,
        virtual_nodes: Informer,
        defaults: OnDemandDefaults,
        *,
        workers: int = 2,
        metrics: EngineMetrics | None = None,
    ) -> None:
        """`offloadings`, `namespaces`, `virtual_nodes` (the virtual Nodes): informers other controllers run."""
        self.home = home
        self.defaults = defaults
        self.offloadings = offloadings
        self.namespaces = namespaces
        self.virtual_nodes = virtual_nodes
        self.events = Warnings(home, names.CONTROLLER_MANAGER)
        self.queue = WorkQueue(self.reconcile, workers=workers, name="ondemand")
        self.last_used: dict[str, float] = {}  # namespace -> when it last needed its offloading (monotonic)
        # The namespaces opted in, and those holding an offloading of ours: while there are none, the
        # pods and claims at home are not watched (every pod event of the cluster decoded for nothing).
        self.opted_in: set[str] = set()
        self.offloaded_by_us: set[str] = set()
        self.pods, self.claims = self._new_watches()
        self._watches: list[asyncio.Task[None]] = []  # while running: the two informers and their sync
        self._running = False
        self._watched = (
            Gauge(
                WATCHED_METRIC,
                "1 while the pods and claims at home are watched (a namespace is on demand)",
                registry=metrics.registry,
            )
            if metrics
            else None
        )
        self.offloadings.add_handler(self._on_offloading)
        self.namespaces.add_handler(self._on_namespace)

    def _new_watches(self) -> tuple[Informer, Informer]:
        # every pod at home, so packed: a trimmed pod decoded is about 5 KB, packed 0.13 KB
        pods = Informer(self.home, Pod, trim=as_the_trigger_reads, packed=True)
        claims = Informer(self.home, PersistentVolumeClaim)
        # namespace -> keys of its pods, claims: a reconcile reads its namespace's, not every store entry
        self.index: dict[Informer, dict[str, set[str]]] = {pods: {}, claims: {}}
        for informer in (pods, claims):
            informer.add_handler(self._indexing(informer))
        return pods, claims

    def watches_needed(self) -> bool:
        """Whether some namespace is on demand: labelled, or holding an offloading of ours."""
        return bool(self.opted_in or self.offloaded_by_us)

    def watching(self) -> bool:
        """Whether the pods and claims at home are watched and their stores synced."""
        return bool(self._watches) and self.pods.synced.is_set() and self.claims.synced.is_set()

    def _follow_need(self) -> None:
        """Watch the pods and claims while a namespace is on demand; stop, and drop their stores, once none is."""
        if not self._running:
            return
        needed = self.watches_needed()
        if needed and not self._watches:
            self._watches = [asyncio.create_task(informer.run()) for informer in (self.pods, self.claims)]
            self._watches.append(asyncio.create_task(call_when_synced([self.pods, self.claims], self._requeue_all)))
            if self._watched is not None:
                self._watched.set(1)
        elif not needed and self._watches:
            self._stop_watches()

    def _stop_watches(self) -> None:
        """Cancel the watches and drop what they held: a later start lists afresh."""
        for task in self._watches:
            task.cancel()
        self._watches = []
        self.pods, self.claims = self._new_watches()
        if self._watched is not None:
            self._watched.set(0)

    def _requeue_all(self) -> None:
        for namespace in self.opted_in | self.offloaded_by_us:
            self.queue.add(namespace)

    def _indexing(self, informer: Informer) -> Callable[[Event], None]:
        index = self.index[informer]

        def on_event(event: Event) -> None:
            namespace = event.key.partition("/")[0]
            keys = index.setdefault(namespace, set())
            if event.type == "DELETED":
                keys.discard(event.key)
                if not keys:
                    del index[namespace]
            else:
                keys.add(event.key)
            self.queue.add(namespace)

        return on_event

    def _on_namespace(self, event: Event) -> None:
        opted_in = event.type != "DELETED" and _labels(event.obj).get(names.ON_DEMAND_LABEL) == "true"
        (self.opted_in.add if opted_in else self.opted_in.discard)(event.key)
        self._follow_need()
        self.queue.add(event.key)

    def _on_offloading(self, event: Event) -> None:
        namespace, _, name = event.key.partition("/")
        if name != names.NAMESPACE_OFFLOADING_NAME:
            return  # not the one a namespace is offloaded by (made before the webhook refused others)
        ours = event.type != "DELETED" and names.OFFLOADED_ON_DEMAND_LABEL in _labels(event.obj)
        (self.offloaded_by_us.add if ours else self.offloaded_by_us.discard)(namespace)
        self._follow_need()
        self.queue.add(namespace)

    async def run(self) -> None:
        """The pods' and claims' watches follow the need from the start (a stand-by replica's too, so a
        takeover starts warm); reconciling once this process leads. Cancel to stop."""
        for informer in (self.offloadings, self.namespaces, self.virtual_nodes):
            await informer.synced.wait()
        self._running = True
        self._follow_need()
        try:
            await leading()
            self.queue.start()
            await asyncio.Event().wait()
        finally:
            self._running = False
            self._stop_watches()
            await self.queue.shutdown()

    def _in_namespace(self, informer: Informer, namespace: str) -> list[Any]:
        store = informer.store
        return [store[key] for key in self.index[informer].get(namespace, ()) if key in store]

    def _waiting(self, pods: list[Any], virtual: set[str]) -> list[tuple[dict[str, Any], str]]:
        """The pods that need the namespace offloaded, each with why."""
        waiting = []
        starved = []
        for pod in pods:
            wire = pod.to_dict()
            if waits_for_offloading(wire, virtual):
                node = (wire.get("spec") or {}).get("nodeName")
                why = f"is bound to virtual node {node} and backs off" if node else "cannot be scheduled"
                waiting.append((wire, f"asks for a virtual node and {why} until the namespace is offloaded"))
            elif starved_at_home(wire):
                starved.append((pod, wire))
        if starved:
            # only pods bound to a virtual node take from its room: those alone decoded whole (each
            # attribute read of a packed pod decodes it), the others read as plain JSON
            virtual_nodes = self.virtual_nodes.store
            bound = (
                unpacked(pod)
                for pod in self.pods.store.values()
                if (pod.to_dict().get("spec") or {}).get("nodeName") in virtual_nodes
            )
            free = free_on_virtual_nodes(virtual_nodes.values(), bound)
            for pod, wire in starved:
                node = virtual_node_fitting(unpacked(pod), self.virtual_nodes.store, free)
                if node is not None:
                    conditions = (wire.get("status") or {}).get("conditions") or []
                    message = next((c.get("message") for c in conditions if c.get("type") == "PodScheduled"), "")
                    waiting.append(
                        (wire, f"cannot be scheduled at home ({message}) and virtual node {node} would fit it")
                    )
        return waiting

    async def reconcile(self, namespace: str) -> None:
        ns = self.namespaces.store.get(namespace)
        if ns is None or ns.metadata.deletionTimestamp:
            self.last_used.pop(namespace, None)
            return
        offloading = self.offloadings.store.get(f"{namespace}/{names.NAMESPACE_OFFLOADING_NAME}")
        ours = names.OFFLOADED_ON_DEMAND_LABEL in _labels(offloading)
        opted_in = _labels(ns).get(names.ON_DEMAND_LABEL) == "true"
        if (offloading is not None and not ours) or (offloading is None and not opted_in):
            self.last_used.pop(namespace, None)
            return
        if not self.watching():
            return  # once the pods and claims are synced, every namespace on demand is queued again
        watched = (self.pods, self.claims)  # replaced if the watches stop during an await below
        virtual = set(self.virtual_nodes.store)
        pods = [pod.to_dict() for pod in self._in_namespace(self.pods, namespace)]
        claims = [
            c.metadata.name for c in self._in_namespace(self.claims, namespace) if claim_is_remote(c.to_dict(), virtual)
        ]
        waiting = self._waiting(self._in_namespace(self.pods, namespace), virtual)
        event_object = namespace_reference(namespace, ns.metadata.uid)
        if offloading is None:
            if waiting and opted_in:
                await self._offload(namespace, ns, waiting[0], event_object)
            return
        if offloading.metadata.deletionTimestamp:
            self.last_used.pop(namespace, None)
            return
        phase = (offloading.get("status") or {}).get("offloadingPhase")
        if phase == OffloadingPhase.READY.value:
            await self._place(namespace, offloading, waiting, event_object)
        remote = [p["metadata"]["name"] for p in pods if runs_on_virtual_node(p, virtual)]
        if (offloading.get("spec") or {}).get("podOffloadingStrategy") == PodOffloadingStrategy.LOCAL.value:
            # Local places only `runtimeClassName: liqo` pods on virtual nodes: the others wait in vain
            waiting = [(pod, why) for pod, why in waiting if asks_for_virtual_node(pod) and not lacks_toleration(pod)]
        now = time.monotonic()
        if remote or claims or waiting:
            self.last_used[namespace] = now
            return
        idle_since = self.last_used.setdefault(namespace, now)
        settings, _ = settings_for(dict(ns.metadata.annotations or {}), self.defaults)
        grace = settings.grace_period_seconds if settings else self.defaults.grace_period_seconds
        if now - idle_since < grace:
            self.queue.add_after(namespace, grace - (now - idle_since))
            return
        if (self.pods, self.claims) != watched or not self.watching():
            return  # what was read is no longer watched: decided again once it is
        with unless_gone():
            await self.home.delete(NamespaceOffloadingResource, names.NAMESPACE_OFFLOADING_NAME, namespace=namespace)
        self.last_used.pop(namespace, None)
        await self.events.warn(
            event_object,
            "UnoffloadedOnDemand",
            f"no pod of the namespace has run on a virtual node, and no claim of it has been in a foreign "
            f"cluster, for {grace:g}s (the grace period): unoffloading it",
            once=False,
            normal=True,
        )

    async def _offload(
        self, namespace: str, ns: Any, trigger: tuple[dict[str, Any], str], event_object: dict[str, Any]
    ) -> None:
        settings, problems = settings_for(dict(ns.metadata.annotations or {}), self.defaults)
        if settings is None:
            await self.events.warn(
                event_object,
                "OnDemandOffloadingRefused",
                f"pod {trigger[0]['metadata']['name']} {trigger[1]}, but the namespace is not offloaded on demand: "
                + "; ".join(problems),
            )
            return
        body = NamespaceOffloadingResource.from_dict(
            owned_offloading(namespace, settings.spec, (names.OFFLOADED_ON_DEMAND_LABEL, "true"))
        )
        await self.home.create(body, field_manager=FIELD_MANAGER)
        self.last_used[namespace] = time.monotonic()
        clusters = format_selector(settings.spec.cluster_selector) or "every foreign cluster"
        await self.events.warn(
            event_object,
            "OffloadedOnDemand",
            f"pod {trigger[0]['metadata']['name']} {trigger[1]}: offloading it "
            f"({settings.spec.pod_offloading_strategy.value}, to {clusters}); it is unoffloaded after "
            f"{settings.grace_period_seconds:g}s without pods on virtual nodes",
            once=False,
            normal=True,
        )

    async def _place(
        self, namespace: str, offloading: Any, waiting: list[tuple[dict[str, Any], str]], event_object: dict[str, Any]
    ) -> None:
        """Waiting pods admitted before the offloading lack the toleration the pod webhook now adds."""
        strategy = (offloading.get("spec") or {}).get("podOffloadingStrategy")
        placed = []
        for pod, _ in waiting:
            if not lacks_toleration(pod) or strategy == PodOffloadingStrategy.LOCAL.value:
                continue  # Local: only virtual nodes' own pods (runtimeClassName liqo, tolerated already) go there
            tolerations = [*(pod["spec"].get("tolerations") or []), VIRTUAL_NODE_TOLERATION]
            with unless_gone():
                await self.home.patch(
                    Pod,
                    pod["metadata"]["name"],
                    {"spec": {"tolerations": tolerations}},
                    namespace=namespace,
                    patch_type=PatchType.MERGE,
                )
                placed.append(pod["metadata"]["name"])
        if placed:
            await self.events.warn(
                event_object,
                "PodsPlacedOnDemand",
                f"the namespace is offloaded: pods {', '.join(placed)} (admitted before) now tolerate the virtual "
                "nodes' taint, so the scheduler places them there",
                once=False,
                normal=True,
            )
