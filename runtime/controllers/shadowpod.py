"""Foreign agent, pod side: keeps the pod a ShadowPod asks for, also while the home cluster is away.

The pod is named after its ShadowPod, carries its labels and annotations, and is owned by it, so
the garbage collector deletes the pod (with the pod's own grace period) when the home side deletes
the ShadowPod. A pod that disappears is created again and the ShadowPod's status counts the
recreation (the home pod shows it as restarts); a pod that Succeeded or Failed is never brought
back. Everything the controller knows is in the ShadowPod's status, so a restart loses nothing;
the status is written when a pod has left Pending (its UID, phase and the recreation count).

Restarts: at a recreation, the status adds the old pod's last restart counts plus one per
container to `previousRestarts`, so the home pod's restart count only grows.

What may change on a live pod follows the ShadowPod (the virtual kubelet updates it when the home
pod changes): labels, annotations, container images, activeDeadlineSeconds, added tolerations,
and resources through the resize subresource. `appliedHash` records which version of the
ShadowPod the pod was brought to, so the pod is touched only when the ShadowPod changed, and
`appliedKeys` the label and annotation keys it carried: only those are removed when the ShadowPod
drops them (the foreign cluster adds its own, e.g. topology labels at binding; they stay).

A pod the foreign API server refuses (quota, Pod Security, admission) is retried with backoff,
and the refusal is recorded on the status (reason CreateFailed, the server's message) for the
virtual kubelet to show at home; the next successful create clears it.

Before a pod is made (and remade), the home's grant decides (runtime/controllers/granting.py): a
ShadowPod refused there gets no pod, and its status says why (reason CreateFailed) as for a refusal
by the API server; it is tried again when its home's use goes down or its grant changes. The pod is
made on the nodes the grant lets its home use (its nodeSelector gets the home's selector); one that
names a node or tolerates a taint its home may not tolerate is refused the same way, and a toleration
it gains later that its home may not have is not carried to the live pod.

A pod is recreated only `recreate_after` seconds after it went missing, as a kubelet waits before
restarting a container: whoever deleted the old pod by name alone (kwok does, without a UID
precondition) may send that delete again and must not hit the new pod, and a pod that something
keeps deleting is not recreated in a hot loop.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable
from typing import Any

from lightkube import ApiError, AsyncClient
from lightkube.operators import exists
from lightkube.resources.core_v1 import Pod
from lightkube.types import PatchType

from runtime.api import names
from runtime.api.resources import ShadowPodResource
from runtime.api.shadowpod import CREATE_FAILED_REASON, EVICTED_REASON, pod_spec_of
from runtime.controllers.granting import Grants, origin_of
from runtime.controllers.trimming import as_the_agent_reads
from runtime.forging.pods import TERMINAL_PHASES, pod_of_shadow, restart_counts
from runtime.forging.shadowpods import applied, applied_hash, live_changes
from runtime.kube import Event, Informer, OwnWrites, WorkQueue, unless_gone
from runtime.kube.controlling import run_controller
from runtime.kube.packing import unpacked

log = logging.getLogger(__name__)


class ShadowPodController:
    def __init__(
        self,
        client: AsyncClient,
        cluster_id: str,
        *,
        workers: int = 16,
        recreate_after: float = 1.0,
        twin_origin: Callable[[str], str | None] | None = None,
        twins: Informer | None = None,
        quotas: Informer | None = None,
    ) -> None:
        """`twin_origin`: the home cluster a namespace is a twin of, from the agent's namespaces
        (`twins`, an informer another controller runs: reconciling waits for it to sync); with it,
        every pod is first held to its home's grant (the agent always passes it; without it, as in
        unit tests of the other rules, nothing is). `quotas`: the Quotas' informer when another
        controller runs it."""
        self.twins = twins
        self.client = client
        self.cluster_id = cluster_id
        self.recreate_after = recreate_after
        self._missing_since: dict[str, float] = {}
        self._created: set[str] = set()  # keys whose pod this process created: a new one waits
        self._restarts: dict[str, tuple[str, dict[str, int]]] = {}  # key -> (pod uid, its last restart counts)
        self.shadows = Informer(client, ShadowPodResource, packed=True)
        self.pods = Informer(client, Pod, labels={names.ORIGIN_LABEL: exists()}, trim=as_the_agent_reads, packed=True)
        self.queue = WorkQueue(self.reconcile, workers=workers, name="shadowpod")
        self.status_writes = OwnWrites()  # ShadowPods' events our status patches caused
        self.pod_writes = OwnWrites()  # pods' events our creates caused
        self.grants = (
            Grants(client, cluster_id, self.queue.add, twin_origin, self.queue.add_after, quotas=quotas)
            if twin_origin
            else None
        )
        self.shadows.add_handler(lambda event: self._on_event(event, self.status_writes))
        self.pods.add_handler(lambda event: self._on_event(event, self.pod_writes))

    def _on_event(self, event: Event, own: OwnWrites) -> None:
        if not own.is_echo(event):
            self.queue.add(event.key)

    async def run(self) -> None:
        await run_controller(
            [self.shadows, self.pods, *(self.grants.informers if self.grants else [])],
            self.queue,
            shared=[
                *([self.twins] if self.twins is not None else []),
                *([self.grants.quotas] if self.grants is not None and self.grants.shared_quotas else []),
            ],
        )

    async def reconcile(self, key: str) -> None:
        shadow = unpacked(self.shadows.store.get(key))
        if self.grants is not None:
            self.grants.seed(self.shadows.store, self.pods.store, unpacked)
        if shadow is None or shadow.metadata.deletionTimestamp:
            self._missing_since.pop(key, None)
            self._created.discard(key)
            self._restarts.pop(key, None)
            if self.grants is not None:
                self.grants.release(key)
            return  # the garbage collector removes the pod it owned
        status = dict(shadow.get("status") or {})
        pod = unpacked(self.pods.store.get(key))
        if pod is None:
            if status.get("phase") in TERMINAL_PHASES:
                if self.grants is not None:
                    self.grants.release(key)
                return  # finished: a completed or failed pod is never run again
            cordoned = self.grants.cordons(shadow) if self.grants is not None and status.get("podUID") else None
            if cordoned is not None:  # it ran, and was evicted (a drain) or lost while cordoned: not again
                await self._evicted(key, shadow, status, cordoned)
                return
            recreating = bool(status.get("podUID")) or key in self._created
            if recreating and not self._waited_enough(key):
                return
            spec, refusal = self.grants.confine(key, shadow) if self.grants is not None else (None, None)
            if refusal is None and self.grants is not None:
                refusal = self.grants.admit(key, shadow)
            if refusal is not None:
                await self._refused(shadow, status, refusal)
                return  # tried again when room is made, or the grant changes (Grants.requeue)
            try:
                await self._create(shadow, status, spec)
            except BaseException:
                if self.grants is not None:
                    self.grants.release(key)
                raise
            self._created.add(key)
            return
        self._missing_since.pop(key, None)
        update: dict[str, Any] = {}
        want = applied_hash(shadow)
        drift = status.get("appliedHash") != want
        if drift and await self._update_pod(shadow, pod, status.get("appliedKeys")):
            update.update(applied(shadow, want))
        pod_status = pod.to_dict().get("status") or {}
        counts = restart_counts(pod_status)
        phase = pod_status.get("phase")
        if self.grants is not None:
            if phase in TERMINAL_PHASES:
                self.grants.release(key)  # a finished pod holds nothing
            elif drift or not self.grants.counted(key, shadow):
                self.grants.count(key, shadow)  # resized, or made before this process started
        if phase not in (None, "Pending"):  # one status write per pod, once it runs (or ends)
            if status.get("podUID") != pod.metadata.uid:
                update["podUID"] = pod.metadata.uid
                if status.get("podUID"):  # a pod that never left Pending is no restart, as for a kubelet
                    update["recreations"] = int(status.get("recreations") or 0) + 1
                    update["previousRestarts"] = self._restarts_before(key, shadow, status)
                    log.info("recreated pod %s (recreation %d)", key, update["recreations"])
            if phase != status.get("phase"):
                update["phase"] = phase  # shown by `kubectl get shadowpods`; a terminal one stops recreation
            self._restarts[key] = (pod.metadata.uid, counts)
        if drift and (update or status.get("appliedHash") is not None):
            update.update(applied(shadow, want))
        if update:
            await self._patch_status(shadow, update)

    def _restarts_before(self, key: str, shadow: Any, status: dict[str, Any]) -> dict[str, int]:
        """Restarts of the pods before the one just seen: theirs so far, plus the old pod's last
        counts (when this process saw it), plus this recreation."""
        before = dict(status.get("previousRestarts") or {})
        uid, last = self._restarts.get(key, (None, {}))
        last = last if uid == status.get("podUID") else {}
        spec = pod_spec_of(shadow)
        containers = [c["name"] for kind in ("initContainers", "containers") for c in spec.get(kind) or []]
        recreations = int(status.get("recreations") or 0)
        return {name: before.get(name, recreations) + last.get(name, 0) + 1 for name in containers}

    async def _create(self, shadow: Any, status: dict[str, Any], spec: dict[str, Any] | None = None) -> None:
        try:
            await self._create_pod(shadow, spec)
        except ApiError as err:
            message = err.status.message or str(err)
            if status.get("reason") != CREATE_FAILED_REASON or status.get("message") != message:
                await self._patch_status(shadow, {"reason": CREATE_FAILED_REASON, "message": message})
            raise  # retried with backoff: the quota may free up, the policy may change
        if status.get("reason"):
            await self._patch_status(shadow, {"reason": None, "message": None})

    async def _evicted(self, key: str, shadow: Any, status: dict[str, Any], message: str) -> None:
        """Its pod is gone while its home is cordoned: Failed, reason Evicted (the home pod ends as on
        a drained node); what it held is free again."""
        if self.grants is not None:
            self.grants.release(key)
        if status.get("reason") != EVICTED_REASON:
            log.info("not starting %s again: %s", key, message)
            await self._patch_status(shadow, {"phase": "Failed", "reason": EVICTED_REASON, "message": message})

    async def _refused(self, shadow: Any, status: dict[str, Any], message: str) -> None:
        """Say on the ShadowPod why no pod is made (the virtual kubelet shows it on the home pod)."""
        log.info("not starting %s/%s: %s", shadow.metadata.namespace, shadow.metadata.name, message)
        if status.get("reason") != CREATE_FAILED_REASON or status.get("message") != message:
            await self._patch_status(shadow, {"reason": CREATE_FAILED_REASON, "message": message})

    async def _update_pod(self, shadow: Any, pod: Any, applied_keys: dict[str, list[str]] | None) -> bool:
        """Bring the live pod to the ShadowPod; whether anything had to change."""
        wanted = shadow.to_dict()
        home = origin_of(shadow)
        if self.grants is not None and home is not None:
            spec, problem = self.grants.node_rules(home).confine(pod_spec_of(shadow))
            if problem is not None:  # the tolerations the pod has stay (a live pod's others cannot change)
                log.info("not carrying to %s/%s: %s", shadow.metadata.namespace, shadow.metadata.name, problem)
                spec["tolerations"] = (pod.to_dict().get("spec") or {}).get("tolerations") or []
            wanted["spec"] = {**(wanted.get("spec") or {}), "pod": spec}
        patch, resize = live_changes(wanted, pod.to_dict(), applied_keys)
        meta = shadow.metadata
        if patch:
            with unless_gone():
                await self.client.patch(Pod, meta.name, patch, namespace=meta.namespace, patch_type=PatchType.STRATEGIC)
        if resize:
            with unless_gone():
                await self.client.patch(
                    Pod.Resize, meta.name, resize, namespace=meta.namespace, patch_type=PatchType.STRATEGIC
                )
        if patch or resize:
            log.info("updated pod %s/%s to its ShadowPod: %s %s", meta.namespace, meta.name, patch, resize)
        return bool(patch or resize)

    def _waited_enough(self, key: str) -> bool:
        """Whether the pod has been missing `recreate_after` seconds; if not, come back then."""
        now = time.monotonic()
        since = self._missing_since.setdefault(key, now)
        if now - since >= self.recreate_after:
            del self._missing_since[key]
            return True
        self.queue.add_after(key, self.recreate_after - (now - since))
        return False

    async def _create_pod(self, shadow: Any, spec: dict[str, Any] | None = None) -> None:
        """`spec`: the pod spec held to its home's nodes (None: the ShadowPod's as it is)."""
        body = pod_of_shadow(shadow.to_dict())
        if spec is not None:
            body["spec"] = spec
        key = f"{shadow.metadata.namespace}/{shadow.metadata.name}"
        try:
            created = await self.client.create(Pod.from_dict(body))  # type: ignore[call-overload]
            self.pod_writes.record(key, created)
        except ApiError as err:
            if err.status.code != 409:
                raise
            if self.pod_writes.create_conflicted(key, self.pods.store):
                self.queue.add(key)

    async def _patch_status(self, shadow: Any, update: dict[str, Any]) -> None:
        with unless_gone():
            patched = await self.client.patch(
                ShadowPodResource.Status,
                shadow.metadata.name,
                {"status": update},
                namespace=shadow.metadata.namespace,
                patch_type=PatchType.MERGE,
            )
            self.status_writes.record(f"{shadow.metadata.namespace}/{shadow.metadata.name}", patched)
