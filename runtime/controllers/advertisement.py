"""Foreign agent, resources side: what this cluster offers each home cluster (docs/offloading.md).

For every tenant namespace (one per home cluster) a ResourceAdvertisement holds the allocatable
of the physical nodes (Ready and schedulable; virtual nodes never count) that its Quota lets the
home use (its `nodes`: the selector's nodes, without a taint it may not tolerate) minus the
requests of the pods running here that this home cluster did not offload, for every resource (cpu,
memory, pods, GPUs, any extended resource). The home's virtual kubelet applies its sharing percentage.
Written only when the figures change, so an idle cluster costs no writes, and recomputed at most
once per `settle` seconds of pod and node churn: a burst of 1,000 pods would otherwise rewrite the
advertisement, and the virtual node after it, for nearly every pod.

The pods are read from two disjoint informers: the cluster's own (no origin label) and the
offloaded ones, which the ShadowPod controller already holds (packed). Each pod event updates what
that pod holds (`PodLoad`: its node, origin and requests), so a recomputation sums those loads and
decodes no pod.
"""

from __future__ import annotations

from typing import Any

from lightkube import ApiError, AsyncClient
from lightkube.operators import exists, not_exists
from lightkube.resources.core_v1 import Namespace, Node, Pod
from lightkube.types import PatchType

from runtime.api import names
from runtime.api.advertisement import (
    PodLoad,
    advertisement_patch,
    as_quantity,
    available_by_node,
    load_of,
    node_offers,
    suggested_labels,
    summed,
)
from runtime.api.nodeaccess import NodeRules
from runtime.api.quota import QuotaSpec
from runtime.api.resources import ResourceAdvertisementResource
from runtime.controllers.trimming import as_the_agent_reads
from runtime.kube import Informer, WorkQueue
from runtime.kube.controlling import run_controller
from runtime.kube.informing import Event, Handler
from runtime.kube.packing import unpacked

ALL = "all"  # one key: any change recomputes every advertisement (coalesced by the queue)


class AdvertisementController:
    def __init__(
        self,
        client: AsyncClient,
        cluster_id: str,
        *,
        settle: float = 1.0,
        offloaded_pods: Informer | None = None,
        advertisements: Informer | None = None,
        quotas: Informer | None = None,
    ) -> None:
        """`offloaded_pods`, `advertisements`: informers that another controller runs (the ShadowPod
        controller's pods with an origin label, its grants' advertisements); without them, this
        controller runs its own. `quotas`: the grants' Quotas (another controller's informer), whose
        `cordoned` each home's advertisement repeats for its virtual node to show; without it, none is."""
        self.quotas = quotas
        self.client = client
        self.cluster_id = cluster_id
        self.settle = settle
        self.nodes = Informer(client, Node)
        self.local_pods = Informer(client, Pod, labels={names.ORIGIN_LABEL: not_exists()}, trim=as_the_agent_reads)
        self.shared = [shared for shared in (offloaded_pods, advertisements, quotas) if shared is not None]
        self.offloaded_pods = offloaded_pods or Informer(
            client, Pod, labels={names.ORIGIN_LABEL: exists()}, trim=as_the_agent_reads
        )
        self.tenants = Informer(client, Namespace, labels={names.TENANT_HOME_LABEL: exists()})
        self.advertisements = advertisements or Informer(client, ResourceAdvertisementResource)
        # key -> load, one map per pod informer: a pod whose origin label changes moves between them
        self.local_loads: dict[str, PodLoad] = {}
        self.offloaded_loads: dict[str, PodLoad] = {}
        self._rules: dict[str, tuple[str | None, NodeRules]] = {}  # home -> (its Quota's version, its nodes)
        self.queue = WorkQueue(self._reconcile, workers=1, name="advertisement")
        self.nodes.add_handler(lambda _: self.queue.add_after(ALL, self.settle))
        self.local_pods.add_handler(self._following(self.local_loads))
        self.offloaded_pods.add_handler(self._following(self.offloaded_loads))
        # a new home, an edited advertisement, a cordon: now
        for informer in (self.tenants, self.advertisements, *([quotas] if quotas else [])):
            informer.add_handler(lambda _: self.queue.add(ALL))

    async def run(self) -> None:
        own = [self.nodes, self.local_pods, self.tenants]
        own += [informer for informer in (self.offloaded_pods, self.advertisements) if informer not in self.shared]
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
        labels = suggested_labels(nodes)
        for tenant in self.tenants.store.values():
            home_id = tenant.metadata.labels[names.TENANT_HOME_LABEL]
            if tenant.metadata.deletionTimestamp:
                continue
            per_node = available_by_node(home_id, nodes, loads, self._node_rules(home_id))
            resources = {r: as_quantity(a) for r, a in sorted(summed(per_node.values()).items())}
            cordoned = self._cordoned(home_id)
            await self._publish(tenant.metadata.name, resources, labels, node_offers(nodes, per_node), cordoned)

    def _node_rules(self, home_id: str) -> NodeRules | None:
        """The nodes the home's Quota lets it use (None: no Quotas known here, any node)."""
        if self.quotas is None:
            return None
        quota = self.quotas.store.get(f"{names.tenant_namespace(home_id)}/{names.quota_name(home_id)}")
        version = quota.metadata.resourceVersion if quota is not None else None
        cached = self._rules.get(home_id)
        if cached is None or cached[0] != version:
            spec = QuotaSpec.model_validate(quota.to_dict().get("spec") or {}) if quota is not None else QuotaSpec()
            cached = (version, NodeRules.of(spec.nodes))
            self._rules[home_id] = cached
        return cached[1]

    def _cordoned(self, home_id: str) -> bool:
        if self.quotas is None:
            return False
        quota = self.quotas.store.get(f"{names.tenant_namespace(home_id)}/{names.quota_name(home_id)}")
        return bool(((quota.to_dict().get("spec") or {}) if quota is not None else {}).get("cordoned"))

    async def _publish(
        self,
        namespace: str,
        resources: dict[str, str],
        labels: dict[str, str],
        nodes: list[dict[str, Any]],
        cordoned: bool = False,
    ) -> None:
        current = self.advertisements.store.get(f"{namespace}/{self.cluster_id}")
        spec = advertisement_patch(self.cluster_id, current, resources, labels, nodes, cordoned)
        if spec is None:
            return
        body: dict[str, Any] = {"spec": spec}
        if current is not None:
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
            "spec": {
                "clusterID": self.cluster_id,
                "resources": resources,
                "labels": labels,
                "nodes": nodes,
                "cordoned": cordoned,
            },
        }
        try:
            await self.client.create(ResourceAdvertisementResource.from_dict(manifest))
        except ApiError as err:
            if err.status.code != 409:
                raise
