"""The reflectors of one foreign cluster, following the namespaces offloaded there and the
VirtualNode's reflection settings."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from lightkube import AsyncClient

from runtime.api import VirtualNodeSpec
from runtime.api.namespaceoffloading import ready_twin
from runtime.kube import Event, Informer
from runtime.kube.serving import EngineMetrics
from runtime.reflection.forging import ReflectionSettings
from runtime.reflection.kinds import ALL_KINDS, ReflectedKind
from runtime.reflection.reflecting import HomeEvents, ReflectionMetrics, Reflector


def settings_from(spec: VirtualNodeSpec | None, kind: str) -> ReflectionSettings:
    if spec is None:
        return ReflectionSettings()
    chosen = spec.reflection.get(kind)
    patch = spec.offloading_patch
    return ReflectionSettings(
        policy=chosen.type if chosen else ReflectionSettings.policy,
        workers=chosen.workers if chosen else ReflectionSettings.workers,
        labels_not_reflected=frozenset(patch.labels_not_reflected or ()),
        annotations_not_reflected=frozenset(patch.annotations_not_reflected or ()),
        address_ranges=tuple((r.seen_at_home, r.seen_there) for r in spec.endpoint_remappings),
    )


class Reflection:
    def __init__(
        self,
        home: AsyncClient,
        foreign: AsyncClient,
        *,
        home_cluster_id: str,
        foreign_cluster_id: str,
        offloadings: Informer,
        virtual_node_spec: Callable[[], VirtualNodeSpec | None],
        kinds: tuple[ReflectedKind, ...] = ALL_KINDS,
        metrics: EngineMetrics | None = None,
    ) -> None:
        self.foreign_cluster_id = foreign_cluster_id
        self.offloadings = offloadings
        self.virtual_node_spec = virtual_node_spec
        self.events = events = HomeEvents(home, f"liqo-reflection-{foreign_cluster_id}")
        stats = ReflectionMetrics(metrics.registry) if metrics is not None else None
        self.reflectors = [
            Reflector(
                kind,
                home,
                foreign,
                home_cluster_id=home_cluster_id,
                foreign_cluster_id=foreign_cluster_id,
                settings_of=self.settings_of,
                events=events,
                lookup=self.home_object,
                synced_in=self.synced_in,
                metrics=metrics,
                reflection_metrics=stats,
            )
            for kind in kinds
        ]
        self.by_kind = {reflector.kind.name: reflector for reflector in self.reflectors}
        for reflector in self.reflectors:
            if reflector.kind.follows is not None and reflector.kind.follows[0] in self.by_kind:
                self.by_kind[reflector.kind.follows[0]].on_home_change.append(reflector.requeue_following)
                self.by_kind[reflector.kind.follows[0]].on_synced.append(reflector.requeue_all)
        self.started = False
        self._applied: dict[str, ReflectionSettings] = {}  # the settings each kind last reconciled with

    def home_object(self, kind: str, namespace: str, name: str) -> dict[str, Any] | None:
        reflector = self.by_kind.get(kind)
        return reflector.home_object(namespace, name) if reflector is not None else None

    def synced_in(self, kind: str, namespace: str) -> bool:
        reflector = self.by_kind.get(kind)
        watch = reflector.watches.get(namespace) if reflector is not None else None
        return watch is not None and watch.synced()

    def settings_of(self, kind: str) -> ReflectionSettings:
        return settings_from(self.virtual_node_spec(), kind)

    def twins(self) -> dict[str, str]:
        """Home namespace -> its twin here, for the namespaces whose twin is Ready in this cluster."""
        found = {}
        for offloading in self.offloadings.store.values():
            twin = ready_twin(offloading.get("status"), self.foreign_cluster_id)
            if twin is not None and not offloading.metadata.deletionTimestamp:
                found[offloading.metadata.namespace] = twin
        return found

    def on_offloading(self, _: Event) -> None:
        if self.started:
            for reflector in self.reflectors:
                reflector.follow(self.twins())

    def on_settings(self) -> None:
        """A VirtualNode changed: where this cluster's settings for a kind changed, they apply to every
        object of that kind at once (and of the kinds that follow it); other changes reconcile nothing."""
        changed = {kind for kind, settings in self._settings().items() if self._applied.get(kind) != settings}
        self._applied = self._settings()
        for reflector in self.reflectors:
            follows = reflector.kind.follows[0] if reflector.kind.follows else None
            if reflector.kind.name in changed or follows in changed:
                reflector.requeue_all()

    def _settings(self) -> dict[str, ReflectionSettings]:
        return {reflector.kind.name: self.settings_of(reflector.kind.name) for reflector in self.reflectors}

    def start(self) -> None:
        """Once the home informers (offloadings, virtual nodes) are synced."""
        self.started = True
        self._applied = self._settings()
        for reflector in self.reflectors:
            reflector.queue.start()
            reflector.follow(self.twins())

    async def stop(self) -> None:
        for reflector in self.reflectors:
            reflector.stop()
            await reflector.queue.shutdown()
