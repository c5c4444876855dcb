"""One virtual kubelet: the virtual node of a foreign cluster and the pods scheduled on it.

It acts at home with its own identity and in the foreign cluster as the home identity, whose
kubeconfig the stack stored in the credentials Secret named by the VirtualNode.
"""

from __future__ import annotations

import asyncio
import base64
from collections.abc import Callable
from typing import Any, cast

import yaml
from lightkube import AsyncClient, KubeConfig
from lightkube.resources.core_v1 import Secret

from runtime.api import names
from runtime.api.resources import NamespaceOffloadingResource, ResourceAdvertisementResource, VirtualNodeResource
from runtime.kube import Event, Informer, ProbeServer
from runtime.kube.client import async_client
from runtime.kube.controlling import leading
from runtime.kube.packing import unpacked
from runtime.reflection import Peering, ReflectionManager
from runtime.virtualkubelet.node import FIELD_MANAGER, NODE_ADDRESS, VirtualNodeController
from runtime.virtualkubelet.pods import PodOffloader
from runtime.virtualkubelet.resourcemetrics import OffloadedPod


async def foreign_kubeconfig(home: AsyncClient, foreign_cluster_id: str) -> dict[str, Any]:
    """The home identity's kubeconfig for the foreign cluster, from the credentials Secret."""
    name = names.credentials_secret_name(foreign_cluster_id)
    while True:
        try:
            secret = await home.get(Secret, name, namespace=names.LIQO_NAMESPACE)
            break
        except Exception as err:  # not created yet by `pulumi up`: wait for it
            print(f"waiting for Secret {names.LIQO_NAMESPACE}/{name}: {err}", flush=True)
            await asyncio.sleep(2)
    kubeconfig: dict[str, Any] = yaml.safe_load(base64.b64decode((secret.data or {})["kubeconfig"]).decode())
    return kubeconfig


class VirtualKubelet:
    def __init__(self, peering: Peering, *, node_address: str = NODE_ADDRESS, kubelet_port: int | None = None) -> None:
        """`node_address` and `kubelet_port`: the Node's InternalIP and hostIP of its pods, where the kubelet
        API listens (port None: not served)."""
        home, foreign = peering.home, peering.foreign
        tenant = names.tenant_namespace(peering.home_cluster_id)
        self.virtual_nodes = Informer(home, VirtualNodeResource, namespace=names.LIQO_NAMESPACE)
        self.advertisements = Informer(foreign, ResourceAdvertisementResource, namespace=tenant)
        self.offloadings = Informer(home, NamespaceOffloadingResource)
        self.node = VirtualNodeController(
            home,
            foreign,
            home_cluster_id=peering.home_cluster_id,
            foreign_cluster_id=peering.foreign_cluster_id,
            virtual_nodes=self.virtual_nodes,
            advertisements=self.advertisements,
            address=node_address,
            kubelet_port=kubelet_port,
        )
        peering.node_spec = self.node.spec
        peering.virtual_node = self._virtual_node
        self.peering = peering
        self.pods = PodOffloader(peering, self.offloadings, node_address=node_address)
        self.reflection = ReflectionManager(peering, self.offloadings, self.pods.pods, members=(self.pods,))
        self.virtual_nodes.add_handler(self._on_virtual_node)
        self.informers = [
            self.virtual_nodes,
            self.advertisements,
            self.offloadings,
            *self.node.informers,
            *self.pods.informers,
        ]
        self.synced = asyncio.Event()

    def _virtual_node(self) -> dict[str, Any] | None:
        found = self.virtual_nodes.store.get(f"{names.LIQO_NAMESPACE}/{self.peering.node_name}")
        return found.to_dict() if found is not None else None

    def warm(self) -> bool:
        """The home informers are synced: what a stand-by replica can be ready with."""
        return all(
            informer.synced.is_set() for informer in (self.virtual_nodes, self.offloadings, *self.pods.informers)
        )

    def remote_of(self, namespace: str, name: str) -> tuple[str, str] | None:
        """The remote pod (twin namespace, name) of a home pod on this node, or None."""
        if self.pods.pods.store.get(f"{namespace}/{name}") is None:
            return None
        twin = self.pods.twin_of(namespace)
        return (twin, name) if twin else None

    def offloaded_pods(self) -> list[OffloadedPod]:
        """The pods of this node whose twin namespace is Ready, for the kubelet API's resource metrics."""
        found = []
        for stored in list(self.pods.pods.store.values()):
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
            for informer in (self.virtual_nodes, *self.node.informers):
                await informer.synced.wait()
            await leading()
            self.node.resume_health()
            self.node.queue.start()
            self.node.queue.add(self.node.node_name)
            tasks += [
                asyncio.create_task(self.node.keep_lease()),
                asyncio.create_task(self.node.check_health()),
                asyncio.create_task(self._capacity_once_advertised()),
            ]
            for informer in (self.offloadings, *self.pods.informers):
                await informer.synced.wait()
            await self.reflection.start()  # the pod offloader with it
            self.synced.set()
            running: asyncio.Future[Any] = asyncio.gather(*tasks)
            removed: asyncio.Future[Any] = asyncio.ensure_future(self.node.removed.wait())  # removal.py: stop
            tasks.append(cast(Any, removed))
            await asyncio.wait([running, removed], return_when=asyncio.FIRST_COMPLETED)
            if running.done():
                running.result()  # a failure ends the kubelet
            else:
                running.cancel()
        finally:
            for task in tasks:
                task.cancel()
            await self.node.queue.shutdown()
            await self.reflection.stop()

    async def _capacity_once_advertised(self) -> None:
        """Until the foreign advertisement is known the Node keeps the capacity it shows; once
        known (even as nothing) the Node is brought to it."""
        await self.advertisements.synced.wait()
        self.node.queue.add(self.node.node_name)


async def serve(
    home: AsyncClient,
    *,
    home_cluster_id: str,
    foreign_cluster_id: str,
    probes: ProbeServer,
    leads: Callable[[], bool],
    node_address: str = NODE_ADDRESS,
    kubelet_port: int | None = None,
) -> None:
    """The virtual node, its pods, the reflection of what they use and its kubelet API (`kubelet_port`
    None: none), with their readiness checks: the one place a virtual kubelet is assembled."""
    started = asyncio.Event()  # /readyz answers from the start: not ready before the real checks exist
    probes.add_readiness("started", started.is_set)
    kubeconfig = await foreign_kubeconfig(home, foreign_cluster_id)
    foreign = async_client(KubeConfig.from_dict(kubeconfig), field_manager=FIELD_MANAGER)
    probes.metrics.count_requests(foreign, foreign_cluster_id)
    peering = Peering(home, foreign, home_cluster_id, foreign_cluster_id, metrics=probes.metrics)
    kubelet = VirtualKubelet(peering, node_address=node_address, kubelet_port=kubelet_port)
    # a stand-by is ready once its home informers are warm (a rollout waits on it; it must not hang)
    probes.add_readiness("informers synced", lambda: kubelet.synced.is_set() or (not leads() and kubelet.warm()))
    serving = asyncio.Event()
    if kubelet_port:  # the leader's Node names this port: `kubectl logs` before it listens is refused
        probes.add_readiness("kubelet API serving", lambda: serving.is_set() or not leads())
    started.set()
    if not kubelet_port:
        await kubelet.run()
        return
    # Imported here: aiohttp adds ~10 MB to a process (measured: docs/performance.md#memory).
    from runtime.virtualkubelet.kubeletapi import ForeignEndpoint, KubeletApiServer
    from runtime.virtualkubelet.servingcert import serving_certificate

    running = asyncio.ensure_future(kubelet.run())  # its informers warm while this replica stands by
    # The Node shows the leader's address: only the leader serves the kubelet API (and asks for its
    # serving certificate, a write).
    try:
        await leading()
        certificate = await serving_certificate(home, kubelet.node.node_name, [node_address])
        api = KubeletApiServer(
            home,
            ForeignEndpoint.from_kubeconfig(kubeconfig),
            node_name=kubelet.node.node_name,
            remote_of=kubelet.remote_of,
            pods_on_node=kubelet.offloaded_pods,
            address=node_address,
            port=kubelet_port,
            tls=certificate.ssl_context(),
        )
        await api.start()
        serving.set()
        try:
            await running
        finally:
            await api.stop()
    finally:
        running.cancel()
        await asyncio.gather(running, return_exceptions=True)
