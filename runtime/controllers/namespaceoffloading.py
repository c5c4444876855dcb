"""Home side of namespace offloading (docs/offloading.md): NamespaceOffloading -> twin namespaces.

For each NamespaceOffloading the controller evaluates the cluster selector against the labels
of the virtual Nodes at home (docs/offloading.md: the labels the foreign cluster suggested, which the Node
starts with, and any an administrator added; a cluster whose Node does not exist yet is judged by
its VirtualNode's declared labels, as the plan is), and again whenever a Node's labels change;
the pod webhook's constraints use the same Node labels, so both agree. It asks each selected
foreign cluster for the twin namespace through the NamespaceMap in its tenant namespace (the
home identity may not create namespaces there itself), and reports per-cluster conditions, a
phase and observedGeneration. Deleting the NamespaceOffloading (unoffload) withdraws every
request, waits until the foreign clusters report the twins gone, then releases its finalizer.

What a foreign cluster reports comes through a watch of that NamespaceMap (`MapWatches`): a twin accepted,
refused or gone requeues its namespace's offloading at once. A twin on its way, or on its way out, is
also asked about again every `recheck_seconds`, in case a change is missed while a watch starts again.
"""

from __future__ import annotations

import asyncio
import base64
import logging
from collections.abc import Callable, Iterable
from datetime import UTC, datetime
from typing import Any

import yaml
from lightkube import ApiError, AsyncClient, KubeConfig
from lightkube.resources.core_v1 import Namespace, Node, Secret
from lightkube.types import PatchType

from runtime.api import NamespaceOffloadingSpec, OffloadingPhase, names
from runtime.api.namespacemap import MappingPhase
from runtime.api.plan import selected_clusters, selection_labels, twin_namespace_name
from runtime.api.resources import NamespaceMapResource, NamespaceOffloadingResource, VirtualNodeResource
from runtime.kube import Event, Informer, WorkQueue, unless_gone
from runtime.kube.client import REQUEST_DEADLINE_SECONDS, async_client
from runtime.kube.controlling import run_controller

log = logging.getLogger(__name__)

FIELD_MANAGER = "liqo-controller-manager"


def now() -> str:
    return datetime.now(UTC).strftime("%Y-%m-%dT%H:%M:%SZ")


def phase_of(selected: list[str], ready: set[str], failed: set[str]) -> OffloadingPhase:
    if not selected:
        return OffloadingPhase.NO_CLUSTER_SELECTED
    if failed and len(failed) == len(selected):
        return OffloadingPhase.ALL_FAILED
    if failed:
        return OffloadingPhase.SOME_FAILED
    if ready == set(selected):
        return OffloadingPhase.READY
    return OffloadingPhase.IN_PROGRESS


class ForeignClusters:
    """Clients for the foreign clusters, built from the credentials Secrets the stack created, which a
    watch of the liqo namespace's Secrets keeps at hand (`credentials`): a reconcile reads no Secret, and
    a changed one (a reissued token) is seen as it is written."""

    def __init__(self, home: AsyncClient, retire_after: float = REQUEST_DEADLINE_SECONDS) -> None:
        """`retire_after`: how long a client for credentials that changed lives on, for the reconciles
        still using it (a request's whole deadline), before it is closed."""
        self.retire_after = retire_after
        self.credentials = Informer(home, Secret, namespace=names.LIQO_NAMESPACE, trim=_kubeconfig_only)
        self._clients: dict[str, tuple[str, AsyncClient]] = {}
        self._retiring: dict[asyncio.Task[None], AsyncClient] = {}  # closed when the task ends, or at close()

    def built_from(self, cluster_id: str, secret: Any) -> bool:
        """The client for that cluster was built from this Secret's kubeconfig."""
        cached = self._clients.get(cluster_id)
        try:
            return cached is not None and cached[0] == _kubeconfig_text(secret)
        except (KeyError, ValueError):  # no kubeconfig in it (the reconcile says so)
            return False

    async def client(self, cluster_id: str, secret_name: str) -> AsyncClient:
        secret = self.credentials.store.get(f"{names.LIQO_NAMESPACE}/{secret_name}")
        if secret is None:
            raise LookupError(f"no credentials: Secret {names.LIQO_NAMESPACE}/{secret_name} not found")
        kubeconfig = _kubeconfig_text(secret)
        cached = self._clients.get(cluster_id)
        if cached and cached[0] == kubeconfig:
            return cached[1]
        client = async_client(
            KubeConfig.from_dict(yaml.safe_load(kubeconfig)), field_manager=FIELD_MANAGER, bounded=True
        )
        self._clients[cluster_id] = (kubeconfig, client)
        if cached:  # new credentials (a rotated token): the old client's connections are closed once the
            # reconciles using it are done, not left to the garbage collector ("Unclosed client session")
            self._retiring[asyncio.create_task(self._close_later())] = cached[1]
        return client

    async def _close_later(self) -> None:
        await asyncio.sleep(self.retire_after)
        task = asyncio.current_task()
        assert task is not None
        await self._retiring.pop(task).close()

    async def close(self) -> None:
        retiring, self._retiring = self._retiring, {}
        for task in retiring:
            task.cancel()
        await asyncio.gather(*retiring, return_exceptions=True)
        for client in [*retiring.values(), *(client for _, client in self._clients.values())]:
            await client.close()


def _kubeconfig_text(secret: Any) -> str:
    return base64.b64decode((secret.data or {})["kubeconfig"]).decode()


def _kubeconfig_only(secret: Any) -> Any:
    """A Secret as the credentials store keeps it: other Secrets of the liqo namespace (certificates,
    tokens) take no memory here."""
    data = secret.data or {}
    secret.data = {"kubeconfig": data["kubeconfig"]} if "kubeconfig" in data else {}
    return secret


def reported_entries(namespace_map: Any | None) -> dict[str, Any]:
    """What a foreign cluster reports in a NamespaceMap's status: home namespace -> its twin's entry."""
    if namespace_map is None:
        return {}
    return dict(((namespace_map.get("status") or {}).get("currentMapping")) or {})


def changed_namespaces(before: dict[str, Any], after: dict[str, Any]) -> set[str]:
    """The home namespaces whose reported entry appeared, changed or went."""
    return {namespace for namespace in before.keys() | after.keys() if before.get(namespace) != after.get(namespace)}


class MapWatches:
    """A watch, in each foreign cluster, of the NamespaceMap this home writes there. What the foreign side
    reports for a namespace (its twin accepted, refused, being deleted, gone) calls `on_change` with that
    namespace. Only the status is compared: the requests in the spec are this controller's own writes."""

    def __init__(self, home_cluster_id: str, on_change: Callable[[str], None]) -> None:
        self.tenant = names.tenant_namespace(home_cluster_id)
        self.map_name = names.namespace_map_name(home_cluster_id)
        self.on_change = on_change
        self._watches: dict[str, tuple[AsyncClient, asyncio.Task[None]]] = {}
        self._stopping: set[asyncio.Task[None]] = set()
        # by cluster, as last seen; kept while a watch starts again (new credentials), so that its first
        # list reports only what changed meanwhile
        self._reported: dict[str, dict[str, Any]] = {}

    def follow(self, cluster_id: str, client: AsyncClient) -> None:
        """Watch that cluster's map through `client`; again through a new client (changed credentials)."""
        watching = self._watches.get(cluster_id)
        if watching is not None and watching[0] is client:
            return
        if watching is not None:
            self._stop(watching[1])
        informer = Informer(
            client,
            NamespaceMapResource,
            namespace=self.tenant,
            fields={"metadata.name": self.map_name},
            cluster_id=cluster_id,
        )
        informer.add_handler(lambda event: self.observe(cluster_id, event))
        task = asyncio.create_task(informer.run(), name=f"namespacemap-watch-{cluster_id}")
        self._watches[cluster_id] = (client, task)

    def client_of(self, cluster_id: str) -> AsyncClient | None:
        """The client that cluster's map is watched through, if it is."""
        watching = self._watches.get(cluster_id)
        return watching[0] if watching is not None else None

    def pause(self, cluster_id: str) -> None:
        """Stop watching that cluster's map until the next `follow` (its credentials changed or went);
        what it last reported is kept, so that the next watch's first list requeues only what changed."""
        watching = self._watches.pop(cluster_id, None)
        if watching is not None:
            self._stop(watching[1])

    def keep_only(self, cluster_ids: Iterable[str]) -> None:
        """Stop watching the clusters no longer peered."""
        for cluster_id in set(self._watches) - set(cluster_ids):
            self._stop(self._watches.pop(cluster_id)[1])
            self._reported.pop(cluster_id, None)

    def observe(self, cluster_id: str, event: Event) -> None:
        after = {} if event.type == "DELETED" else reported_entries(event.obj)
        before = self._reported.get(cluster_id, {})
        self._reported[cluster_id] = after
        for namespace in sorted(changed_namespaces(before, after)):
            self.on_change(namespace)

    def _stop(self, task: asyncio.Task[None]) -> None:
        task.cancel()
        self._stopping.add(task)
        task.add_done_callback(self._stopping.discard)

    async def close(self) -> None:
        for _, task in self._watches.values():
            self._stop(task)
        self._watches.clear()
        await asyncio.gather(*self._stopping, return_exceptions=True)


class NamespaceOffloadingController:
    def __init__(
        self,
        home: AsyncClient,
        home_cluster_id: str,
        *,
        foreign_clients: Callable[[AsyncClient], ForeignClusters] = ForeignClusters,
        workers: int = 8,
        recheck_seconds: float = 10.0,
        unreachable_retry_seconds: float = 5.0,
        refused_retry_seconds: float = 30.0,
    ) -> None:
        self.home = home
        self.home_cluster_id = home_cluster_id
        self.foreign = foreign_clients(home)
        self.maps = MapWatches(home_cluster_id, self._on_reported)
        # a twin on its way (or out) is asked about again this often, should the watch miss a change
        self.recheck_seconds = recheck_seconds
        self.unreachable_retry_seconds = unreachable_retry_seconds
        # a twin a foreign cluster refused is asked again now and then: it may allow the name later
        self.refused_retry_seconds = refused_retry_seconds
        self.offloadings = Informer(home, NamespaceOffloadingResource)
        self.virtual_nodes = Informer(home, VirtualNodeResource, namespace=names.LIQO_NAMESPACE)
        self.nodes = Informer(home, Node, labels={names.TYPE_LABEL: names.VIRTUAL_NODE_TYPE})
        self.queue = WorkQueue(self.reconcile, workers=workers, name="namespaceoffloading")
        self.offloadings.add_handler(self._on_offloading)
        self.virtual_nodes.add_handler(self._on_virtual_node)
        self.nodes.add_handler(self._on_node)
        self.foreign.credentials.add_handler(self._on_credentials)
        self._node_labels: dict[str, dict[str, str]] = {}  # by Node name: what selection last saw
        self._acted_on: dict[str, Any] = {}  # by offloading: what of it a reconcile acts on, as last seen

    def _on_offloading(self, event: Event) -> None:
        """Reconciled when what it acts on changed: not for its own status write coming back, whose
        reconcile would only read every foreign cluster again (the status is this controller's alone)."""
        if event.type == "DELETED":
            self._acted_on.pop(event.key, None)
        else:
            acted_on = _acted_on(event.obj)
            if event.type == "MODIFIED" and self._acted_on.get(event.key) == acted_on:
                return
            self._acted_on[event.key] = acted_on
        self.queue.add(event.key)

    def _on_reported(self, namespace: str) -> None:
        key = f"{namespace}/{names.NAMESPACE_OFFLOADING_NAME}"
        if key in self.offloadings.store:
            self.queue.add(key)

    def _on_virtual_node(self, event: Event) -> None:
        self.maps.keep_only(self._clusters())  # a peering removed: its map no longer watched
        self._requeue_all(event)

    def _on_credentials(self, event: Event) -> None:
        """A peering's credentials Secret written (a reissued token) or deleted: the watch of what that
        cluster reports stops, and every offloading is reconciled, with the new client, which watches
        again (none left: nothing to watch for)."""
        name = event.key.partition("/")[2]
        changed = [
            cluster_id
            for cluster_id, info in self._clusters().items()
            if info["secret"] == name
            and (event.type == "DELETED" or not self.foreign.built_from(cluster_id, event.obj))
        ]
        for cluster_id in changed:
            self.maps.pause(cluster_id)
        if changed:
            self._requeue_all(event)

    def _requeue_all(self, _: Event) -> None:
        for key in self.offloadings.store:
            self.queue.add(key)

    def _on_node(self, event: Event) -> None:
        """Only a change of labels can change a selection: status and heartbeat updates are ignored."""
        labels = dict(event.obj.metadata.labels or {}) if event.type != "DELETED" else None
        previous = self._node_labels.pop(event.key, None)
        if labels is not None:
            self._node_labels[event.key] = labels
        if labels != previous:
            self._requeue_all(event)

    async def run(self) -> None:
        try:
            await run_controller(
                [self.offloadings, self.virtual_nodes, self.nodes, self.foreign.credentials], self.queue
            )
        finally:
            await self.maps.close()
            await self.foreign.close()

    # -- reconcile -------------------------------------------------------------------------
    def _clusters(self) -> dict[str, dict[str, Any]]:
        """Virtual nodes by foreign cluster id: the labels selectors see, and the credentials Secret."""
        node_labels = {
            labels[names.REMOTE_CLUSTER_ID_LABEL]: labels
            for labels in self._node_labels.values()
            if names.REMOTE_CLUSTER_ID_LABEL in labels
        }
        stored = list(self.virtual_nodes.store.values())
        specs = [vn.get("spec") or {} for vn in stored]
        labels = selection_labels({spec["clusterID"]: spec.get("labels") or {} for spec in specs}, node_labels)
        return {
            spec["clusterID"]: {
                "labels": labels[spec["clusterID"]],
                "secret": (spec.get("kubeconfigSecretRef") or {}).get(
                    "name", names.credentials_secret_name(spec["clusterID"])
                ),
                # its peering ends and its virtual kubelet drained and deleted the Node: its twins go
                # (virtualkubelet/removal.py), not before, so its pods end as a drained node's do
                "leaving": bool(vn.metadata.deletionTimestamp) and spec["clusterID"] not in node_labels,
            }
            for vn, spec in zip(stored, specs, strict=True)
        }

    async def reconcile(self, key: str) -> None:
        namespace, _, name = key.partition("/")
        obj = self.offloadings.store.get(key)
        if obj is None or name != names.NAMESPACE_OFFLOADING_NAME:
            return
        meta = obj.metadata
        spec = NamespaceOffloadingSpec.model_validate(obj.get("spec") or {})
        clusters = self._clusters()
        self.maps.keep_only(clusters)
        # The twin first recorded stays: the mapping is immutable (docs/offloading.md), and a change that slipped
        # past the webhook (down at the time) must not move the twins and lose what they hold.
        twin = (obj.get("status") or {}).get("remoteNamespaceName") or twin_namespace_name(
            namespace, spec.namespace_mapping_strategy, self.home_cluster_id, spec.remote_namespace_name
        )
        terminating = meta.deletionTimestamp is not None
        if terminating:
            selected: list[str] = []
        else:
            await self._ensure_finalizer(obj)
            await self._label_namespace(namespace, enabled=True)
            selectable = {c: v["labels"] for c, v in clusters.items() if not v["leaving"]}
            selected = selected_clusters(spec.cluster_selector, selectable)

        conditions: dict[str, list[dict[str, Any]]] = {}
        ready, failed, remaining, unreachable = set(), set(), set(), set()
        # Each foreign cluster on its own: one that can't be reached fails its own conditions, and
        # is asked again later, while the others (and the status) go on (docs/offloading.md: per cluster).
        for cluster_id, info in clusters.items():
            wanted = cluster_id in selected
            try:
                mapping = await self._request_twin(cluster_id, info["secret"], namespace, twin if wanted else None)
            except Exception as err:  # any failure to talk to that cluster: connection, TLS, 5xx, RBAC
                log.warning("%s: foreign cluster %s: %s", key, cluster_id, err)
                unreachable.add(cluster_id)
                message = f"{cluster_id} could not be reached ({type(err).__name__}: {err}); retrying"
                if wanted:
                    failed.add(cluster_id)
                    conditions[cluster_id] = [
                        _condition("OffloadingRequired", "True", "ClusterSelected", f"twin namespace {twin}"),
                        _condition("Ready", "False", "ClusterUnreachable", message),
                    ]
                else:
                    remaining.add(cluster_id)  # a twin may still be there: not withdrawn until it says so
                    conditions[cluster_id] = [_condition("OffloadingRequired", "False", "NotSelected", message)]
                continue
            phase = (mapping or {}).get("phase")
            if mapping is not None:
                remaining.add(cluster_id)
            if not wanted:
                why = (
                    f"withdrawing the twin {mapping.get('remoteNamespace') or twin} "
                    f"({'being deleted' if phase == MappingPhase.TERMINATING.value else 'requested to go'})"
                    if mapping is not None
                    else (
                        "no twin here"
                        if terminating
                        else "its virtual node was removed"
                        if info["leaving"]
                        else "the cluster selector does not match it"
                    )
                )
                conditions[cluster_id] = [_condition("OffloadingRequired", "False", "NotSelected", why)]
                continue
            required = _condition("OffloadingRequired", "True", "ClusterSelected", f"twin namespace {twin}")
            if phase == MappingPhase.ACCEPTED.value:
                ready.add(cluster_id)
                state = _condition("Ready", "True", "NamespaceReady", f"{twin} ready in {cluster_id}")
            elif phase == MappingPhase.CREATION_FAILED.value:
                failed.add(cluster_id)
                state = _condition("Ready", "False", "CreationFailed", (mapping or {}).get("message", ""))
            else:
                state = _condition("Ready", "Unknown", "Pending", "waiting for the foreign cluster")
            conditions[cluster_id] = [required, state]

        phase = OffloadingPhase.TERMINATING if terminating else phase_of(selected, ready, failed)
        await self._write_status(namespace, obj, phase, twin, conditions)
        if unreachable:
            self.queue.add_after(key, self.unreachable_retry_seconds)
        if terminating:
            if remaining:
                if not unreachable:
                    self.queue.add_after(key, self.recheck_seconds)  # twins still being deleted
                return
            await self._label_namespace(namespace, enabled=False)
            await self._release_finalizer(obj)
        elif not unreachable and (phase is OffloadingPhase.IN_PROGRESS or len(ready) + len(failed) < len(selected)):
            self.queue.add_after(key, self.recheck_seconds)
        elif failed and not unreachable:
            self.queue.add_after(key, self.refused_retry_seconds)

    async def _request_twin(
        self, cluster_id: str, secret: str, namespace: str, twin: str | None
    ) -> dict[str, Any] | None:
        """Set (or withdraw, with None) the request for `namespace` and return what the foreign side reports."""
        client = await self.foreign.client(cluster_id, secret)
        self.maps.follow(cluster_id, client)
        tenant = names.tenant_namespace(self.home_cluster_id)
        map_name = names.namespace_map_name(self.home_cluster_id)
        try:
            current = await client.get(NamespaceMapResource, map_name, namespace=tenant)
        except ApiError as err:
            if err.status.code != 404:
                raise
            current = None
        desired = dict(((current or {}).get("spec") or {}).get("desiredMapping") or {})
        if twin is not None and desired.get(namespace) != twin:
            try:
                await self._write_map(client, tenant, map_name, namespace, twin, exists=current is not None)
            except ApiError as err:
                if err.status.code != 422:
                    raise
                # refused by that cluster's admission (its NamespaceMap policy: the name is not this home's
                # to take there): that mapping's failure, with the cluster's reason
                message = f"{cluster_id} refused the request for twin namespace {twin}: {err.status.message}"
                return {"remoteNamespace": twin, "phase": MappingPhase.CREATION_FAILED.value, "message": message}
        elif twin is None and namespace in desired:
            await self._write_map(client, tenant, map_name, namespace, None, exists=True)
        found: dict[str, Any] | None = reported_entries(current).get(namespace)
        return found

    async def _write_map(
        self, client: AsyncClient, tenant: str, name: str, namespace: str, twin: str | None, *, exists: bool
    ) -> None:
        """Set (or, with None, remove) one namespace's entry and no other: a merge patch of that key, so
        workers reconciling other namespaces at the same time never undo each other's entries (an apply
        of the whole map, or of one key by the same field manager, would)."""
        change = {"spec": {"desiredMapping": {namespace: twin}}}
        if exists:
            try:
                await self._patch_map(client, tenant, name, change)
                return
            except ApiError as err:
                if err.status.code != 404:
                    raise
        if twin is None:
            return  # no map: nothing to withdraw
        body = NamespaceMapResource.from_dict(
            {
                "apiVersion": names.API_VERSION,
                "kind": "NamespaceMap",
                "metadata": {"name": name, "namespace": tenant},
                "spec": {"desiredMapping": {namespace: twin}},
            }
        )
        try:
            await client.create(body, field_manager=FIELD_MANAGER)
        except ApiError as err:
            if err.status.code != 409:
                raise
            await self._patch_map(client, tenant, name, change)  # another worker created it meanwhile

    @staticmethod
    async def _patch_map(client: AsyncClient, tenant: str, name: str, patch: dict[str, Any]) -> None:
        await client.patch(
            NamespaceMapResource, name, patch, namespace=tenant, patch_type=PatchType.MERGE, field_manager=FIELD_MANAGER
        )

    async def _ensure_finalizer(self, obj: Any) -> None:
        finalizers = list(obj.metadata.finalizers or [])
        if names.NAMESPACE_OFFLOADING_FINALIZER not in finalizers:
            patch = {"metadata": {"finalizers": [*finalizers, names.NAMESPACE_OFFLOADING_FINALIZER]}}
            await self.home.patch(
                NamespaceOffloadingResource,
                obj.metadata.name,
                patch,
                namespace=obj.metadata.namespace,
                patch_type=PatchType.MERGE,
            )

    async def _release_finalizer(self, obj: Any) -> None:
        finalizers = [f for f in obj.metadata.finalizers or [] if f != names.NAMESPACE_OFFLOADING_FINALIZER]
        with unless_gone():
            await self.home.patch(
                NamespaceOffloadingResource,
                obj.metadata.name,
                {"metadata": {"finalizers": finalizers or None}},
                namespace=obj.metadata.namespace,
                patch_type=PatchType.MERGE,
            )

    async def _label_namespace(self, namespace: str, *, enabled: bool) -> None:
        value = "true" if enabled else None
        try:
            ns = await self.home.get(Namespace, namespace)
        except ApiError as err:
            if err.status.code == 404:
                return
            raise
        labels = (ns.metadata.labels if ns.metadata else None) or {}
        if labels.get(names.SCHEDULING_ENABLED_LABEL) != value:
            patch = {"metadata": {"labels": {names.SCHEDULING_ENABLED_LABEL: value}}}
            await self.home.patch(Namespace, namespace, patch, patch_type=PatchType.MERGE)

    async def _write_status(
        self, namespace: str, obj: Any, phase: OffloadingPhase, twin: str, conditions: dict[str, list[dict[str, Any]]]
    ) -> None:
        old = obj.get("status") or {}
        status = {
            "observedGeneration": obj.metadata.generation,
            "offloadingPhase": phase.value,
            "remoteNamespaceName": twin,
            "remoteNamespacesConditions": _keep_transition_times(
                old.get("remoteNamespacesConditions") or {}, conditions
            ),
        }
        if {k: old.get(k) for k in status} == status:
            return  # nothing changed: no write (an idle controller writes nothing)
        patch = {"status": {**status, "remoteNamespacesConditions": dict(status["remoteNamespacesConditions"])}}
        for gone in set(old.get("remoteNamespacesConditions") or {}) - set(conditions):
            patch["status"]["remoteNamespacesConditions"][gone] = None  # a merge patch removes keys set to null
        await self.home.patch(
            NamespaceOffloadingResource.Status,
            obj.metadata.name,
            patch,
            namespace=namespace,
            patch_type=PatchType.MERGE,
        )


def _acted_on(offloading: Any) -> tuple[Any, ...]:
    """What of a NamespaceOffloading its reconcile reads, but for the twin name it recorded itself."""
    meta = offloading.metadata
    return (offloading.get("spec"), meta.deletionTimestamp, tuple(meta.finalizers or ()))


def _condition(kind: str, status: str, reason: str, message: str) -> dict[str, Any]:
    return {"type": kind, "status": status, "reason": reason, "message": message, "lastTransitionTime": now()}


def _keep_transition_times(
    old: dict[str, list[dict[str, Any]]], new: dict[str, list[dict[str, Any]]]
) -> dict[str, list[dict[str, Any]]]:
    """A condition keeps its lastTransitionTime while its status stays the same."""
    merged = {}
    for cluster_id, conditions in new.items():
        previous = {c["type"]: c for c in old.get(cluster_id, [])}
        merged[cluster_id] = [
            {**c, "lastTransitionTime": previous[c["type"]]["lastTransitionTime"]}
            if c["type"] in previous
            and {k: previous[c["type"]].get(k) for k in ("status", "reason", "message")}
            == {k: c[k] for k in ("status", "reason", "message")}
            else c
            for c in conditions
        ]
    return merged
