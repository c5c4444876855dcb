"""One virtual kubelet: the virtual node of a foreign cluster and the pods scheduled on it.

It acts at home with its own identity and in the foreign cluster as the home identity, whose
kubeconfig the stack stored in the credentials Secret named by the VirtualNode.
"""

from __future__ import annotations

import asyncio
import contextlib
import functools
import socket
from collections.abc import Awaitable, Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, TypeVar

from lightkube import AsyncClient, KubeConfig

from runtime.api import names
from runtime.api.resources import NamespaceOffloadingResource, ResourceAdvertisementResource, VirtualNodeResource
from runtime.kube import EngineMetrics, Event, Informer
from runtime.kube.client import async_client
from runtime.kube.controlling import leading
from runtime.kube.liveness import reachability_of
from runtime.kube.packing import unpacked
from runtime.kube.shared import SharedWatches
from runtime.kube.supervising import stop_side_by_side
from runtime.kube.twins import Watched
from runtime.reflection import Peering, ReflectionManager
from runtime.virtualkubelet.credentials import Credentials
from runtime.virtualkubelet.node import FIELD_MANAGER, NODE_ADDRESS, VirtualNodeController
from runtime.virtualkubelet.pods import PodOffloader
from runtime.virtualkubelet.resourcemetrics import OffloadedPod
from runtime.virtualkubelet.restarts import PeeringRestarts

T = TypeVar("T")


class VirtualKubelet:
    def __init__(
        self,
        home: AsyncClient,
        foreign: AsyncClient,
        *,
        home_cluster_id: str,
        foreign_cluster_id: str,
        node_names: Sequence[str],
        shared_home: SharedWatches,
        metrics: EngineMetrics | None = None,
        node_address: str = NODE_ADDRESS,
        kubelet_ports: Mapping[str, int | None] | None = None,
        credentials: Credentials | None = None,
        restarts: PeeringRestarts | None = None,
    ) -> None:
        """The virtual nodes of one foreign cluster (`node_names`, its node pools, the primary first),
        each a Node of its own with its own kubelet API port (`kubelet_ports`, by node; None: not
        served), and one pod offloader and one reflector set for all of them: they share the twin
        namespaces. `node_address`: the Nodes' InternalIP and the hostIP of their pods.
        `shared_home`: the process's informers of the home cluster (every peering reads the same
        VirtualNodes and NamespaceOffloadings); `credentials`: read again when the foreign API server
        refuses them (health checks); `restarts`: how often this peering was restarted (its Nodes say)."""
        tenant = names.tenant_namespace(home_cluster_id)
        self.virtual_nodes = shared_home.informer(VirtualNodeResource, namespace=names.LIQO_NAMESPACE)
        self.advertisements = Informer(foreign, ResourceAdvertisementResource, namespace=tenant)
        self.offloadings = shared_home.informer(NamespaceOffloadingResource)
        ports = dict(kubelet_ports or {})
        self.nodes = {
            name: VirtualNodeController(
                home,
                foreign,
                home_cluster_id=home_cluster_id,
                foreign_cluster_id=foreign_cluster_id,
                virtual_nodes=self.virtual_nodes,
                advertisements=self.advertisements,
                address=node_address,
                kubelet_port=ports.get(name),
                node_name=name,
                on_unauthorized=credentials.refresh if credentials is not None else None,
                restarts=restarts,
            )
            for name in node_names
        }
        self.node = self.nodes[node_names[0]]  # the primary: the cluster's reflection settings are its
        self.peering = Peering(
            home,
            foreign,
            home_cluster_id,
            foreign_cluster_id,
            metrics=metrics,
            node_names=tuple(node_names),
            node_spec=self.node.spec,
            virtual_node=self._virtual_node,
            spec_of=lambda name: node.spec() if (node := self.nodes.get(name)) is not None else None,
            node_labels=self._node_labels,
            shared_home=shared_home,
        )
        self.pods = PodOffloader(self.peering, self.offloadings, node_address=node_address)
        self.reflection = ReflectionManager(self.peering, self.offloadings, self.pods.pods, members=(self.pods,))
        for node in self.nodes.values():  # after an outage, what failed meanwhile is retried at once
            node.on_recovered.append(self.reflection.retry_failed)
        # ... of the home cluster too (the statuses, events and reflected objects written there), once
        # its API server answers again: its Lease renewal, every 10 s, asks (registered while running)
        self.home_reachability = reachability_of(home)
        self.virtual_nodes.add_handler(self._on_virtual_node)
        self.informers: list[Watched] = [
            self.virtual_nodes,
            self.advertisements,
            self.offloadings,
            *(informer for node in self.nodes.values() for informer in node.informers),
            *self.pods.informers,
        ]
        self.synced = asyncio.Event()

    def _virtual_node(self) -> dict[str, Any] | None:
        found = self.virtual_nodes.store.get(f"{names.LIQO_NAMESPACE}/{self.node.node_name}")
        return found.to_dict() if found is not None else None

    def _node_labels(self, name: str) -> dict[str, str]:
        controller = self.nodes.get(name)
        node = controller.nodes.store.get(name) if controller is not None else None
        return dict(node.metadata.labels or {}) if node is not None else {}

    def warm(self) -> bool:
        """The home informers are synced: what a stand-by replica can be ready with."""
        home: list[Watched] = [self.virtual_nodes, self.offloadings, *self.pods.informers]
        return all(informer.synced.is_set() for informer in home)

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

    async def run(self, before_declaring: Callable[[], None] | None = None) -> None:
        """The node side as soon as the home informers it reads are synced, then the pods.
        `before_declaring` runs once this replica leads, before its Nodes are written (the kubelet APIs
        bind their ports: a Node never names a port that another process holds).

        The Node, its Lease and the health check need only the home cluster, so a foreign cluster
        that is down when this process starts shows as a NotReady node (the standard taint-based
        eviction then applies), not as a kubelet gone silent whose node turns Unknown when its
        Lease expires. Pods start on the home informers too: each waits for its own twin
        namespace's foreign informers, and a deletion at home is never held by another cluster.
        A stand-by replica (leader election) runs its informers only, and writes once it leads.
        """
        tasks = [asyncio.create_task(informer.run()) for informer in self.informers]
        watched: list[asyncio.Future[Any]] = []
        try:
            node_side: list[Watched] = [
                self.virtual_nodes,
                *(i for node in self.nodes.values() for i in node.informers),
            ]
            for informer in node_side:
                await informer.synced.wait()
            await leading()
            if before_declaring is not None:
                before_declaring()
            for node in self.nodes.values():
                node.resume_health()
                node.queue.start()
                node.queue.add(node.node_name)
                tasks += [asyncio.create_task(node.keep_lease()), asyncio.create_task(node.check_health())]
            tasks.append(asyncio.create_task(self._capacity_once_advertised()))
            pod_side: list[Watched] = [self.offloadings, *self.pods.informers]
            for informer in pod_side:
                await informer.synced.wait()
            await self.reflection.start()  # the pod offloader with it
            if self.home_reachability is not None:
                self.home_reachability.on_answer_again.append(self.reflection.retry_failed)
            self.synced.set()
            running: asyncio.Future[Any] = asyncio.gather(*tasks)
            # removal.py: the peering ends once every node it serves is removed
            every_removed = asyncio.gather(*(node.removed.wait() for node in self.nodes.values()))
            removed: asyncio.Future[Any] = asyncio.ensure_future(every_removed)
            watched = [running, removed]
            await asyncio.wait(watched, return_when=asyncio.FIRST_COMPLETED)
            if running.done():
                running.result()  # a failure ends the peering (its supervisor restarts it)
        finally:
            if self.home_reachability is not None:  # the home client outlives a peering restarted alone
                with contextlib.suppress(ValueError):
                    self.home_reachability.on_answer_again.remove(self.reflection.retry_failed)
            for future in (*tasks, *watched):
                future.cancel()
            await asyncio.gather(*tasks, *watched, return_exceptions=True)  # each outcome retrieved: no noise
            await stop_side_by_side([*(node.queue.shutdown() for node in self.nodes.values()), self.reflection.stop()])

    async def _capacity_once_advertised(self) -> None:
        """Until the foreign advertisement is known the Node keeps the capacity it shows; once
        known (even as nothing) the Node is brought to it."""
        await self.advertisements.synced.wait()
        for node in self.nodes.values():
            node.queue.add(node.node_name)


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


@dataclass
class ServedPeering:
    """One peering as its process serves it: what its readiness checks read."""

    foreign_cluster_id: str
    kubelet: VirtualKubelet | None = None
    serves_api: bool = False
    serving: asyncio.Event = field(default_factory=asyncio.Event)

    def ready(self, leads: Callable[[], bool]) -> bool:
        """Synced (a stand-by: its home informers warm, what a rollout waits on) and, on the leader,
        its kubelet APIs listening: the Nodes name their ports, `kubectl logs` before they listen fails."""
        kubelet = self.kubelet
        if kubelet is None:
            return False
        if not leads():
            return kubelet.synced.is_set() or kubelet.warm()
        return kubelet.synced.is_set() and (self.serving.is_set() or not self.serves_api)


async def serve_peering(
    home: AsyncClient,
    served: ServedPeering,
    *,
    home_cluster_id: str,
    node_names: Sequence[str],
    ports: Mapping[str, int | None],
    shared_home: SharedWatches,
    metrics: EngineMetrics,
    node_address: str = NODE_ADDRESS,
    restarts: PeeringRestarts | None = None,
) -> None:
    """The virtual nodes of one foreign cluster, their pods, the reflection of what they use and their
    kubelet APIs (`ports`, by node; None: not served): the one place a peering is assembled. Returns
    once every node it serves is removed (removal.py); raises what makes it fail."""
    foreign_cluster_id = served.foreign_cluster_id
    credentials = await Credentials.load(home, foreign_cluster_id)
    kubeconfig = credentials.kubeconfig
    foreign = async_client(  # bounded: a foreign API server serves many homes
        KubeConfig.from_dict(kubeconfig), field_manager=FIELD_MANAGER, token_source=credentials.token, bounded=True
    )
    metrics.count_requests(foreign, foreign_cluster_id)
    kubelet = VirtualKubelet(
        home,
        foreign,
        home_cluster_id=home_cluster_id,
        foreign_cluster_id=foreign_cluster_id,
        node_names=node_names,
        shared_home=shared_home,
        metrics=metrics,
        node_address=node_address,
        kubelet_ports=ports,
        credentials=credentials,
        restarts=restarts,
    )
    served.serves_api = any(port is not None for port in ports.values())
    served.kubelet = kubelet
    try:
        if not served.serves_api:
            await kubelet.run()
            return
        await _with_kubelet_apis(home, kubelet, served, kubeconfig, credentials, ports, node_address)
    finally:
        served.kubelet = None
        await foreign.close()


async def _with_kubelet_apis(
    home: AsyncClient,
    kubelet: VirtualKubelet,
    served: ServedPeering,
    kubeconfig: dict[str, Any],
    credentials: Credentials,
    ports: Mapping[str, int | None],
    node_address: str,
) -> None:
    # Imported here: aiohttp adds ~10 MB to a process (measured: docs/performance.md#memory).
    from runtime.virtualkubelet.kubeletapi import ForeignEndpoint, KubeletApiServer, bind_listener
    from runtime.virtualkubelet.servingcert import serving_certificate

    # The leader's ports are bound before its Nodes name them: a port another process holds fails the
    # peering (restarted with backoff, an event saying why) and its Nodes are not declared Ready.
    listeners: dict[str, socket.socket] = {}
    bound = asyncio.Event()

    def bind_ports() -> None:
        for node_name, port in ports.items():
            if port is not None:  # None: a VirtualNode only waiting for its removal
                listeners[node_name] = bind_listener(node_address, port)
        bound.set()

    # its informers warm while this replica stands by
    running = asyncio.ensure_future(kubelet.run(before_declaring=bind_ports))
    # The Nodes show the leader's address: only the leader serves the kubelet API (and asks for its
    # serving certificates, a write). Each node has its own port: the metrics of one (`kubectl top
    # node`) are its own pods'.
    apis: list[KubeletApiServer] = []
    try:
        await _first_of(bound.wait(), running)
        for node_name, port in ports.items():
            if port is None:
                continue
            certificate = await _first_of(serving_certificate(home, node_name, [node_address]), running)
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
            await api.start(listeners.pop(node_name))
            apis.append(api)
        served.serving.set()
        await running
    finally:
        served.serving.clear()
        await stop_side_by_side(api.stop() for api in apis)  # each gives its open streams up to 1 s
        for listener in listeners.values():  # bound, never served
            listener.close()
        running.cancel()
        await asyncio.gather(running, return_exceptions=True)


async def _first_of(step: Awaitable[T], running: asyncio.Future[Any]) -> T:
    """`step`'s result, unless the peering ends (or fails) first: then its outcome, raised."""
    task = asyncio.ensure_future(step)
    try:
        await asyncio.wait([task, running], return_when=asyncio.FIRST_COMPLETED)
    except asyncio.CancelledError:
        task.cancel()  # asyncio.wait leaves it running: the step goes with the peering
        await asyncio.gather(task, return_exceptions=True)
        raise
    if not task.done():
        task.cancel()
        await asyncio.gather(task, return_exceptions=True)  # ended before the peering's cleanup, its outcome read
        running.result()  # raises its failure
        raise asyncio.CancelledError  # it ended (removed) before this step: nothing more to do
    return task.result()
