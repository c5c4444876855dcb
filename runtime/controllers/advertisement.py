"""Foreign agent, resources side: what this cluster offers each home cluster (seed 004).

For every tenant namespace (one per home cluster) a ResourceAdvertisement holds the allocatable
of the physical nodes (Ready and schedulable; virtual nodes never count) minus the requests of
the pods running here that this home cluster did not offload, for every resource (cpu, memory,
pods, GPUs, any extended resource). The home's virtual kubelet applies its sharing percentage.
Written only when the figures change, so an idle cluster costs no writes, and recomputed at most
once per `settle` seconds of pod and node churn: a burst of 1,000 pods would otherwise rewrite the
advertisement, and the virtual node after it, for nearly every pod.

The pods are read from two disjoint informers: the cluster's own (no origin label) and the
offloaded ones, which the ShadowPod controller already holds (packed). Each pod event updates what
that pod holds (`PodLoad`: its node, origin and requests), so a recomputation sums those loads and
decodes no pod.
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Iterable
from dataclasses import dataclass
from decimal import Decimal
from typing import Any

from lightkube import ApiError, AsyncClient
from lightkube.operators import exists, not_exists
from lightkube.resources.core_v1 import Namespace, Node, Pod
from lightkube.types import PatchType

from runtime.api import names
from runtime.api.quantities import parse_quantity
from runtime.api.resources import ResourceAdvertisementResource
from runtime.controllers.trimming import as_the_agent_reads
from runtime.kube import Informer, WorkQueue
from runtime.kube.controlling import run_controller
from runtime.kube.informing import Event, Handler
from runtime.kube.packing import unpacked

ALL = "all"  # one key: any change recomputes every advertisement (coalesced by the queue)


def _is_physical_and_ready(node: Any) -> bool:
    labels = node.metadata.labels or {}
    if labels.get(names.TYPE_LABEL) == names.VIRTUAL_NODE_TYPE or (node.spec and node.spec.unschedulable):
        return False
    conditions = (node.status.conditions if node.status else None) or []
    return any(c.type == "Ready" and c.status == "True" for c in conditions)


def pod_requests(pod: Any) -> dict[str, Decimal]:
    """What a pod holds on its node: the sum of its containers' requests, at least the largest
    init container's (as the scheduler counts), and one `pods` slot."""
    spec = pod.spec
    totals: dict[str, Decimal] = defaultdict(Decimal)
    for container in spec.containers or []:
        for resource, quantity in ((container.resources and container.resources.requests) or {}).items():
            totals[resource] += parse_quantity(quantity) or Decimal(0)
    for container in spec.initContainers or []:
        for resource, quantity in ((container.resources and container.resources.requests) or {}).items():
            totals[resource] = max(totals[resource], parse_quantity(quantity) or Decimal(0))
    totals["pods"] += 1
    return totals


@dataclass(frozen=True, slots=True)
class PodLoad:
    """What one pod holds on a node, as the advertisement counts it."""

    node: str
    origin: str | None  # the home cluster that offloaded it (its origin label), None for a local pod
    requests: tuple[tuple[str, Decimal], ...]


def load_of(pod: Any) -> PodLoad | None:
    """The load of a pod placed on a node and not finished; None for any other pod."""
    node = pod.spec.nodeName if pod.spec else None
    if not node or (pod.status and pod.status.phase in ("Succeeded", "Failed")):
        return None
    origin = (pod.metadata.labels or {}).get(names.ORIGIN_LABEL)
    return PodLoad(node, origin, tuple(sorted(pod_requests(pod).items())))


def loads_of(pods: Iterable[Any]) -> list[PodLoad]:
    return [load for load in map(load_of, pods) if load is not None]


def available_for(home_id: str, nodes: list[Any], loads: Iterable[PodLoad]) -> dict[str, Decimal]:
    physical = {n.metadata.name for n in nodes if _is_physical_and_ready(n)}
    available: dict[str, Decimal] = defaultdict(Decimal)
    for node in nodes:
        if node.metadata.name in physical:
            for resource, quantity in ((node.status and node.status.allocatable) or {}).items():
                available[resource] += parse_quantity(quantity) or Decimal(0)
    for load in loads:
        if load.node in physical and load.origin != home_id:
            for resource, amount in load.requests:
                if resource in available:
                    available[resource] -= amount
    return {resource: max(amount, Decimal(0)) for resource, amount in available.items()}


def as_quantity(amount: Decimal) -> str:
    if amount == amount.to_integral_value():
        return str(int(amount))
    return f"{int(amount * 1000)}m"


class AdvertisementController:
    def __init__(
        self, client: AsyncClient, cluster_id: str, *, settle: float = 1.0, offloaded_pods: Informer | None = None
    ) -> None:
        """`offloaded_pods`: an informer of the pods with an origin label that another controller
        runs (the ShadowPod controller's); without it, this controller runs its own."""
        self.client = client
        self.cluster_id = cluster_id
        self.settle = settle
        self.nodes = Informer(client, Node)
        self.local_pods = Informer(client, Pod, labels={names.ORIGIN_LABEL: not_exists()}, trim=as_the_agent_reads)
        self.shared = [offloaded_pods] if offloaded_pods is not None else []
        self.offloaded_pods = offloaded_pods or Informer(
            client, Pod, labels={names.ORIGIN_LABEL: exists()}, trim=as_the_agent_reads
        )
        self.tenants = Informer(client, Namespace, labels={names.TENANT_HOME_LABEL: exists()})
        self.advertisements = Informer(client, ResourceAdvertisementResource)
        # key -> load, one map per pod informer: a pod whose origin label changes moves between them
        self.local_loads: dict[str, PodLoad] = {}
        self.offloaded_loads: dict[str, PodLoad] = {}
        self.queue = WorkQueue(self._reconcile, workers=1, name="advertisement")
        self.nodes.add_handler(lambda _: self.queue.add_after(ALL, self.settle))
        self.local_pods.add_handler(self._following(self.local_loads))
        self.offloaded_pods.add_handler(self._following(self.offloaded_loads))
        for informer in (self.tenants, self.advertisements):  # a new home, an edited advertisement: now
            informer.add_handler(lambda _: self.queue.add(ALL))

    async def run(self) -> None:
        own = [self.nodes, self.local_pods, self.tenants, self.advertisements]
        if not self.shared:
            own.append(self.offloaded_pods)
        await run_controller(own, self.queue, shared=self.shared)

    def _following(self, loads: dict[str, PodLoad]) -> Handler:
        """A pod informer's handler: keeps `loads` as its pods' loads, recomputes when one moved."""

        def on_pod(event: Event) -> None:
            load = None if event.type == "DELETED" else load_of(unpacked(event.obj))
            if loads.get(event.key) == load:
                return  # a change that moves no figure (Pending -> Running): nothing to recompute
            if load is None:
                del loads[event.key]
            else:
                loads[event.key] = load
            self.queue.add_after(ALL, self.settle)

        return on_pod

    async def _reconcile(self, _: str) -> None:
        nodes = list(self.nodes.store.values())
        loads = [*self.local_loads.values(), *self.offloaded_loads.values()]
        for tenant in self.tenants.store.values():
            home_id = tenant.metadata.labels[names.TENANT_HOME_LABEL]
            if tenant.metadata.deletionTimestamp:
                continue
            resources = {r: as_quantity(a) for r, a in sorted(available_for(home_id, nodes, loads).items())}
            await self._publish(tenant.metadata.name, resources)

    async def _publish(self, namespace: str, resources: dict[str, str]) -> None:
        current = self.advertisements.store.get(f"{namespace}/{self.cluster_id}")
        if current is not None and (current.get("spec") or {}).get("resources") == resources:
            return
        body: dict[str, Any] = {"spec": {"clusterID": self.cluster_id, "resources": resources}}
        if current is not None:
            gone = set((current.get("spec") or {}).get("resources") or {}) - set(resources)
            body["spec"]["resources"] = {**resources, **dict.fromkeys(gone)}  # null removes in a merge patch
            await self.client.patch(
                ResourceAdvertisementResource, self.cluster_id, body, namespace=namespace, patch_type=PatchType.MERGE
            )
            return
        manifest = {
            "metadata": {
                "name": self.cluster_id,
                "namespace": namespace,
                "labels": {names.MANAGED_BY_LABEL: names.MANAGED_BY},
            },
            **body,
        }
        try:
            await self.client.create(ResourceAdvertisementResource.from_dict(manifest))
        except ApiError as err:
            if err.status.code != 409:
                raise
