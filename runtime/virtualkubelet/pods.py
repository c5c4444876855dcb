"""Pod offloading: a pod scheduled on the virtual node runs in the foreign cluster through a ShadowPod.

Per home pod (the key), in the twin namespace its NamespaceOffloading got in this cluster:
- no ShadowPod yet: create it with seed 002's mutations (translation.py); the foreign agent makes
  and keeps the pod;
- the remote pod's status comes back to the home pod, remapped (seed 002);
- the home pod being deleted: the ShadowPod and the remote pod go (the home pod's grace period
  passed on), and once the remote pod is gone the home pod is released, as a kubelet does;
- the home pod gone: its ShadowPod and remote pod go too;
- the namespace not offloaded to this cluster: the pod stays Pending with reason OffloadingBackOff.
Deletes happen only on what the synced stores say, so a restart never removes a pod still wanted.
"""

from __future__ import annotations

import asyncio
import logging
from typing import Any

from lightkube import ApiError, AsyncClient
from lightkube.resources.core_v1 import Pod
from lightkube.types import CascadeType, PatchType

from runtime.api import names
from runtime.kube import Event, Informer, WorkQueue, unless_gone
from runtime.kube.resources import ShadowPodResource
from runtime.virtualkubelet.node import NODE_ADDRESS
from runtime.virtualkubelet.translation import (
    CidrMapping,
    TranslationError,
    home_pod_status,
    nothing_to_tell,
    remote_pod_metadata,
    remote_pod_spec,
)

log = logging.getLogger(__name__)

BACKOFF_REASON = "OffloadingBackOff"


class TwinWatch:
    """The foreign side of one twin namespace: its ShadowPods and their pods."""

    def __init__(self, foreign: AsyncClient, home_id: str, twin: str, on_event: Any) -> None:
        self.shadows = Informer(foreign, ShadowPodResource, namespace=twin)
        self.pods = Informer(foreign, Pod, namespace=twin, labels={names.ORIGIN_LABEL: home_id})
        for informer in (self.shadows, self.pods):
            informer.add_handler(on_event)
        self.tasks = [asyncio.create_task(i.run()) for i in (self.shadows, self.pods)]

    def synced(self) -> bool:
        return self.shadows.synced.is_set() and self.pods.synced.is_set()

    def stop(self) -> None:
        for task in self.tasks:
            task.cancel()


class PodOffloader:
    def __init__(
        self,
        home: AsyncClient,
        foreign: AsyncClient,
        *,
        home_cluster_id: str,
        foreign_cluster_id: str,
        offloadings: Informer,
        pod_cidr_mapping: CidrMapping | None = None,
        workers: int = 16,
    ) -> None:
        self.home, self.foreign = home, foreign
        self.home_cluster_id, self.foreign_cluster_id = home_cluster_id, foreign_cluster_id
        self.node_name = names.virtual_node_name(foreign_cluster_id)
        self.pod_cidr_mapping = pod_cidr_mapping
        self.offloadings = offloadings
        self.pods = Informer(home, Pod, fields={"spec.nodeName": self.node_name})
        self.queue = WorkQueue(self.reconcile, workers=workers, name="pods")
        self.pods.add_handler(lambda event: self.queue.add(event.key))
        self.offloadings.add_handler(self._on_offloading)
        self.twins: dict[str, TwinWatch] = {}  # home namespace -> its twin's watch
        self._home_of_twin: dict[str, str] = {}

    @property
    def informers(self) -> list[Informer]:
        return [self.pods]

    # -- which namespaces are offloaded here ---------------------------------------------------
    def twin_of(self, namespace: str) -> str | None:
        """The twin namespace in this foreign cluster, if the offloading there is Ready."""
        offloading = self.offloadings.store.get(f"{namespace}/{names.NAMESPACE_OFFLOADING_NAME}")
        status = (offloading or {}).get("status") or {}
        conditions = (status.get("remoteNamespacesConditions") or {}).get(self.foreign_cluster_id) or []
        ready = any(c.get("type") == "Ready" and c.get("status") == "True" for c in conditions)
        return status.get("remoteNamespaceName") if ready else None

    def _on_offloading(self, event: Event) -> None:
        namespace = event.key.partition("/")[0]
        twin = None if event.type == "DELETED" else self.twin_of(namespace)
        watch = self.twins.get(namespace)
        if twin and watch is None:
            self._home_of_twin[twin] = namespace
            self.twins[namespace] = TwinWatch(self.foreign, self.home_cluster_id, twin, self._on_remote)
        elif not twin and watch is not None:
            watch.stop()
            del self.twins[namespace]
        for key in self.pods.store:
            if key.startswith(f"{namespace}/"):
                self.queue.add(key)

    def _on_remote(self, event: Event) -> None:
        twin, _, name = event.key.partition("/")
        namespace = self._home_of_twin.get(twin)
        if namespace is not None:
            self.queue.add(f"{namespace}/{name}")

    # -- reconcile -------------------------------------------------------------------------------
    async def reconcile(self, key: str) -> None:
        namespace, _, name = key.partition("/")
        pod = self.pods.store.get(key)
        twin = self.twin_of(namespace)
        watch = self.twins.get(namespace)
        if twin is None or watch is None:
            if pod is not None and not pod.metadata.deletionTimestamp:
                await self._back_off(pod, f"namespace {namespace} is not offloaded to {self.foreign_cluster_id}")
            elif pod is not None:
                await self._release(pod)
            return
        if not watch.synced():
            self.queue.add_after(key, 0.2)  # decide on the foreign side only once it is known
            return
        shadow = watch.shadows.store.get(f"{twin}/{name}")
        remote = watch.pods.store.get(f"{twin}/{name}")
        if pod is None:
            await self._delete_remote(twin, name, shadow, remote, grace=None)
            return
        if pod.metadata.deletionTimestamp:
            await self._delete_remote(twin, name, shadow, remote, grace=pod.metadata.deletionGracePeriodSeconds)
            if remote is None and (shadow is None or shadow.metadata.deletionTimestamp):
                await self._release(pod)
            # else the remote pod's removal, seen by its informer, brings this key back
            return
        if shadow is None:
            await self._create_shadow(pod, twin)
            return
        if remote is not None:
            recreations = int((shadow.get("status") or {}).get("recreations") or 0)
            await self._reflect_status(pod, remote, recreations)

    async def _create_shadow(self, pod: Any, twin: str) -> None:
        home_pod = pod.to_dict()
        ids = {"home_cluster_id": self.home_cluster_id, "foreign_cluster_id": self.foreign_cluster_id}
        try:
            spec = remote_pod_spec(home_pod, **ids)
            meta = remote_pod_metadata(home_pod, **ids)
        except TranslationError as err:
            await self._back_off(pod, str(err))
            return
        body = {"metadata": {**meta, "name": pod.metadata.name, "namespace": twin}, "spec": {"pod": spec}}
        try:
            await self.foreign.create(ShadowPodResource.from_dict(body))
        except ApiError as err:
            if err.status.code != 409:
                raise

    async def _reflect_status(self, pod: Any, remote: Any, recreations: int) -> None:
        remote_status = remote.to_dict().get("status") or {}
        if nothing_to_tell(remote_status):
            return
        desired = home_pod_status(
            remote_status, pod_cidr_mapping=self.pod_cidr_mapping, host_ip=NODE_ADDRESS, recreations=recreations
        )
        current = pod.to_dict().get("status") or {}
        if all(current.get(k) == v for k, v in desired.items()):
            return
        await self._patch_status(pod, desired)

    async def _back_off(self, pod: Any, message: str) -> None:
        status = pod.to_dict().get("status") or {}
        if status.get("phase") == "Pending" and status.get("reason") == BACKOFF_REASON:
            return
        await self._patch_status(pod, {"phase": "Pending", "reason": BACKOFF_REASON, "message": message})

    async def _patch_status(self, pod: Any, status: dict[str, Any]) -> None:
        with unless_gone():
            await self.home.patch(
                Pod.Status,
                pod.metadata.name,
                {"status": status},
                namespace=pod.metadata.namespace,
                patch_type=PatchType.MERGE,
            )

    async def _delete_remote(self, twin: str, name: str, shadow: Any, remote: Any, grace: int | None) -> None:
        """Delete what is there and not already going: asking again would only load the API server."""
        # The ShadowPod first (else the agent would bring the pod back), orphaning its pod: the
        # garbage collector would delete the pod with the pod's own grace period, we pass the home
        # pod's. Were we to stop in between, the next reconcile finds the orphan and deletes it.
        if shadow is not None and not shadow.metadata.deletionTimestamp:
            with unless_gone():
                await self.foreign.delete(ShadowPodResource, name, namespace=twin, cascade=CascadeType.ORPHAN)
        if remote is not None and not remote.metadata.deletionTimestamp:
            with unless_gone():
                await self.foreign.delete(Pod, name, namespace=twin, grace_period=grace)

    async def _release(self, pod: Any) -> None:
        """The remote side is gone: remove the home pod for good, as a kubelet does."""
        with unless_gone():
            await self.home.delete(Pod, pod.metadata.name, namespace=pod.metadata.namespace, grace_period=0)

    def stop(self) -> None:
        for watch in self.twins.values():
            watch.stop()
