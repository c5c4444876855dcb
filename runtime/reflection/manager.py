"""The reflection manager of one foreign cluster: which namespaces are twinned there, computed once,
and every member that follows them (a reflector per kind, tokens, events, storage, and whatever
the virtual kubelet registers: the pod offloader), started, told and stopped through one contract
(`TwinMember`). The VirtualNode's reflection settings (policies, workers) apply live."""

from __future__ import annotations

import logging
from typing import Any

from runtime.api import names
from runtime.api.namespaceoffloading import Placement, placement, ready_twin
from runtime.forging.kinds import ALL_KINDS, ReflectedKind
from runtime.forging.objects import ReflectionSettings, is_owned
from runtime.kube import Event, ObjectSource
from runtime.kube.supervising import stop_side_by_side
from runtime.kube.twins import TwinMember, Twins, Watched
from runtime.reflection.context import Peering
from runtime.reflection.custom import CustomResources
from runtime.reflection.events import EventReflector
from runtime.reflection.reflector import ReflectionMetrics, Reflector
from runtime.reflection.storage import StorageProvisioner
from runtime.reflection.tokens import TokenReflector

log = logging.getLogger(__name__)


def followed_twins(offloadings: Watched, cluster_id: str, following: Twins) -> dict[str, str]:
    """Home namespace -> its twin here: those Ready in this cluster, and those already `following`
    whose cluster stays selected with the same twin (unready, e.g. unreachable: nothing is lost)."""
    found = {}
    for offloading in offloadings.store.values():
        namespace = offloading.metadata.namespace
        status = offloading.get("status") or {}
        where, twin = placement(status, cluster_id, deleting=bool(offloading.metadata.deletionTimestamp))
        if twin and (where is Placement.READY or (where is Placement.WAITING and following.get(namespace) == twin)):
            found[namespace] = twin
    return found


class ReflectionManager:
    def __init__(
        self,
        peering: Peering,
        offloadings: Watched,
        pods: ObjectSource,
        *,
        kinds: tuple[ReflectedKind, ...] = ALL_KINDS,
        members: tuple[TwinMember, ...] = (),
    ) -> None:
        """`pods`: the home pods on the virtual node (their tokens); `members`: more to follow the twins."""
        self.peering = peering
        self.offloadings = offloadings
        stats = ReflectionMetrics.of(peering.metrics.registry) if peering.metrics is not None else None
        self.reflectors = [Reflector(kind, peering, reflection_metrics=stats) for kind in kinds]
        self.by_kind = {reflector.kind.name: reflector for reflector in self.reflectors}
        for reflector in self.reflectors:
            reflector.lookup, reflector.synced_in = self.home_object, self.synced_in
            if reflector.kind.follows is not None and reflector.kind.follows[0] in self.by_kind:
                self.by_kind[reflector.kind.follows[0]].on_home_change.append(reflector.requeue_following)
                self.by_kind[reflector.kind.follows[0]].on_synced_all.append(reflector.requeue_all)
        # docs/reflection.md: ServiceAccount tokens of the pods on this node, events back from the twins, and
        # the storage fabric (claims of class liqo whose pod landed on this node)
        self.tokens = TokenReflector(
            peering, pods, home_config_map=lambda namespace, name: self.home_object("configmap", namespace, name)
        )
        self.events = EventReflector(peering, self.home_object_of_event)
        self.storage = StorageProvisioner(peering)
        # issue 39: the custom resources the VirtualNode opts in, each once its CRDs allow it
        self.custom = CustomResources(peering, status_source=self.status_source, reflection_metrics=stats)
        self.members: list[TwinMember] = [
            *self.reflectors,
            self.tokens,
            self.events,
            self.storage,
            self.custom,
            *members,
        ]
        self.pods = pods
        self.twins: dict[str, str] = {}
        self.started = False
        self._applied: dict[str, ReflectionSettings] = {}  # the settings each kind last reconciled with
        offloadings.add_handler(self._on_offloading)

    # -- what the members ask -------------------------------------------------------------------
    def home_object(self, kind: str, namespace: str, name: str) -> dict[str, Any] | None:
        reflector = self.by_kind.get(kind)
        return reflector.home_object(namespace, name) if reflector is not None else None

    def synced_in(self, kind: str, namespace: str) -> bool:
        reflector = self.by_kind.get(kind)
        return reflector is not None and reflector.synced_scope(namespace) is not None

    def status_source(self, namespace: str) -> bool:
        """Whether this cluster's copies give the home custom objects of `namespace` their status: the
        first by id of the clusters its twin is Ready in, so one writer decides each home status."""
        offloading = self.offloadings.store.get(f"{namespace}/{names.NAMESPACE_OFFLOADING_NAME}")
        status = (offloading.get("status") or {}) if offloading is not None else {}
        ready = [c for c in status.get("remoteNamespacesConditions") or {} if ready_twin(status, c)]
        return bool(ready) and min(ready) == self.peering.foreign_cluster_id

    async def home_object_of_event(
        self, kind: str, namespace: str, name: str, foreign_uid: str | None
    ) -> dict[str, Any] | None:
        """The home object a foreign event in the twin of `namespace` is about, if it has one and the
        foreign object is ours."""
        if kind == "Pod":
            pod = self.pods.store.get(f"{namespace}/{name}")  # the pods on this virtual node
            return {"apiVersion": "v1", "kind": "Pod", **pod.to_dict()} if pod is not None else None
        if kind == "PersistentVolumeClaim":
            claims = self.storage.scopes.get(namespace)
            claim = claims["home"].store.get(f"{namespace}/{name}") if claims is not None else None
            return {"apiVersion": "v1", "kind": kind, **claim.to_dict()} if claim is not None else None
        reflector = self.by_kind.get(kind.lower())
        scope = reflector.scopes.get(namespace) if reflector is not None else None
        if reflector is None or scope is None:
            return None
        remote = scope["foreign"].store.get(f"{scope.twin}/{name}")
        ids = self.peering.home_cluster_id, self.peering.foreign_cluster_id
        if remote is not None and not is_owned(remote.to_dict(), *ids):
            return None  # about a foreign object of that name that is not ours
        found = reflector.home_object(namespace, name)
        api_version = reflector.kind.resource._api_info.resource.api_version
        return {"apiVersion": api_version, "kind": kind, **found} if found is not None else None

    # -- what changes ------------------------------------------------------------------------------
    def _on_offloading(self, event: Event) -> None:
        if self.started:
            self.follow()
            self.custom.status_source_changed(event.key.partition("/")[0])

    def follow(self) -> None:
        self.twins = followed_twins(self.offloadings, self.peering.foreign_cluster_id, self.twins)
        for member in self.members:
            member.follow(self.twins)

    def retry_failed(self) -> int:
        """The foreign cluster, or the home cluster, answers again after an outage: every member retries
        now what failed meanwhile, rather than after a backoff that may have grown to a minute. Returns
        how many keys."""
        woken = sum(member.retry_failed() for member in self.members)
        if woken:
            log.info(
                "peering with %s: an API server answers again, %d failed reconciles retried now",
                self.peering.foreign_cluster_id,
                woken,
            )
        return woken

    def on_settings(self) -> None:
        """A VirtualNode changed: every member takes up its settings (workers at once); where this
        cluster's policy for a kind changed, it applies to every object of that kind (and of the
        kinds that follow it); other changes reconcile nothing."""
        settings = self._settings()
        changed = {kind for kind, chosen in settings.items() if self._applied.get(kind) != chosen}
        self._applied = settings
        for member in self.members:
            member.on_settings()
        for reflector in self.reflectors:
            follows = reflector.kind.follows[0] if reflector.kind.follows else None
            if reflector.kind.name in changed or follows in changed:
                reflector.requeue_all()

    def _settings(self) -> dict[str, ReflectionSettings]:
        return {reflector.kind.name: reflector.settings() for reflector in self.reflectors}

    # -- lifecycle ---------------------------------------------------------------------------------
    async def start(self) -> None:
        """Once the home informers (offloadings, virtual nodes, pods) are synced."""
        self._applied = self._settings()
        for member in self.members:
            member.on_settings()
            await member.start()
        self.started = True
        self.follow()

    async def stop(self) -> None:
        await stop_side_by_side(member.stop() for member in self.members)
