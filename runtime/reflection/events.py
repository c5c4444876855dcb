"""Events, the only foreign -> home direction of reflection (docs/reflection.md).

A foreign event (core/v1, or events.k8s.io which the API server also serves as core/v1) in a twin
namespace about a pod, Service, EndpointSlice, Ingress, ConfigMap, Secret or PVC shows in the home
namespace, about the HOME object (its kind, name and UID), so `kubectl describe` at home lists it.
One home event per foreign event, named from the foreign event's UID: when the foreign cluster
counts a repeat (count, or series for events.k8s.io) the home event's count and lastTimestamp
follow in place, and a restarted virtual kubelet finds its events instead of making new ones.
Events about objects with no home counterpart (or about a foreign object that is not ours), and
foreign controllers' complaints that the twin is being torn down, are dropped; home events are
never reflected to foreign clusters.

What the home event says is forged in runtime/forging/events.py; the reflector decides from synced
stores and writes only when the home event does not already say what the foreign one says.
"""

from __future__ import annotations

import logging
from collections.abc import Awaitable, Callable
from typing import Any

from lightkube import ApiError
from lightkube.resources.core_v1 import Event as CoreEvent

from runtime.api import names
from runtime.forging.events import REFLECTED_EVENT_KINDS, about_teardown, event_allowed, home_event, needs_write
from runtime.forging.objects import ReflectionSettings
from runtime.kube import Event, Informer, unless_gone
from runtime.kube.twins import TwinFollower, TwinScope, Watched
from runtime.reflection.context import Peering

log = logging.getLogger(__name__)

KIND = "event"  # its settings: liqo:reflection.resources.event
FIELD_MANAGER = "liqo-reflection-event"

# kind, home namespace, name, foreign UID of the object the event is about -> the home object, or
# None when it has no home counterpart (or the foreign one is not ours)
HomeObjectOf = Callable[[str, str, str, str | None], Awaitable[dict[str, Any] | None]]


class EventReflector(TwinFollower):
    """Keyed by home namespace/foreign event name; the `event` kind's settings (workers 0: off)."""

    def __init__(self, peering: Peering, home_object: HomeObjectOf) -> None:
        self.peering = peering
        self.home_object = home_object
        self._applied = self.settings()
        super().__init__("reflection-event", workers=self._applied.workers, metrics=peering.metrics)

    def settings(self) -> ReflectionSettings:
        return self.peering.settings_of(KIND)

    def on_settings(self) -> None:
        settings = self.settings()
        self.resize(settings.workers)
        if settings != self._applied:
            self._applied = settings
            self.requeue_all()

    def open_scope(self, namespace: str, twin: str) -> dict[str, Watched]:
        """The foreign events in the twin, and our copies at home."""
        labels = {names.EVENT_REFLECTED_FROM_LABEL: self.peering.foreign_cluster_id}
        return {
            "foreign": Informer(self.peering.foreign, CoreEvent, namespace=twin, packed=True),
            "home": self.peering.home_watches.view(CoreEvent, namespace, labels=labels, packed=True),
        }

    def on_event(self, scope: TwinScope, informer: str, event: Event) -> None:
        # a foreign event expiring there leaves ours to expire here
        if informer == "foreign" and event.type != "DELETED":
            super().on_event(scope, informer, event)

    def requeue(self, scope: TwinScope) -> None:
        for name in scope.names("foreign"):
            self.queue.add(f"{scope.namespace}/{name}")

    async def reconcile(self, key: str) -> None:
        namespace, _, name = key.partition("/")
        watch = self.synced_scope(namespace)
        if watch is None or self.settings().workers == 0:
            return
        found = watch["foreign"].store.get(f"{watch.twin}/{name}")
        if found is None:
            return
        foreign_event = found.to_dict()
        involved = foreign_event.get("involvedObject") or {}
        kind = involved.get("kind")
        if kind not in REFLECTED_EVENT_KINDS or involved.get("namespace") not in (None, "", watch.twin):
            return
        if about_teardown(foreign_event, watch.twin):
            return
        target = await self.home_object(kind, namespace, str(involved.get("name")), involved.get("uid"))
        if target is None:
            return  # no home counterpart
        if not event_allowed(self.settings().policy, foreign_event, target):
            return
        desired = home_event(
            foreign_event, target, foreign_cluster_id=self.peering.foreign_cluster_id, node_name=self.peering.node_name
        )
        existing_obj = watch["home"].store.get(f"{namespace}/{desired['metadata']['name']}")
        existing = existing_obj.to_dict() if existing_obj is not None else None
        if not needs_write(desired, existing):
            return
        body: Any = CoreEvent.from_dict(desired)
        with unless_gone():  # the home namespace may be going away
            if existing is None:
                # most reflected events are new: a create costs the API server 0.7 ms, an apply
                # 1.15 (an ad hoc run of 2,000 each); one our store has not seen yet is applied
                try:
                    await self.peering.home.create(body, field_manager=FIELD_MANAGER)
                    return
                except ApiError as err:
                    if err.status.code != 409:
                        raise
            await self.peering.home.apply(body, field_manager=FIELD_MANAGER, force=True)
