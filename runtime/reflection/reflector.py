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

import logging
import weakref
from collections.abc import Callable
from typing import Any

from lightkube import ApiError
from lightkube.types import PatchType
from prometheus_client import CollectorRegistry, Counter, Gauge

from runtime.forging.kinds import ReflectedKind
from runtime.forging.objects import (
    APPLIED_HASH_ANNOTATION,
    ReflectionSettings,
    has_own_policy,
    is_owned,
    policy_allows,
    reflected_object,
    up_to_date,
)
from runtime.kube import Event, Informer, unless_gone
from runtime.kube.twins import TwinFollower, TwinScope, Watched
from runtime.reflection.context import Peering

log = logging.getLogger(__name__)

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

    @classmethod
    def of(cls, registry: CollectorRegistry) -> ReflectionMetrics:
        """The registry's (made with its first peering: every peering of a process reports in it)."""
        found = _REFLECTION_METRICS.get(registry)
        if found is None:
            found = _REFLECTION_METRICS[registry] = cls(registry)
        return found


_REFLECTION_METRICS: weakref.WeakKeyDictionary[CollectorRegistry, ReflectionMetrics] = weakref.WeakKeyDictionary()


class Reflector(TwinFollower):
    written = "foreign"

    def __init__(
        self,
        kind: ReflectedKind,
        peering: Peering,
        *,
        lookup: HomeLookup | None = None,
        synced_in: Callable[[str, str], bool] | None = None,
        reflection_metrics: ReflectionMetrics | None = None,
    ) -> None:
        self.kind = kind
        self.peering = peering
        self.field_manager = f"liqo-reflection-{kind.name}"
        # 0 disables the kind: checked per reconcile; the count itself follows the VirtualNode (on_settings)
        super().__init__(f"reflection-{kind.name}", workers=self.settings().workers, metrics=peering.metrics)
        self.lookup = lookup
        self.synced_in = synced_in  # (kind, namespace): that kind's stores there are known
        self.on_synced_all: list[Callable[[], None]] = []  # kinds following this one: requeued once it knows
        self.on_home_change: list[Callable[[str, str], None]] = []  # (namespace, name): kinds following this one
        self.stats = reflection_metrics
        if reflection_metrics is not None:
            labels = (peering.foreign_cluster_id, kind.name)
            reflection_metrics.reflected.labels(*labels).set_function(self.reflected_count)
            self._writes = {
                verb: reflection_metrics.writes.labels(*labels, verb) for verb in ("apply", "delete", "status")
            }
            self._errors = reflection_metrics.errors.labels(*labels)

    def settings(self) -> ReflectionSettings:
        return self.peering.settings_of(self.kind.name)

    def on_settings(self) -> None:
        self.resize(self.settings().workers)

    def open_scope(self, namespace: str, twin: str) -> dict[str, Watched]:
        """The kind at home and all of it in the twin, so a conflicting foreign object is seen; packed:
        a twin holds one token Secret per offloaded pod, which this store keeps too."""
        return {
            "home": self.peering.home_watches.view(self.kind.resource, namespace, packed=True),
            "foreign": Informer(
                self.peering.foreign, self.kind.resource, namespace=twin, trim=self.kind.trim_foreign, packed=True
            ),
        }

    def reflected_count(self) -> int:
        """The copies in the watched twins that are ours."""
        ids = self.peering.home_cluster_id, self.peering.foreign_cluster_id
        return sum(
            1
            for scope in self
            for obj in list(scope["foreign"].store.values())
            if is_owned(meta := {"metadata": {"labels": obj.metadata.labels}}, *ids)
            and not self.kind.foreign_excluded(meta)
        )

    def _count_write(self, verb: str) -> None:
        if self.stats is not None:
            self._writes[verb].inc()

    def home_object(self, namespace: str, name: str) -> dict[str, Any] | None:
        scope = self.scopes.get(namespace)
        found = scope["home"].store.get(f"{namespace}/{name}") if scope is not None else None
        return found.to_dict() if found is not None else None

    def requeue_following(self, namespace: str, name: str) -> None:
        """The followed object `name` changed: reconcile the objects of this kind that follow it."""
        scope = self.scopes.get(namespace)
        if scope is None or self.kind.follows is None:
            return
        name_of = self.kind.follows[1]
        for key, obj in scope["home"].store.items():
            if name_of(obj.to_dict()) == name:
                self.queue.add(key)

    def on_event(self, scope: TwinScope, informer: str, event: Event) -> None:
        super().on_event(scope, informer, event)
        if informer == "home":
            for notify in self.on_home_change:
                notify(scope.namespace, event.key.partition("/")[2])

    def on_synced(self, scope: TwinScope) -> None:
        self.requeue_all()
        for notify in self.on_synced_all:
            notify()

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
        leader = self.peering.settings_of(kind)
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
        scope = self.synced_scope(namespace)
        if scope is None:
            return  # decided only on what both sides are known to hold: their sync requeues all
        if self.kind.follows is not None and self.synced_in and not self.synced_in(self.kind.follows[0], namespace):
            return  # what decides for it is not known yet (a restart): its sync requeues this kind
        settings = self.settings()
        if settings.workers == 0:
            return  # disabled: nothing is reflected, and nothing already reflected is removed
        peering = self.peering
        home_obj = scope["home"].store.get(key)
        home = home_obj.to_dict() if home_obj is not None else None
        twin = scope.twin
        remote_obj = scope["foreign"].store.get(f"{twin}/{name}")
        remote = remote_obj.to_dict() if remote_obj is not None else None
        wanted = (
            home is not None
            and not (home.get("metadata") or {}).get("deletionTimestamp")
            and self.kind.reflectable(home)
            and self._allowed(home, settings)
        )
        ours = (
            remote is not None
            and is_owned(remote, peering.home_cluster_id, peering.foreign_cluster_id)
            and not self.kind.foreign_excluded(remote)
        )
        copy_key = f"{twin}/{name}"
        if not wanted or home is None:
            if remote is None:
                # a copy our apply just made may not be in the store yet: its echo, dropped otherwise,
                # brings the key back to delete it (else it stays until something else changes it)
                scope.own_writes.await_echo(copy_key)
            elif ours and not (remote.get("metadata") or {}).get("deletionTimestamp"):
                self._count_write("delete")
                with unless_gone():
                    await peering.foreign.delete(self.kind.resource, name, namespace=twin)
            return
        if remote is not None and not ours:
            consequence = "it is left untouched and this object is not reflected there; rename one of them"
            await peering.conflict(home, "ReflectionConflict", f"{home['kind']} {twin}/{name}", consequence)
            return
        desired = reflected_object(
            home,
            self.kind.content_for(home, peering.foreign_cluster_id, settings),
            twin=twin,
            home_cluster_id=peering.home_cluster_id,
            foreign_cluster_id=peering.foreign_cluster_id,
            settings=settings,
            relabel=self.kind.labels,
            reannotate=self.kind.annotations,
        )
        if remote is not None and up_to_date(desired, remote):
            return
        stored_version = (remote.get("metadata") or {}).get("resourceVersion") if remote is not None else None
        wanted_hash = desired["metadata"]["annotations"][APPLIED_HASH_ANNOTATION]
        if scope.write_in_flight(copy_key, stored_version) == wanted_hash:
            return  # our last apply wrote exactly this and its echo is on its way
        self._count_write("apply")
        try:
            applied = await peering.foreign.patch(
                self.kind.resource,
                name,
                desired,
                namespace=twin,
                patch_type=PatchType.APPLY,
                field_manager=self.field_manager,
                force=True,
            )
            scope.own_writes.record(copy_key, applied, wanted_hash)
        except ApiError as err:
            if err.status.code in (400, 403, 404, 409, 422):  # refused as it is: say so at home, retry later
                await peering.warnings.warn(
                    home, "ReflectionFailed", f"{peering.foreign_cluster_id} refused the copy: {err.status.message}"
                )
            raise
