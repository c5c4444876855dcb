"""docs/reflection.md's storage fabric: claims of the home StorageClass `liqo` follow their first pod.

The class binds WaitForFirstConsumer, so the scheduler picks the first pod's node and writes it on
the claim (`volume.kubernetes.io/selected-node`). When that node is this virtual kubelet's:
- the claim is created in the twin namespace of the foreign cluster, with the storage class
  negotiated for the peering (VirtualNode `spec.storageClasses`) instead of `liqo`;
- a home PV stands for it: bound in advance to the home claim (claimRef), of class `liqo`, with node
  affinity to the virtual node, so the home PV controller binds them, the scheduler lets the pod onto
  the virtual node, and every later pod mounting the claim goes to the same node. Its size and access
  modes are the remote claim's once bound there (its status: no foreign PV, a cluster-scoped object,
  is ever read). It is created as soon as the remote claim exists, not once that is bound: a foreign
  class that itself waits for a first consumer binds only when the offloaded pod arrives, and that
  pod is offloaded only once the home claim is bound.
- the pod's volume names the claim, and the remote claim has the same name in the twin namespace:
  the offloaded pod mounts it as it is.
Reclaim follows the home PV's policy (the StorageClass's, Delete): once the home claim is gone the
remote claim and the home PV are deleted; with Retain both stay. Decisions come from the synced
stores of both clusters only, so a restart recreates and deletes nothing. The remote claim and the
home PV are forged in runtime/forging/storage.py.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Mapping
from typing import Any

from lightkube import ApiError
from lightkube.resources.core_v1 import PersistentVolume, PersistentVolumeClaim

from runtime.api import names
from runtime.forging.objects import is_owned, ownership_labels, up_to_date
from runtime.forging.storage import home_volume, metadata_of, provisions_here, remote_claim, volume_outdated
from runtime.kube import Event, Informer, unless_gone
from runtime.kube.twins import TwinFollower, Watched
from runtime.reflection.context import Peering

log = logging.getLogger(__name__)

KIND = "persistentvolumeclaim"  # not configurable (docs/reflection.md); only the VirtualNode's skip lists apply
FIELD_MANAGER = "liqo-storage"


class StorageProvisioner(TwinFollower):
    """Per foreign cluster: the `liqo` claims scheduled on its virtual node, in every namespace offloaded there."""

    def __init__(self, peering: Peering) -> None:
        super().__init__("storage", workers=2, metrics=peering.metrics)
        self.peering = peering
        # the home PVs this virtual kubelet made (its ownership labels), keyed back to their claims
        owned = ownership_labels(peering.home_cluster_id, peering.foreign_cluster_id)
        self.volumes = Informer(peering.home, PersistentVolume, labels=owned)
        self.volumes.add_handler(self._on_volume)
        self._volumes_task: asyncio.Task[None] | None = None

    def open_scope(self, namespace: str, twin: str) -> dict[str, Watched]:
        return {
            "home": self.peering.home_watches.view(PersistentVolumeClaim, namespace, packed=True),
            "foreign": Informer(self.peering.foreign, PersistentVolumeClaim, namespace=twin, packed=True),
        }

    def _on_volume(self, event: Event) -> None:
        claim_ref = event.obj.spec.claimRef if event.obj.spec is not None else None
        if claim_ref is not None:
            self.queue.add(f"{claim_ref.namespace}/{claim_ref.name}")

    async def start(self) -> None:
        self._volumes_task = asyncio.create_task(self.volumes.run())
        await super().start()

    async def stop(self) -> None:
        if self._volumes_task is not None:
            self._volumes_task.cancel()
        await super().stop()

    # -- reconcile ----------------------------------------------------------------------------------
    def _volume_of(self, namespace: str, name: str) -> dict[str, Any] | None:
        for volume in self.volumes.store.values():
            ref = volume.spec.claimRef if volume.spec is not None else None
            if ref is not None and ref.namespace == namespace and ref.name == name:
                found: dict[str, Any] = volume.to_dict()
                return found
        return None

    async def reconcile(self, key: str) -> None:
        namespace, _, name = key.partition("/")
        watch = self.synced_scope(namespace)
        if watch is None or not self.volumes.synced.is_set():
            return  # decided only on what both clusters are known to hold: their sync requeues all
        peering = self.peering
        found = watch["home"].store.get(key)
        home = found.to_dict() if found is not None else None
        found = watch["foreign"].store.get(f"{watch.twin}/{name}")
        remote = found.to_dict() if found is not None else None
        volume = self._volume_of(namespace, name)
        ours = remote is not None and is_owned(remote, peering.home_cluster_id, peering.foreign_cluster_id)
        # the UID of the home claim the remote one was made for
        made_for = (metadata_of(remote).get("annotations") or {}).get(names.HOME_CLAIM_UID_ANNOTATION)
        home_uid = metadata_of(home).get("uid")
        volume_uid = ((volume or {}).get("spec") or {}).get("claimRef", {}).get("uid")
        deleting = bool(metadata_of(home).get("deletionTimestamp"))
        serves_claim = volume is not None and home_uid is not None and volume_uid == home_uid
        wanted = home is not None and (serves_claim or (not deleting and provisions_here(home, peering.node_name)))

        if volume is not None and not serves_claim:
            # the claim it was bound to is gone (or is another claim now): reclaim as the volume says
            if (volume.get("spec") or {}).get("persistentVolumeReclaimPolicy") == "Retain":
                return
            if ours and made_for in (None, volume_uid):
                await self._delete_remote(watch.twin, name, remote)
            with unless_gone():
                await peering.home.delete(PersistentVolume, metadata_of(volume)["name"])
            return
        if home is None or not wanted:
            if ours and remote is not None and volume is None:
                await self._delete_remote(watch.twin, name, remote)  # no home claim here needs it any more
            return
        if remote is not None and not ours:
            consequence = "it is left untouched and this claim is not provisioned there"
            held = f"PersistentVolumeClaim {watch.twin}/{name}"
            await peering.conflict(home, "ProvisioningConflict", held, consequence)
            return
        if remote is not None and made_for != str(home_uid):
            await self._delete_remote(watch.twin, name, remote)  # a former claim's volume: never this one's
            return
        if remote is None and deleting:
            return  # being deleted at home: nothing is provisioned for it any more
        remote = await self._ensure_remote(home, remote, watch.twin)
        desired_volume = home_volume(
            home,
            remote,
            node_name=peering.node_name,
            home_cluster_id=peering.home_cluster_id,
            foreign_cluster_id=peering.foreign_cluster_id,
        )
        if volume is None or volume_outdated(desired_volume, volume):
            volume_obj: Any = PersistentVolume.from_dict(desired_volume)
            await peering.home.apply(volume_obj, field_manager=FIELD_MANAGER, force=True)

    async def _ensure_remote(self, home: dict[str, Any], remote: dict[str, Any] | None, twin: str) -> dict[str, Any]:
        peering = self.peering
        spec = peering.node_spec()
        # the class of a claim that exists stays: a claim's class cannot change
        storage_class = (
            (remote.get("spec") or {}).get("storageClassName")
            if remote is not None
            else (spec.remote_storage_class() if spec else None)
        )
        desired = remote_claim(
            home,
            twin=twin,
            storage_class=storage_class,
            home_cluster_id=peering.home_cluster_id,
            foreign_cluster_id=peering.foreign_cluster_id,
            settings=peering.settings_of(KIND),
        )
        if remote is not None and up_to_date(desired, remote):
            return remote
        claim: Any = PersistentVolumeClaim.from_dict(desired)
        try:
            applied = await peering.foreign.apply(claim, field_manager=FIELD_MANAGER, force=True)
        except ApiError as err:
            if err.status.code in (400, 403, 404, 409, 422):  # refused as it is: say so at home, retry later
                await peering.warnings.warn(
                    home, "ProvisioningFailed", f"{peering.foreign_cluster_id} refused the claim: {err.status.message}"
                )
            raise
        result: dict[str, Any] = applied.to_dict()
        return result

    async def _delete_remote(self, twin: str, name: str, remote: Mapping[str, Any] | None) -> None:
        if remote is None or metadata_of(remote).get("deletionTimestamp"):
            return
        with unless_gone():
            await self.peering.foreign.delete(PersistentVolumeClaim, name, namespace=twin)
