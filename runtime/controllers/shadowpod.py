"""Foreign agent, pod side: keeps the pod a ShadowPod asks for, also while the home cluster is away.

The pod is named after its ShadowPod, carries its labels and annotations, and is owned by it, so
the garbage collector deletes the pod (with the pod's own grace period) when the home side deletes
the ShadowPod. A pod that disappears is created again and the ShadowPod's status counts the
recreation (the home pod shows it as restarts); a pod that Succeeded or Failed is never brought
back. Everything the controller knows is in the ShadowPod's status, so a restart loses nothing;
the status is written when a pod has left Pending (its UID, phase and the recreation count).

A pod is recreated only `recreate_after` seconds after it went missing, as a kubelet waits before
restarting a container: whoever deleted the old pod by name alone (kwok does, without a UID
precondition) may send that delete again and must not hit the new pod, and a pod that something
keeps deleting is not recreated in a hot loop.
"""

from __future__ import annotations

import logging
import time
from typing import Any

from lightkube import ApiError, AsyncClient
from lightkube.operators import exists
from lightkube.resources.core_v1 import Pod
from lightkube.types import PatchType

from runtime.api import names
from runtime.kube import Informer, WorkQueue, unless_gone
from runtime.kube.controlling import run_controller
from runtime.kube.resources import ShadowPodResource

log = logging.getLogger(__name__)

TERMINAL_PHASES = ("Succeeded", "Failed")


class ShadowPodController:
    def __init__(self, client: AsyncClient, cluster_id: str, *, workers: int = 16, recreate_after: float = 1.0) -> None:
        self.client = client
        self.cluster_id = cluster_id
        self.recreate_after = recreate_after
        self._missing_since: dict[str, float] = {}
        self._created: set[str] = set()  # keys whose pod this process created: a new one waits
        self.shadows = Informer(client, ShadowPodResource)
        self.pods = Informer(client, Pod, labels={names.ORIGIN_LABEL: exists()})
        self.queue = WorkQueue(self.reconcile, workers=workers, name="shadowpod")
        self.shadows.add_handler(lambda event: self.queue.add(event.key))
        self.pods.add_handler(lambda event: self.queue.add(event.key))

    async def run(self) -> None:
        await run_controller([self.shadows, self.pods], self.queue)

    async def reconcile(self, key: str) -> None:
        shadow = self.shadows.store.get(key)
        if shadow is None or shadow.metadata.deletionTimestamp:
            self._missing_since.pop(key, None)
            self._created.discard(key)
            return  # the garbage collector removes the pod it owned
        status = dict(shadow.get("status") or {})
        pod = self.pods.store.get(key)
        if pod is None:
            if status.get("phase") in TERMINAL_PHASES:
                return  # finished: a completed or failed pod is never run again
            recreating = bool(status.get("podUID")) or key in self._created
            if recreating and not self._waited_enough(key):
                return
            await self._create_pod(shadow)
            self._created.add(key)
            return
        self._missing_since.pop(key, None)
        phase = pod.status.phase if pod.status else None
        if phase in (None, "Pending"):
            return  # nothing to record yet: one status write per pod, once it runs (or ends)
        update: dict[str, Any] = {}
        if status.get("podUID") != pod.metadata.uid:
            update["podUID"] = pod.metadata.uid
            if status.get("podUID"):  # a pod that never left Pending is no restart, as for a kubelet
                update["recreations"] = int(status.get("recreations") or 0) + 1
                log.info("recreated pod %s (recreation %d)", key, update["recreations"])
        if phase != status.get("phase"):
            update["phase"] = phase  # shown by `kubectl get shadowpods`; a terminal one stops recreation
        if update:
            await self._patch_status(shadow, update)

    def _waited_enough(self, key: str) -> bool:
        """Whether the pod has been missing `recreate_after` seconds; if not, come back then."""
        now = time.monotonic()
        since = self._missing_since.setdefault(key, now)
        if now - since >= self.recreate_after:
            del self._missing_since[key]
            return True
        self.queue.add_after(key, self.recreate_after - (now - since))
        return False

    async def _create_pod(self, shadow: Any) -> None:
        meta = shadow.metadata
        body = {
            "apiVersion": "v1",
            "kind": "Pod",
            "metadata": {
                "name": meta.name,
                "namespace": meta.namespace,
                "labels": dict(meta.labels or {}),
                "annotations": dict(meta.annotations or {}),
                "ownerReferences": [
                    {
                        "apiVersion": names.API_VERSION,
                        "kind": "ShadowPod",
                        "name": meta.name,
                        "uid": meta.uid,
                        "controller": True,
                        "blockOwnerDeletion": True,
                    }
                ],
            },
            "spec": shadow["spec"]["pod"],
        }
        try:
            await self.client.create(Pod.from_dict(body))  # type: ignore[call-overload]
        except ApiError as err:
            if err.status.code != 409:
                raise  # 409: ours already, not yet in the informer; its event brings us back

    async def _patch_status(self, shadow: Any, update: dict[str, Any]) -> None:
        with unless_gone():
            await self.client.patch(
                ShadowPodResource.Status,
                shadow.metadata.name,
                {"status": update},
                namespace=shadow.metadata.namespace,
                patch_type=PatchType.MERGE,
            )
