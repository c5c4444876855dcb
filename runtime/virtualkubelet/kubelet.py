"""One virtual kubelet: the virtual node of a foreign cluster and the pods scheduled on it.

It acts at home with its own identity and in the foreign cluster as the home identity, whose
kubeconfig the stack stored in the credentials Secret named by the VirtualNode.
"""

from __future__ import annotations

import asyncio
import functools
from collections.abc import Callable, Mapping, Sequence
from typing import Any, cast

from lightkube import AsyncClient, KubeConfig

from runtime.api import names
from runtime.api.resources import NamespaceOffloadingResource, ResourceAdvertisementResource, VirtualNodeResource
from runtime.kube import Event, Informer, ProbeServer
from runtime.kube.client import async_client
from runtime.kube.controlling import leading
from runtime.kube.packing import unpacked
from runtime.reflection import Peering, ReflectionManager
from runtime.virtualkubelet.credentials import Credentials
from runtime.virtualkubelet.node import FIELD_MANAGER, NODE_ADDRESS, VirtualNodeController
from runtime.virtualkubelet.pods import PodOffloader
from runtime.virtualkubelet.resourcemetrics import OffloadedPod


class VirtualKubelet:
    def __init__(
        self,
        peering: Peering,
        *,
        node_address: str = NODE_ADDRESS,
        kubelet_port: int | None = None,
        kubelet_ports: Mapping[str, int | None] | None = None,
        credentials: Credentials | None = None,
    ) -> None:
        """`node_address` and `kubelet_port`: the Node's InternalIP and hostIP of its pods, where the kubelet
        API listens (port None: not served). One process serves every virtual node of its foreign cluster
        (`peering.node_names`, its node pools), each a Node of its own with its own kubelet API port
        (`kubelet_ports`, by node; default: `kubelet_port` for the first, the next ones for the others),
        and one pod offloader and one reflector set for all of them: they share the twin namespaces.
        `credentials`: read again when the foreign API server refuses them (health checks)."""
        home, foreign = peering.home, peering.foreign
        tenant = names.tenant_namespace(peering.home_cluster_id)
        self.virtual_nodes = Informer(home, VirtualNodeResource, namespace=names.LIQO_NAMESPACE)
        self.advertisements = Informer(foreign, ResourceAdvertisementResource, namespace=tenant)
        self.offloadings = Informer(home, NamespaceOffloadingResource)
        ports = dict(kubelet_ports) if kubelet_ports is not None else default_ports(peering.node_names, kubelet_port)
        self.nodes = {
            name: VirtualNodeController(
                home,
                foreign,
                home_cluster_id=peering.home_cluster_id,
                foreign_cluster_id=peering.foreign_cluster_id,
                virtual_nodes=self.virtual_nodes,
                advertisements=self.advertisements,
                address=node_address,
                kubelet_port=ports.get(name),
                node_name=name,
                on_unauthorized=credentials.refresh if credentials is not None else None,
            )
            for name in peering.node_names
        }
        self.node = self.nodes[peering.node_name]  # the primary: the cluster's reflection settings are its
        peering.node_spec = self.node.spec
        peering.virtual_node = self._virtual_node
        peering.spec_of = lambda name: node.spec() if (node := self.nodes.get(name)) is not None else None
        peering.node_labels = self._node_labels
        self.peering = peering
        self.pods = PodOffloader(peering, self.offloadings, node_address=node_address)
        self.reflection = ReflectionManager(peering, self.offloadings, self.pods.pods, members=(self.pods,))
        self.virtual_nodes.add_handler(self._on_virtual_node)
        self.informers = [
            self.virtual_nodes,
            self.advertisements,
            self.offloadings,
            *(informer for node in self.nodes.values() for informer in node.informers),
            *self.pods.informers,
        ]
        self.synced = asyncio.Event()

    def _virtual_node(self) -> dict[str, Any] | None:
        found = self.virtual_nodes.store.get(f"{names.LIQO_NAMESPACE}/{self.peering.node_name}")
        return found.to_dict() if found is not None else None

    def _node_labels(self, name: str) -> dict[str, str]:
        controller = self.nodes.get(name)
        node = controller.nodes.store.get(name) if controller is not None else None
        return dict(node.metadata.labels or {}) if node is not None else {}

    def warm(self) -> bool:
        """The home informers are synced: what a stand-by replica can be ready with."""
        return all(
            informer.synced.is_set() for informer in (self.virtual_nodes, self.offloadings, *self.pods.informers)
        )

    def remote_of(self, namespace: str, name: str, node: str | None = None) -> tuple[str, str] | None:
        """The remote pod (twin namespace, name) of a home pod on `node` (default: the primary), or None."""
        if self.pods.node_pods[node or self.node.node_name].store.get(f"{namespace}/{name}") is None:
            return None
        twin = self.pods.twin_of(namespace)
        return (twin, name) if twin else None

    def offloaded_pods(self, node: str | None = None) -> list[OffloadedPod]:
        """The pods of `node` (default: the primary) whose twin namespace is Ready, for the kubelet API's
        resource metrics: each node counts its own."""
        found = []
        for stored in list(self.pods.node_pods[node or self.node.node_name].store.values()):
            pod = unpacked(stored)  # read five times below
            twin = self.pods.twin_of(pod.metadata.namespace)
            if not twin:
                continue
            started = {
                status.name: status.state.running.startedAt.timestamp()
                for status in (pod.status.containerStatuses if pod.status else None) or []
                if status.state and status.state.running and status.state.running.startedAt
            }
            name = pod.metadata.name
            found.append(OffloadedPod(pod.metadata.namespace, name, twin, name, started))
        return found

    def _on_virtual_node(self, _: Event) -> None:
        if self.reflection.started:
            self.reflection.on_settings()  # every member, the pod offloader included

    async def run(self) -> None:
        """The node side as soon as the home informers it reads are synced, then the pods.

        The Node, its Lease and the health check need only the home cluster, so a foreign cluster
        that is down when this process starts shows as a NotReady node (the standard taint-based
        eviction then applies), not as a kubelet gone silent whose node turns Unknown when its
        Lease expires. Pods start on the home informers too: each waits for its own twin
        namespace's foreign informers, and a deletion at home is never held by another cluster.
        A stand-by replica (leader election) runs its informers only, and writes once it leads.
        """
        tasks = [asyncio.create_task(informer.run()) for informer in self.informers]
        try:
            for informer in (self.virtual_nodes, *(i for node in self.nodes.values() for i in node.informers)):
                await informer.synced.wait()
            await leading()
            for node in self.nodes.values():
                node.resume_health()
                node.queue.start()
                node.queue.add(node.node_name)
                tasks += [asyncio.create_task(node.keep_lease()), asyncio.create_task(node.check_health())]
            tasks.append(asyncio.create_task(self._capacity_once_advertised()))
            for informer in (self.offloadings, *self.pods.informers):
                await informer.synced.wait()
            await self.reflection.start()  # the pod offloader with it
            self.synced.set()
            running: asyncio.Future[Any] = asyncio.gather(*tasks)
            # removal.py: the process stops once every node it serves is removed
            every_removed = asyncio.gather(*(node.removed.wait() for node in self.nodes.values()))
            removed: asyncio.Future[Any] = asyncio.ensure_future(every_removed)
            tasks.append(cast(Any, removed))
            await asyncio.wait([running, removed], return_when=asyncio.FIRST_COMPLETED)
            if running.done():
                running.result()  # a failure ends the kubelet
            else:
                running.cancel()
        finally:
            for task in tasks:
                task.cancel()
            for node in self.nodes.values():
                await node.queue.shutdown()
            await self.reflection.stop()

    async def _capacity_once_advertised(self) -> None:
        """Until the foreign advertisement is known the Node keeps the capacity it shows; once
        known (even as nothing) the Node is brought to it."""
        await self.advertisements.synced.wait()
        for node in self.nodes.values():
            node.queue.add(node.node_name)


async def existing_virtual_nodes(home: AsyncClient, foreign_cluster_id: str) -> dict[str, bool]:
    """The VirtualNodes of a foreign cluster at home: name -> whether a virtual kubelet holds it (our finalizer)."""
    found = home.list(
        VirtualNodeResource,
        namespace=names.LIQO_NAMESPACE,
        labels={names.REMOTE_CLUSTER_ID_LABEL: foreign_cluster_id},
    )
    return {vn.metadata.name: names.VIRTUAL_NODE_FINALIZER in (vn.metadata.finalizers or []) async for vn in found}


def served_nodes(
    existing: Mapping[str, bool],
    foreign_cluster_id: str,
    pools: Sequence[str],
    kubelet_port: int | None,
    kubelet_ports: Sequence[int] = (),
) -> tuple[tuple[str, ...], dict[str, int | None]]:
    """The virtual nodes a process serves, the primary first, and their kubelet API ports (None: none).

    With `pools` given (the stack's Deployment names them): theirs, each at its port in
    `kubelet_ports` (default: consecutive from `kubelet_port`), and any other VirtualNode of the cluster
    a virtual kubelet still holds, without a kubelet API: one the stack replaces with these is deleted
    after this process starts, and only a virtual kubelet can drain its Node and release it. Without
    `pools` (external mode, where no Deployment runs): every VirtualNode of the cluster, the one of
    the whole cluster first, or that one alone if there is none yet."""
    default = names.virtual_node_name(foreign_cluster_id)
    if pools:
        wanted = [names.virtual_node_name(foreign_cluster_id, pool) for pool in pools]
        given = kubelet_ports if kubelet_port and kubelet_ports else ()
        ports = dict(zip(wanted, given, strict=True)) if given else default_ports(wanted, kubelet_port)
        leftovers = sorted(name for name, held in existing.items() if held and name not in ports)
        return (*wanted, *leftovers), {**ports, **dict.fromkeys(leftovers)}
    found = sorted(existing, key=lambda name: (name != default, name)) or [default]
    return tuple(found), default_ports(found, kubelet_port)


def default_ports(node_names: Sequence[str], first: int | None) -> dict[str, int | None]:
    """The kubelet API port of each node: `first` for the first, the next ones for the others."""
    return {name: (first + index if first else None) for index, name in enumerate(node_names)}


async def serve(
    home: AsyncClient,
    *,
    home_cluster_id: str,
    foreign_cluster_id: str,
    probes: ProbeServer,
    leads: Callable[[], bool],
    node_address: str = NODE_ADDRESS,
    kubelet_port: int | None = None,
    pools: Sequence[str] = (),
    kubelet_ports: Sequence[int] = (),
) -> None:
    """The virtual node(s), their pods, the reflection of what they use and their kubelet APIs
    (`kubelet_port` None: none), with their readiness checks: the one place a virtual kubelet is
    assembled. `pools`: the node pools the foreign cluster is offered as (none: one virtual node);
    `kubelet_ports`: one per pool (default: consecutive from `kubelet_port`)."""
    started = asyncio.Event()  # /readyz answers from the start: not ready before the real checks exist
    probes.add_readiness("started", started.is_set)
    credentials = await Credentials.load(home, foreign_cluster_id)
    kubeconfig = credentials.kubeconfig
    foreign = async_client(
        KubeConfig.from_dict(kubeconfig), field_manager=FIELD_MANAGER, token_source=credentials.token
    )
    probes.metrics.count_requests(foreign, foreign_cluster_id)
    existing = await existing_virtual_nodes(home, foreign_cluster_id)
    while not pools and not existing:  # external mode: its pools are known once `pulumi up` made them
        print(f"waiting for the VirtualNodes of {foreign_cluster_id}", flush=True)
        await asyncio.sleep(2)
        existing = await existing_virtual_nodes(home, foreign_cluster_id)
    node_names, ports = served_nodes(existing, foreign_cluster_id, pools, kubelet_port, kubelet_ports)
    peering = Peering(home, foreign, home_cluster_id, foreign_cluster_id, metrics=probes.metrics, node_names=node_names)
    kubelet = VirtualKubelet(peering, node_address=node_address, kubelet_ports=ports, credentials=credentials)
    # a stand-by is ready once its home informers are warm (a rollout waits on it; it must not hang)
    probes.add_readiness("informers synced", lambda: kubelet.synced.is_set() or (not leads() and kubelet.warm()))
    serving = asyncio.Event()
    if kubelet_port:  # the leader's Nodes name these ports: `kubectl logs` before they listen is refused
        probes.add_readiness("kubelet API serving", lambda: serving.is_set() or not leads())
    started.set()
    if not kubelet_port:
        await kubelet.run()
        return
    # Imported here: aiohttp adds ~10 MB to a process (measured: docs/performance.md#memory).
    from runtime.virtualkubelet.kubeletapi import ForeignEndpoint, KubeletApiServer
    from runtime.virtualkubelet.servingcert import serving_certificate

    running = asyncio.ensure_future(kubelet.run())  # its informers warm while this replica stands by
    # The Nodes show the leader's address: only the leader serves the kubelet API (and asks for its
    # serving certificates, a write). Each node has its own port: the metrics of one (`kubectl top
    # node`) are its own pods'.
    apis: list[KubeletApiServer] = []
    try:
        await leading()
        for node_name, port in ports.items():
            if port is None:
                continue  # a VirtualNode only waiting for its removal
            certificate = await serving_certificate(home, node_name, [node_address])
            endpoint = ForeignEndpoint.from_kubeconfig(kubeconfig)
            credentials.on_change(endpoint.use_token)
            api = KubeletApiServer(
                home,
                endpoint,
                node_name=node_name,
                remote_of=functools.partial(kubelet.remote_of, node=node_name),
                pods_on_node=functools.partial(kubelet.offloaded_pods, node_name),
                address=node_address,
                port=port,
                tls=certificate.ssl_context(),
            )
            await api.start()
            apis.append(api)
        serving.set()
        await running
    finally:
        for api in apis:
            await api.stop()
        running.cancel()
        await asyncio.gather(running, return_exceptions=True)
