"""Pod offloading: a pod scheduled on the virtual node runs in the foreign cluster through a ShadowPod.

Per home pod (the key), in the twin namespace its NamespaceOffloading got in this cluster:
- no ShadowPod yet: create it with docs/reflection.md's mutations (runtime.forging.pods); the foreign agent makes
  and keeps the pod;
- the home pod changed (labels, annotations, images, activeDeadlineSeconds, tolerations, an
  in-place resize): the ShadowPod follows, and the agent brings the live remote pod along;
- the remote pod's status comes back as the home pod's whole status, remapped (docs/reflection.md);
- the foreign cluster refused the pod (its admission policy refused the ShadowPod, its agent held
  the home's grant, its API server refused the pod: quota, Pod Security): the home pod stays
  Pending with reason FailedOffloading, and a Warning event, both quoting the foreign side's reason;
- the home pod being deleted: the ShadowPod and the remote pod go (the home pod's grace period
  passed on), and once the remote pod is gone the home pod is released, as a kubelet does;
- the home pod gone: its ShadowPod and remote pod go too;
- the namespace no longer offloaded to this cluster (unoffloaded, or this cluster deselected):
  its twin and the remote pods go, so a pod that ran there ends as on a drained node: Failed
  (reason OffloadingAborted), then deleted when a controller owns it, which makes a new one where
  the namespace now allows; a pod that never ran stays Pending with reason OffloadingBackOff, and
  a Warning event on it names the command that offloads its namespace here.
  A cluster still selected whose twin is not Ready (unreachable, failing) is no withdrawal: its
  running pods are left alone.
- a remote pod the foreign scheduler keeps Unschedulable (no foreign node fits it) for the seconds
  its NamespaceOffloading's move-unfit-pods-after annotation says (else the VirtualNode's, the
  stack-wide setting), and the virtual node's largest-pod labels exclude it (else its replacement
  could come back, a loop): the home pod is moved, a Warning
  event (reason NoForeignNodeFits) saying why; deleted when a controller owns it (its replacement,
  constrained by the pod webhook, goes to a virtual node where one foreign node fits it, or home),
  else failed, its remote pod removed.
Deletes happen only on what the synced stores say, so a restart never removes a pod still wanted.
"""

from __future__ import annotations

import datetime
import logging
from typing import Any

from lightkube import ApiError
from lightkube.resources.core_v1 import Pod
from lightkube.types import CascadeType, PatchType

from runtime.api import names
from runtime.api.namespaceoffloading import Placement, move_unfit_after, placement
from runtime.api.resources import ShadowPodResource
from runtime.api.shadowpod import CREATE_FAILED_REASON, EVICTED_REASON, pod_spec_of
from runtime.forging.pods import (
    ABORTED_REASON,
    TERMINAL_PHASES,
    CidrMapping,
    TranslationError,
    aborted_status,
    controlled,
    ever_ran,
    fit_requirements,
    fits,
    home_pod_status,
    live_pod_spec,
    merge_patch,
    not_offloaded_message,
    nothing_to_tell,
    pod_cidr_mapping,
    remote_pod_metadata,
    shadow_pod,
    skip_lists,
    unschedulable_since,
)
from runtime.kube import Event, Informer, InformerUnion, OwnWrites, unless_gone
from runtime.kube.packing import unpacked
from runtime.kube.twins import TwinFollower, TwinScope, Watched
from runtime.reflection.context import Peering

log = logging.getLogger(__name__)

BACKOFF_REASON = "OffloadingBackOff"  # docs/reflection.md: not offloaded (yet)
FAILED_EVENT_REASON = "FailedOffloading"
UNFIT_REASON = "NoForeignNodeFits"  # moved off the virtual node: its foreign scheduler found no node
# A ShadowPod create refused by the foreign cluster's admission (its ValidatingAdmissionPolicy: 403,
# or 422 for an invalid object) rather than failed: said on the home pod.
REFUSED_CODES = (400, 403, 422)


def now() -> str:
    return datetime.datetime.now(datetime.UTC).strftime("%Y-%m-%dT%H:%M:%SZ")


def without_spec(pod: Any) -> Any:
    """A remote pod as the offloader keeps it: its metadata and status are all it reads (the spec is
    the ShadowPod's), and the spec is half of a pod's memory."""
    pod.spec = None
    return pod


class PodOffloader(TwinFollower):
    """Per home pod on the virtual node (its key); per twin, a scope of its ShadowPods and their pods."""

    written = "shadows"  # the ShadowPods' events our creates and patches caused are echoes

    def __init__(
        self,
        peering: Peering,
        offloadings: Watched,
        *,
        pod_cidr_mapping: CidrMapping | None = None,
        node_address: str,
        workers: int = 16,
    ) -> None:
        """`peering.node_spec`: its apiServerTokenSupport and home API server shape new remote pods."""
        super().__init__("pods", workers=workers)
        self.peering = peering
        self.node_names = peering.node_names
        self.pod_cidr_mapping = pod_cidr_mapping
        self._skip_lists = skip_lists(None)  # the VirtualNode's, as last applied to the ShadowPods
        self._stack_unfit: int | None = None  # the stack-wide move-unfit-pods-after, as last seen
        self.node_address = node_address
        self.offloadings = offloadings
        # the home pods on the cluster's virtual nodes, one watch per node (a field selector names one)
        self.node_pods = {
            node: Informer(peering.home, Pod, fields={"spec.nodeName": node}, packed=True) for node in self.node_names
        }
        self.pods = InformerUnion(list(self.node_pods.values()))
        self.pods.add_handler(self._on_pod)
        # any change to an offloading may change what its pods here should do
        self.offloadings.add_handler(lambda event: self._requeue_namespace(event.key.partition("/")[0]))
        self._reported: dict[str, str] = {}  # home pod key -> the remote failure last reported
        # home pod key -> (its resourceVersion, its ShadowPod's) when the two were last found in step
        self._shadow_checked: dict[str, tuple[str | None, str | None]] = {}
        self.status_writes = OwnWrites()  # home pods' events our status patches caused

    @property
    def informers(self) -> list[Informer]:
        return list(self.node_pods.values())

    def stack_unfit_policy(self) -> int | None:
        """The stack-wide move-unfit-pods-after seconds, an annotation of the VirtualNode (the stack
        writes it on every one)."""
        return move_unfit_after(((self.peering.virtual_node() or {}).get("metadata") or {}).get("annotations"))

    def on_settings(self) -> None:
        """A changed remapping shows at home at once, and new skip lists reach the remote pods' labels
        and annotations through their ShadowPods: every pod is reconciled again."""
        spec = self.peering.node_spec()
        mapping, skips = pod_cidr_mapping(spec), skip_lists(spec)
        stack_unfit = self.stack_unfit_policy()
        if stack_unfit != self._stack_unfit:  # pods waiting Unschedulable may now be due for a move
            self._stack_unfit = stack_unfit
            for key in self.pods.store:
                self.queue.add(key)
        if mapping != self.pod_cidr_mapping or skips != self._skip_lists:
            self.pod_cidr_mapping, self._skip_lists = mapping, skips
            self._shadow_checked.clear()  # the ShadowPods' labels and annotations to compare anew
            for key in self.pods.store:
                self.queue.add(key)

    def _on_pod(self, event: Event) -> None:
        if event.type == "DELETED":
            self._reported.pop(event.key, None)
            self._shadow_checked.pop(event.key, None)
        if not self.status_writes.is_echo(event):
            # ADDED: newly bound here, its ShadowPod to make: ahead of the status updates of the
            # pods already running, which a burst queues by the hundred (issue 41: pick-up latency)
            self.queue.add(event.key, first=event.type == "ADDED")

    def open_scope(self, namespace: str, twin: str) -> dict[str, Watched]:
        foreign, origin = self.peering.foreign, {names.ORIGIN_LABEL: self.peering.home_cluster_id}
        return {
            "shadows": Informer(foreign, ShadowPodResource, namespace=twin, packed=True),
            "pods": Informer(foreign, Pod, namespace=twin, labels=origin, trim=without_spec, packed=True),
        }

    def requeue(self, scope: TwinScope) -> None:
        """The namespace's home pods, and what the twin holds: a ShadowPod or remote pod whose home pod
        went while this process was away (or before it followed the twin) has no home pod to bring
        its key, and would be left there."""
        self._requeue_namespace(scope.namespace)
        super().requeue(scope)

    # -- which namespaces are offloaded here ---------------------------------------------------
    def placement(self, namespace: str) -> tuple[Placement, str | None]:
        """Where the namespace stands in this cluster, and its twin's name while it is selected."""
        offloading = self.offloadings.store.get(f"{namespace}/{names.NAMESPACE_OFFLOADING_NAME}")
        if offloading is None:
            return Placement.WITHDRAWN, None
        deleting = bool(offloading.metadata.deletionTimestamp)
        return placement(offloading.get("status") or {}, self.peering.foreign_cluster_id, deleting=deleting)

    def not_offloaded_message(self, namespace: str) -> str:
        """Why a pod of `namespace` on this node cannot run here, with the command that fixes it."""
        offloading = self.offloadings.store.get(f"{namespace}/{names.NAMESPACE_OFFLOADING_NAME}")
        return not_offloaded_message(
            namespace,
            self.peering.foreign_cluster_id,
            offloaded=offloading is not None and not offloading.metadata.deletionTimestamp,
        )

    def twin_of(self, namespace: str) -> str | None:
        """The twin namespace in this foreign cluster, if the offloading there is Ready."""
        where, twin = self.placement(namespace)
        return twin if where is Placement.READY else None

    def _requeue_namespace(self, namespace: str) -> None:
        for key in self.pods.store:
            if key.startswith(f"{namespace}/"):
                self.queue.add(key)

    # -- reconcile -------------------------------------------------------------------------------
    async def reconcile(self, key: str) -> None:
        namespace, _, name = key.partition("/")
        foreign_id = self.peering.foreign_cluster_id
        pod = unpacked(self.pods.store.get(key))
        where, twin = self.placement(namespace)
        watch = self.scopes.get(namespace)
        if twin is None or watch is None or watch.twin != twin:
            if pod is None:
                return
            if pod.metadata.deletionTimestamp:
                if twin is None or not ever_ran(pod.to_dict().get("status") or {}):
                    await self._release(pod)  # nothing of it is left remotely, or ever will be
                # else a copy may run in a twin this process has not followed yet (its cluster
                # unreachable since the process started): released once that twin is followed and
                # the copy is gone, as a pod on any unreachable node stays Terminating
            elif where is Placement.WITHDRAWN:
                await self._withdrawn(pod, self.not_offloaded_message(namespace))
            else:
                await self._back_off(pod, f"namespace {namespace} is not offloaded to {foreign_id} yet")
            return
        if not watch.synced():
            return  # decided once the foreign side is known: its sync requeues the namespace
        shadow = unpacked(watch["shadows"].store.get(f"{twin}/{name}"))
        remote = unpacked(watch["pods"].store.get(f"{twin}/{name}"))
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
            if (pod.status.phase if pod.status else None) in TERMINAL_PHASES:
                return  # finished, or failed by a removal of its node (removal.py): never run again
            if where is Placement.READY:
                await self._create_shadow(pod, watch)
            elif not ever_ran(pod.to_dict().get("status") or {}):
                await self._back_off(pod, f"the twin namespace {twin} is not ready in {foreign_id}")
            return
        if where is Placement.READY and not shadow.metadata.deletionTimestamp:
            await self._update_shadow(pod, shadow, watch)
        if remote is not None:
            shadow_status = shadow.get("status") or {}
            await self._reflect_status(pod, remote, shadow_status)
            await self._move_if_unfit(key, pod, remote, twin, shadow)
        elif (shadow.get("status") or {}).get("reason") == EVICTED_REASON:
            message = (shadow.get("status") or {}).get("message") or "evicted"
            await self._withdrawn(pod, f"{self.peering.foreign_cluster_id} evicted it: {message}")
        else:
            await self._report_failure(pod, shadow)

    async def _create_shadow(self, pod: Any, scope: TwinScope) -> None:
        twin = scope.twin
        # a node pool's pods run only on its foreign nodes (its VirtualNode's offloadingPatch.nodeSelector)
        pool = self.peering.spec_of(pod.spec.nodeName)
        if pool is None:  # its VirtualNode gone: which foreign nodes it stands for is unknown
            await self._back_off(pod, f"the VirtualNode {pod.spec.nodeName} is gone")
            return
        try:
            body = shadow_pod(
                pod.to_dict(),
                twin=twin,
                home_cluster_id=self.peering.home_cluster_id,
                foreign_cluster_id=self.peering.foreign_cluster_id,
                node=self.peering.node_spec(),
                node_selector=pool.offloading_patch.node_selector,
            )
        except TranslationError as err:
            await self._back_off(pod, str(err), warn=True)
            return
        shadow_key = f"{twin}/{pod.metadata.name}"
        try:
            created = await self.peering.foreign.create(ShadowPodResource.from_dict(body))
            scope.own_writes.record(shadow_key, created)
        except ApiError as err:
            if err.status.code in REFUSED_CODES:  # the foreign cluster's admission (docs/security.md)
                await self._refused(pod, err.status.message or str(err))
                raise  # tried again with backoff: the foreign side's floor or policy may change
            if err.status.code != 409:
                raise
            # a pod the foreign scheduler cannot place gets no later event: the echo must bring it back
            if scope.own_writes.create_conflicted(shadow_key, scope["shadows"].store):
                self.queue.add(f"{pod.metadata.namespace}/{pod.metadata.name}")

    async def _update_shadow(self, pod: Any, shadow: Any, scope: TwinScope) -> None:
        """Carry what changed on the live home pod to the ShadowPod (the agent updates the remote pod)."""
        key = f"{pod.metadata.namespace}/{pod.metadata.name}"
        versions = (pod.metadata.resourceVersion, shadow.metadata.resourceVersion)
        if self._shadow_checked.get(key) == versions:
            return  # neither changed since the last comparison: the remote pod's own events bring most keys back
        shadow_key = f"{shadow.metadata.namespace}/{shadow.metadata.name}"
        if versions[1] is not None and scope.write_in_flight(shadow_key, versions[1]) == versions[1]:
            # the store still shows the ShadowPod our last patch was made from: compared with what the
            # patch made once its echo is in (any other version, even with the record left behind by an
            # echo that came before the patch's answer, is compared now)
            scope.own_writes.await_echo(shadow_key)
            return
        home_pod = pod.to_dict()
        ids = {"home_cluster_id": self.peering.home_cluster_id, "foreign_cluster_id": self.peering.foreign_cluster_id}
        current = shadow.to_dict()
        current_meta = current.get("metadata") or {}
        desired_meta = remote_pod_metadata(home_pod, **ids, **skip_lists(self.peering.node_spec()))
        have = {
            "metadata": {k: current_meta.get(k) or {} for k in ("labels", "annotations")},
            "spec": {"pod": pod_spec_of(current)},
        }
        want = {"metadata": desired_meta, "spec": {"pod": live_pod_spec(have["spec"]["pod"], home_pod)}}
        patch = merge_patch(have, want)
        if not patch:
            self._shadow_checked[key] = versions
            return
        with unless_gone():
            patched = await self.peering.foreign.patch(
                ShadowPodResource,
                shadow.metadata.name,
                patch,
                namespace=shadow.metadata.namespace,
                patch_type=PatchType.MERGE,
            )
            scope.own_writes.record(shadow_key, patched, tag=versions[1] or "")  # tag: the version patched
            self._shadow_checked[key] = (versions[0], patched.metadata.resourceVersion)

    async def _report_failure(self, pod: Any, shadow: Any) -> None:
        """The agent could not create the remote pod: tell it on the home pod, once per message."""
        status = shadow.get("status") or {}
        key = f"{pod.metadata.namespace}/{pod.metadata.name}"
        message = status.get("message")
        if status.get("reason") != CREATE_FAILED_REASON or not message or self._reported.get(key) == message:
            return
        await self._refused(pod, message)

    async def _refused(self, pod: Any, message: str) -> None:
        """The foreign cluster refused the pod (its API server, its admission policy, or its agent
        holding the home's grant): Pending with reason FailedOffloading and a Warning event, both
        quoting the foreign side's reason, once per message."""
        key = f"{pod.metadata.namespace}/{pod.metadata.name}"
        if self._reported.get(key) == message:
            return
        text = f"the foreign cluster {self.peering.foreign_cluster_id} refused the pod: {message}"
        status = pod.to_dict().get("status") or {}
        if status.get("phase", "Pending") == "Pending":
            await self._patch_status(pod, {"phase": "Pending", "reason": FAILED_EVENT_REASON, "message": text})
        await self._warn(pod, FAILED_EVENT_REASON, text)
        self._reported[key] = message

    async def _warn(self, pod: Any, reason: str, message: str) -> None:
        """The caller decides when it is news (once per message, as the status changes)."""
        body = {"apiVersion": "v1", "kind": "Pod", **pod.to_dict()}
        await self.peering.warnings.warn(body, reason, message, once=False)

    async def _reflect_status(self, pod: Any, remote: Any, shadow_status: dict[str, Any]) -> None:
        remote_status = remote.to_dict().get("status") or {}
        current = pod.to_dict().get("status") or {}
        if current.get("phase") in TERMINAL_PHASES or nothing_to_tell(remote_status, current):
            return  # a finished pod's status is final, as with a kubelet
        desired = home_pod_status(
            remote_status,
            home_status=current,
            pod_cidr_mapping=self.pod_cidr_mapping,
            host_ip=self.node_address,
            recreations=int(shadow_status.get("recreations") or 0),
            previous_restarts=shadow_status.get("previousRestarts"),
        )
        await self._replace_status(pod, current, desired)

    async def _move_if_unfit(self, key: str, pod: Any, remote: Any, twin: str, shadow: Any) -> None:
        """The namespace's policy on, and no foreign node fit the pod for that long: move it."""
        offloading = self.offloadings.store.get(f"{pod.metadata.namespace}/{names.NAMESPACE_OFFLOADING_NAME}")
        annotations = offloading.metadata.annotations if offloading is not None else None
        after = move_unfit_after(annotations, self.stack_unfit_policy())
        if after is None:
            return  # the common case, decided before any pod is decoded
        status = pod.to_dict().get("status") or {}
        unfit = unschedulable_since(remote.to_dict().get("status") or {})
        if unfit is None or status.get("phase") in TERMINAL_PHASES:
            return
        since, why = unfit
        waited = (datetime.datetime.now(datetime.UTC) - since).total_seconds()
        if waited < after:
            self.queue.add_after(key, after - waited)  # asked again once the time is up
            return
        node = pod.spec.nodeName
        if fits(fit_requirements(pod.to_dict()), self.peering.node_labels(node)):
            # the node's largest-pod labels say it fits (not yet updated, or refused for another
            # reason: taints, ports there): a replacement could come back here, so no move, which
            # could loop; asked again in a while, the labels may have caught up
            self.queue.add_after(key, after)
            return
        message = (
            f"no node of {self.peering.foreign_cluster_id} could run it for {after}s ({why}); moved off "
            f"{node} ({names.MOVE_UNFIT_PODS_AFTER_ANNOTATION} of its namespace's offloading)"
        )
        await self._warn(pod, UNFIT_REASON, message)
        log.info("pod %s moved: %s", key, message)
        if controlled(pod):
            await self._evict(pod)  # the webhook keeps its replacement off virtual nodes too small
            return
        await self._replace_status(pod, status, aborted_status(status, message, now(), reason=UNFIT_REASON))
        await self._delete_remote(twin, pod.metadata.name, shadow, remote, grace=0)

    async def _withdrawn(self, pod: Any, message: str) -> None:
        """The twin went away (unoffload, deselection): end the pod as a drained node's would end."""
        status = pod.to_dict().get("status") or {}
        if status.get("phase") in TERMINAL_PHASES:
            if controlled(pod) and status.get("reason") == ABORTED_REASON:
                await self._evict(pod)  # the status write went through, the delete did not
            return
        if not ever_ran(status):
            await self._back_off(pod, message, warn=True)
            return
        await self._replace_status(pod, status, aborted_status(status, message, now()))
        log.info("pod %s/%s aborted: %s", pod.metadata.namespace, pod.metadata.name, message)
        if controlled(pod):
            await self._evict(pod)  # its controller makes a new one where the namespace now allows

    async def _evict(self, pod: Any) -> None:
        with unless_gone():
            await self.peering.home.delete(Pod, pod.metadata.name, namespace=pod.metadata.namespace)

    async def _back_off(self, pod: Any, message: str, *, warn: bool = False) -> None:
        """Pending with reason OffloadingBackOff (docs/reflection.md); `warn`: the user has to act, so a Warning
        event on the pod says it too (once per message, as the status changes)."""
        status = pod.to_dict().get("status") or {}
        if status.get("phase", "Pending") != "Pending":
            return  # a phase never goes backwards
        if status.get("reason") == BACKOFF_REASON and status.get("message") == message:
            return
        await self._patch_status(pod, {"phase": "Pending", "reason": BACKOFF_REASON, "message": message})
        if warn:
            await self._warn(pod, BACKOFF_REASON, message)

    async def _replace_status(self, pod: Any, current: dict[str, Any], desired: dict[str, Any]) -> None:
        """Make the home pod's status exactly `desired`: a merge patch that also nulls what must go."""
        patch = merge_patch(current, desired)
        if patch:
            await self._patch_status(pod, patch)

    async def _patch_status(self, pod: Any, status: dict[str, Any]) -> None:
        with unless_gone():
            patched = await self.peering.home.patch(
                Pod.Status,
                pod.metadata.name,
                {"status": status},
                namespace=pod.metadata.namespace,
                patch_type=PatchType.MERGE,
            )
            self.status_writes.record(f"{pod.metadata.namespace}/{pod.metadata.name}", patched)

    async def _delete_remote(self, twin: str, name: str, shadow: Any, remote: Any, grace: int | None) -> None:
        """Delete what is there and not already going: asking again would only load the API server."""
        # The ShadowPod first (else the agent would bring the pod back), orphaning its pod: the
        # garbage collector would delete the pod with the pod's own grace period, we pass the home
        # pod's. Were we to stop in between, the next reconcile finds the orphan and deletes it.
        if shadow is not None and not shadow.metadata.deletionTimestamp:
            with unless_gone():
                await self.peering.foreign.delete(ShadowPodResource, name, namespace=twin, cascade=CascadeType.ORPHAN)
        if remote is not None and not remote.metadata.deletionTimestamp:
            with unless_gone():
                await self.peering.foreign.delete(Pod, name, namespace=twin, grace_period=grace)

    async def _release(self, pod: Any) -> None:
        """The remote side is gone: remove the home pod for good, as a kubelet does."""
        with unless_gone():
            await self.peering.home.delete(Pod, pod.metadata.name, namespace=pod.metadata.namespace, grace_period=0)
