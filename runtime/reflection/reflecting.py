"""The generic reflector: one per kind and foreign cluster, home objects -> copies in the twins.

Per offloaded namespace it watches the kind at home and in the twin namespace (all objects there,
so a conflicting foreign object is seen), keyed by home namespace/name in one work queue. A
reconcile decides from both synced stores only, so a restart rebuilds its state and deletes or
rewrites nothing still wanted:
- wanted (exists at home, reflectable, allowed by the policy): apply the forged copy with
  server-side apply (one field manager per kind) unless the copy is already up to date;
- not wanted: delete the copy, if it is ours;
- a foreign object of that name that is not ours (no ownership labels) is never modified or
  deleted: the home object gets a Warning event naming the cluster.
Home is the truth: a copy edited or deleted by hand is restored by the next reconcile its event
triggers. A namespace no longer offloaded here is simply no longer watched: the foreign agent
deletes its twin with everything in it.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Callable, Mapping
from datetime import UTC, datetime
from typing import Any

from lightkube import ApiError, AsyncClient
from lightkube.resources.core_v1 import Event as CoreEvent
from lightkube.types import PatchType
from prometheus_client import CollectorRegistry, Counter, Gauge

from runtime.kube import Event, Informer, OwnWrites, WorkQueue, call_when_synced, unless_gone
from runtime.kube.serving import EngineMetrics
from runtime.reflection.forging import (
    APPLIED_HASH_ANNOTATION,
    ReflectionSettings,
    has_own_policy,
    is_owned,
    policy_allows,
    reflected_object,
    up_to_date,
)
from runtime.reflection.kinds import ReflectedKind

log = logging.getLogger(__name__)

SettingsOf = Callable[[str], ReflectionSettings]
HomeLookup = Callable[[str, str, str], dict[str, Any] | None]  # kind name, namespace, name -> home object


class ReflectionMetrics:
    """Per cluster and kind: the copies reflection holds there, its writes and its failed reconciles
    (queue depth and reconcile durations come with every work queue, as `reflection-<kind>`)."""

    def __init__(self, registry: CollectorRegistry) -> None:
        labels = ["cluster", "kind"]
        self.reflected = Gauge(
            "liqo_reflected_objects", "copies in the foreign cluster that reflection owns", labels, registry=registry
        )
        self.writes = Counter(
            "liqo_reflection_writes_total",
            "applies and deletes sent to the foreign cluster",
            [*labels, "verb"],
            registry=registry,
        )
        self.errors = Counter("liqo_reflection_errors_total", "reconciles that failed", labels, registry=registry)


class HomeEvents:
    """Warning events on home objects, each (object, reason, message) once per process: a conflict
    that lasts is reported, not repeated on every reconcile."""

    def __init__(self, home: AsyncClient, component: str) -> None:
        self.home = home
        self.component = component
        self._sent: set[tuple[str, str, str]] = set()

    async def warn(self, obj: Mapping[str, Any], reason: str, message: str) -> None:
        meta = obj.get("metadata") or {}
        key = (str(meta.get("uid")), reason, message)
        if key in self._sent:
            return
        now = datetime.now(UTC).strftime("%Y-%m-%dT%H:%M:%SZ")
        event: Any = CoreEvent.from_dict(
            {
                "metadata": {"generateName": f"{meta.get('name')}.", "namespace": meta.get("namespace")},
                "involvedObject": {
                    "apiVersion": obj.get("apiVersion"),
                    "kind": obj.get("kind"),
                    "name": meta.get("name"),
                    "namespace": meta.get("namespace"),
                    "uid": meta.get("uid"),
                },
                "reason": reason,
                "message": message,
                "type": "Warning",
                "source": {"component": self.component},
                "firstTimestamp": now,
                "lastTimestamp": now,
                "count": 1,
            }
        )
        with unless_gone():  # the namespace may be going away
            await self.home.create(event)
        self._sent.add(key)


class NamespaceWatch:
    """One offloaded namespace: a kind (`resource`) at home, and in its twin namespace in the foreign
    cluster (`trim_foreign`: what of the foreign objects is not kept)."""

    def __init__(
        self,
        resource: type[Any],
        home: AsyncClient,
        foreign: AsyncClient,
        namespace: str,
        twin: str,
        trim_foreign: Callable[[Any], Any] | None = None,
    ) -> None:
        self.namespace, self.twin = namespace, twin
        # packed: a twin holds one token Secret per offloaded pod, which this store keeps too
        self.home = Informer(home, resource, namespace=namespace, packed=True)
        self.foreign = Informer(foreign, resource, namespace=twin, trim=trim_foreign, packed=True)
        self.tasks: list[asyncio.Task[None]] = []
        # the copies' events our applies caused: kept with this watch, so a twin watched anew (a
        # namespace offloaded again) trusts no write made before, which its store may never show
        self.own_writes = OwnWrites()
        self._relists_seen = 0

    def start(
        self, on_home: Callable[[Event], None], on_foreign: Callable[[Event], None], on_synced: Callable[[], None]
    ) -> None:
        """`on_synced`: once both sides are known (an unreachable cluster: when it is back)."""
        self.home.add_handler(on_home)
        self.foreign.add_handler(on_foreign)
        self.tasks = [asyncio.create_task(i.run()) for i in (self.home, self.foreign)]
        self.tasks.append(asyncio.create_task(call_when_synced((self.home, self.foreign), on_synced)))

    def synced(self) -> bool:
        return self.home.synced.is_set() and self.foreign.synced.is_set()

    def write_in_flight(self, key: str, stored_version: str | None) -> str | None:
        """The hash our last apply of copy `key` wrote, when the foreign store does not show it yet."""
        if self.foreign.relists != self._relists_seen:
            # a relist tells nothing of an object created and deleted while the watch was down:
            # a record it did not clear may be of a copy long gone
            self.own_writes.clear()
            self._relists_seen = self.foreign.relists
        return self.own_writes.in_flight(key, stored_version)

    def stop(self) -> None:
        for task in self.tasks:
            task.cancel()


class Reflector:
    def __init__(
        self,
        kind: ReflectedKind,
        home: AsyncClient,
        foreign: AsyncClient,
        *,
        home_cluster_id: str,
        foreign_cluster_id: str,
        settings_of: SettingsOf,
        events: HomeEvents,
        lookup: HomeLookup | None = None,
        synced_in: Callable[[str, str], bool] | None = None,
        metrics: EngineMetrics | None = None,
        reflection_metrics: ReflectionMetrics | None = None,
    ) -> None:
        self.kind = kind
        self.home, self.foreign = home, foreign
        self.home_cluster_id, self.foreign_cluster_id = home_cluster_id, foreign_cluster_id
        self.settings_of = settings_of
        self.events = events
        self.field_manager = f"liqo-reflection-{kind.name}"
        workers = max(1, settings_of(kind.name).workers)  # 0 disables the kind: checked per reconcile, live
        self.queue = WorkQueue(self.reconcile, workers=workers, name=f"reflection-{kind.name}", metrics=metrics)
        self.watches: dict[str, NamespaceWatch] = {}  # home namespace -> its watch
        self.lookup = lookup
        self.synced_in = synced_in  # (kind, namespace): that kind's stores there are known
        self.on_synced: list[Callable[[], None]] = []  # kinds following this one: requeued once it knows
        self.on_home_change: list[Callable[[str, str], None]] = []  # (namespace, name): kinds following this one
        self.stats = reflection_metrics
        if reflection_metrics is not None:
            labels = (foreign_cluster_id, kind.name)
            reflection_metrics.reflected.labels(*labels).set_function(self.reflected_count)
            self._writes = {verb: reflection_metrics.writes.labels(*labels, verb) for verb in ("apply", "delete")}
            self._errors = reflection_metrics.errors.labels(*labels)

    def reflected_count(self) -> int:
        """The copies in the watched twins that are ours."""
        return sum(
            1
            for watch in list(self.watches.values())
            for obj in list(watch.foreign.store.values())
            if is_owned(
                meta := {"metadata": {"labels": obj.metadata.labels}}, self.home_cluster_id, self.foreign_cluster_id
            )
            and not self.kind.foreign_excluded(meta)
        )

    def _count_write(self, verb: str) -> None:
        if self.stats is not None:
            self._writes[verb].inc()

    def home_object(self, namespace: str, name: str) -> dict[str, Any] | None:
        watch = self.watches.get(namespace)
        found = watch.home.store.get(f"{namespace}/{name}") if watch is not None else None
        return found.to_dict() if found is not None else None

    def requeue_following(self, namespace: str, name: str) -> None:
        """The followed object `name` changed: reconcile the objects of this kind that follow it."""
        watch = self.watches.get(namespace)
        if watch is None or self.kind.follows is None:
            return
        name_of = self.kind.follows[1]
        for key, obj in watch.home.store.items():
            if name_of(obj.to_dict()) == name:
                self.queue.add(key)

    def _on_home(self, event: Event) -> None:
        self.queue.add(event.key)
        namespace, _, name = event.key.partition("/")
        for notify in self.on_home_change:
            notify(namespace, name)

    # -- which namespaces ---------------------------------------------------------------------------
    def follow(self, twins: Mapping[str, str]) -> None:
        """Watch exactly these offloaded namespaces (home namespace -> twin in this foreign cluster)."""
        for namespace in list(self.watches):
            if twins.get(namespace) != self.watches[namespace].twin:
                self.watches.pop(namespace).stop()
        for namespace, twin in twins.items():
            if namespace not in self.watches:
                kind = self.kind
                watch = NamespaceWatch(kind.resource, self.home, self.foreign, namespace, twin, kind.trim_foreign)
                watch.start(self._on_home, self._on_foreign(watch), self._synced)
                self.watches[namespace] = watch

    def _on_foreign(self, watch: NamespaceWatch) -> Callable[[Event], None]:
        def on_event(event: Event) -> None:
            if watch.own_writes.is_echo(event):
                return  # exactly what our apply made: nothing to reconcile
            self.queue.add(f"{watch.namespace}/{event.key.partition('/')[2]}")

        return on_event

    def _synced(self) -> None:
        self.requeue_all()
        for notify in self.on_synced:
            notify()

    def requeue_all(self) -> None:
        for namespace, watch in self.watches.items():
            names = {key.partition("/")[2] for key in watch.home.store} | {
                key.partition("/")[2] for key in watch.foreign.store
            }
            for name in names:
                self.queue.add(f"{namespace}/{name}")

    def stop(self) -> None:
        for watch in self.watches.values():
            watch.stop()
        self.watches.clear()

    # -- reconcile ----------------------------------------------------------------------------------
    def _allowed(self, home: dict[str, Any], settings: ReflectionSettings) -> bool:
        """The policy says yes: the object's own annotations, else (a kind that follows another, seed
        002's EndpointSlices) whatever decides for the object it follows."""
        annotations = (home.get("metadata") or {}).get("annotations") or {}
        if self.kind.follows is None or has_own_policy(annotations):
            return policy_allows(settings.policy, annotations)
        kind, name_of = self.kind.follows
        name = name_of(home)
        followed = self.lookup(kind, home["metadata"]["namespace"], name) if self.lookup and name else None
        if followed is None:
            return False
        leader = self.settings_of(kind)
        return leader.workers > 0 and policy_allows(
            leader.policy, (followed.get("metadata") or {}).get("annotations") or {}
        )

    async def reconcile(self, key: str) -> None:
        try:
            await self._reconcile(key)
        except Exception:
            if self.stats is not None:
                self._errors.inc()
            raise

    async def _reconcile(self, key: str) -> None:
        namespace, _, name = key.partition("/")
        watch = self.watches.get(namespace)
        if watch is None:
            return
        if not watch.synced():
            return  # decided only on what both sides are known to hold: their sync requeues all
        if self.kind.follows is not None and self.synced_in and not self.synced_in(self.kind.follows[0], namespace):
            return  # what decides for it is not known yet (a restart): its sync requeues this kind
        settings = self.settings_of(self.kind.name)
        if settings.workers == 0:
            return  # disabled: nothing is reflected, and nothing already reflected is removed
        home_obj = watch.home.store.get(key)
        home = home_obj.to_dict() if home_obj is not None else None
        remote_obj = watch.foreign.store.get(f"{watch.twin}/{name}")
        remote = remote_obj.to_dict() if remote_obj is not None else None
        wanted = (
            home is not None
            and not (home.get("metadata") or {}).get("deletionTimestamp")
            and self.kind.reflectable(home)
            and self._allowed(home, settings)
        )
        ours = (
            remote is not None
            and is_owned(remote, self.home_cluster_id, self.foreign_cluster_id)
            and not self.kind.foreign_excluded(remote)
        )
        if not wanted or home is None:
            if remote is not None and ours and not (remote.get("metadata") or {}).get("deletionTimestamp"):
                self._count_write("delete")
                with unless_gone():
                    await self.foreign.delete(self.kind.resource, name, namespace=watch.twin)
            return
        if remote is not None and not ours:
            await self.events.warn(
                home,
                "ReflectionConflict",
                f"{self.foreign_cluster_id} already holds a {home['kind']} {watch.twin}/{name} that liqo did not "
                "create: it is left untouched and this object is not reflected there; rename one of them",
            )
            return
        desired = reflected_object(
            home,
            self.kind.content_for(home, self.foreign_cluster_id, settings),
            twin=watch.twin,
            home_cluster_id=self.home_cluster_id,
            foreign_cluster_id=self.foreign_cluster_id,
            settings=settings,
            relabel=self.kind.labels,
            reannotate=self.kind.annotations,
        )
        if remote is not None and up_to_date(desired, remote):
            return
        copy_key = f"{watch.twin}/{name}"
        stored_version = (remote.get("metadata") or {}).get("resourceVersion") if remote is not None else None
        wanted_hash = desired["metadata"]["annotations"][APPLIED_HASH_ANNOTATION]
        if watch.write_in_flight(copy_key, stored_version) == wanted_hash:
            return  # our last apply wrote exactly this and its echo is on its way
        self._count_write("apply")
        try:
            applied = await self.foreign.patch(
                self.kind.resource,
                name,
                desired,
                namespace=watch.twin,
                patch_type=PatchType.APPLY,
                field_manager=self.field_manager,
                force=True,
            )
            watch.own_writes.record(copy_key, applied, wanted_hash)
        except ApiError as err:
            if err.status.code in (400, 403, 404, 409, 422):  # refused as it is: say so at home, retry later
                await self.events.warn(
                    home, "ReflectionFailed", f"{self.foreign_cluster_id} refused the copy: {err.status.message}"
                )
            raise
