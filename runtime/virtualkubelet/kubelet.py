"""One virtual kubelet: the virtual node of a foreign cluster and the pods scheduled on it.

It acts at home with its own identity and in the foreign cluster as the home identity, whose
kubeconfig the stack stored in the credentials Secret named by the VirtualNode.
"""

from __future__ import annotations

import asyncio
import base64
from typing import Any, cast

import yaml
from lightkube import AsyncClient
from lightkube.resources.core_v1 import PersistentVolumeClaim, Secret

from runtime.api import VirtualNodeSpec, names
from runtime.kube import EngineMetrics, Event, Informer, WorkQueue, unless_gone
from runtime.kube.controlling import leading
from runtime.kube.packing import unpacked
from runtime.kube.resources import NamespaceOffloadingResource, ResourceAdvertisementResource, VirtualNodeResource
from runtime.reflection import Reflection, ReflectionSettings
from runtime.reflection.events import EventReflector
from runtime.reflection.forging import is_owned
from runtime.reflection.reflecting import HomeEvents
from runtime.reflection.storage import StorageProvisioner
from runtime.reflection.tokens import TokenReflector
from runtime.virtualkubelet.node import NODE_ADDRESS, VirtualNodeController
from runtime.virtualkubelet.pods import PodOffloader
from runtime.virtualkubelet.resourcemetrics import OffloadedPod
from runtime.virtualkubelet.translation import CidrMapping, skip_lists


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


def pod_cidr_mapping(spec: VirtualNodeSpec | None) -> CidrMapping | None:
    """The VirtualNode's remapping of the foreign pod range, when the stack gave it one."""
    if spec is None or not spec.pod_cidr or not spec.remapped_pod_cidr:
        return None
    return CidrMapping.parse(spec.pod_cidr, spec.remapped_pod_cidr)


class VirtualKubelet:
    def __init__(
        self,
        home: AsyncClient,
        foreign: AsyncClient,
        *,
        home_cluster_id: str,
        foreign_cluster_id: str,
        metrics: EngineMetrics | None = None,
        node_address: str = NODE_ADDRESS,
        kubelet_port: int | None = None,
    ) -> None:
        """`node_address` and `kubelet_port`: the Node's InternalIP and hostIP of its pods, where the kubelet
        API listens (port None: not served)."""
        tenant = names.tenant_namespace(home_cluster_id)
        self.virtual_nodes = Informer(home, VirtualNodeResource, namespace=names.LIQO_NAMESPACE)
        self.advertisements = Informer(foreign, ResourceAdvertisementResource, namespace=tenant)
        self.offloadings = Informer(home, NamespaceOffloadingResource)
        self.node = VirtualNodeController(
            home,
            foreign,
            home_cluster_id=home_cluster_id,
            foreign_cluster_id=foreign_cluster_id,
            virtual_nodes=self.virtual_nodes,
            advertisements=self.advertisements,
            address=node_address,
            kubelet_port=kubelet_port,
        )
        self.pods = PodOffloader(
            home,
            foreign,
            home_cluster_id=home_cluster_id,
            foreign_cluster_id=foreign_cluster_id,
            offloadings=self.offloadings,
            node_address=node_address,
            virtual_node_spec=self.node.spec,
        )
        self.reflection = Reflection(
            home,
            foreign,
            home_cluster_id=home_cluster_id,
            foreign_cluster_id=foreign_cluster_id,
            offloadings=self.offloadings,
            virtual_node_spec=self.node.spec,
            metrics=metrics,
        )
        self.offloadings.add_handler(self.reflection.on_offloading)
        # seed 002: ServiceAccount tokens of the pods on this node, and events back from the twins
        self.tokens = TokenReflector(
            home,
            foreign,
            home_cluster_id=home_cluster_id,
            foreign_cluster_id=foreign_cluster_id,
            pods=self.pods.pods,
            virtual_node_spec=self.node.spec,
            events=self.reflection.events,
            metrics=metrics,
            home_config_map=lambda namespace, name: self.reflection.home_object("configmap", namespace, name),
        )
        self.events = EventReflector(
            home,
            foreign=foreign,
            foreign_cluster_id=foreign_cluster_id,
            home_object=self.home_object_of_event,
            settings=lambda: self.reflection.settings_of("event"),
            metrics=metrics,
        )
        # seed 002's storage fabric: claims of class liqo whose pod landed on this node
        self.storage = StorageProvisioner(
            home,
            foreign,
            home_cluster_id=home_cluster_id,
            foreign_cluster_id=foreign_cluster_id,
            virtual_node_spec=self.node.spec,
            settings_of=self.reflection.settings_of,
            events=HomeEvents(home, f"liqo-storage-{foreign_cluster_id}"),
            metrics=metrics,
        )
        self._event_settings: ReflectionSettings | None = None
        self._pod_skip_lists = skip_lists(None)
        self.home = home
        self.home_cluster_id, self.foreign_cluster_id = home_cluster_id, foreign_cluster_id
        self.offloadings.add_handler(self._follow_twins)
        self.virtual_nodes.add_handler(self._on_virtual_node)
        self.informers = [
            self.virtual_nodes,
            self.advertisements,
            self.offloadings,
            *self.node.informers,
            *self.pods.informers,
        ]
        self.synced = asyncio.Event()

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

    def _follow_twins(self, _: Event) -> None:
        if self.reflection.started:
            twins = self.reflection.twins()
            self.tokens.follow(twins)
            self.events.follow(twins)
            self.storage.follow(twins)

    async def home_object_of_event(
        self, kind: str, namespace: str, name: str, foreign_uid: str | None
    ) -> dict[str, Any] | None:
        """The home object a foreign event in the twin of `namespace` is about, if it has one and the
        foreign object is ours."""
        if kind == "Pod":
            pod = self.pods.pods.store.get(f"{namespace}/{name}")  # the pods on this virtual node
            return {"apiVersion": "v1", "kind": "Pod", **pod.to_dict()} if pod is not None else None
        reflector = self.reflection.by_kind.get(kind.lower())
        if reflector is not None:
            watch = reflector.watches.get(namespace)
            if watch is None:
                return None
            remote = watch.foreign.store.get(f"{watch.twin}/{name}")
            if remote is not None and not is_owned(remote.to_dict(), self.home_cluster_id, self.foreign_cluster_id):
                return None  # about a foreign object of that name that is not ours
            found = reflector.home_object(namespace, name)
            api_version = reflector.kind.resource._api_info.resource.api_version
            return {"apiVersion": api_version, "kind": kind, **found} if found is not None else None
        if kind == "PersistentVolumeClaim":
            with unless_gone():
                claim: Any = await self.home.get(PersistentVolumeClaim, name, namespace=namespace)
                return {"apiVersion": "v1", "kind": kind, **claim.to_dict()}
        return None

    def _on_virtual_node(self, _: Event) -> None:
        """A changed remapping shows at home at once: every pod's status is reconciled again; changed
        reflection settings apply to every reflected object."""
        self.reflection.on_settings()
        self.tokens.on_settings()
        events = self.reflection.settings_of("event")
        if events != self._event_settings:
            self._event_settings = events
            self.events.requeue_all()
        spec = self.node.spec()
        mapping, skips = pod_cidr_mapping(spec), skip_lists(spec)
        # new skip lists reach the remote pods' labels and annotations through their ShadowPods
        if mapping != self.pods.pod_cidr_mapping or skips != self._pod_skip_lists:
            self.pods.pod_cidr_mapping, self._pod_skip_lists = mapping, skips
            for key in self.pods.pods.store:
                self.pods.queue.add(key)

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
        queues: list[WorkQueue] = [self.node.queue, self.pods.queue]
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
            self.pods.queue.start()
            self.reflection.start()
            self.tokens.start()
            self.events.start()
            self.storage.start(self.reflection.twins())
            self._follow_twins(Event("MODIFIED", "", None))
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
            self.pods.stop()
            for queue in queues:
                await queue.shutdown()
            await self.reflection.stop()
            await self.tokens.stop()
            await self.events.stop()
            await self.storage.stop()

    async def _capacity_once_advertised(self) -> None:
        """Until the foreign advertisement is known the Node keeps the capacity it shows; once
        known (even as nothing) the Node is brought to it."""
        await self.advertisements.synced.wait()
        self.node.queue.add(self.node.node_name)
