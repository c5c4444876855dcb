"""Following twin namespaces: the one lifecycle every member of a virtual kubelet shares.

A member (a reflector, the token and event reflectors, storage, the pod offloader) keeps, per home
namespace twinned in a foreign cluster, a `TwinScope`: the informers it needs there (in the twin,
and maybe at home), started together, known once all are synced (a relist included), and stopped
together when the namespace is no longer twinned or its twin changes. Its work queue is keyed by
home namespace/name: an event in the twin comes back under the home namespace's name.

The scope also keeps the writes the member made there (`OwnWrites`): their echoes are dropped,
and a scope opened anew, or a store that relisted, trusts no write made before.
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable, Iterator, Mapping
from typing import Protocol

from runtime.kube.echoes import OwnWrites
from runtime.kube.informing import Event, Informer
from runtime.kube.queueing import WorkQueue
from runtime.kube.serving import EngineMetrics
from runtime.kube.shared import NamespaceView, SharedView

Twins = Mapping[str, str]  # home namespace -> its twin namespace in the foreign cluster
# An informer: its own watch, or a view of a shared one (runtime/kube/shared.py)
Watched = Informer | NamespaceView | SharedView


class TwinScope:
    """The informers a member keeps for one twinned namespace, by name ("home", "foreign", ...)."""

    def __init__(self, namespace: str, twin: str, informers: Mapping[str, Watched], written: str | None) -> None:
        """`written`: the informer whose objects the member writes (their echoes are dropped)."""
        self.namespace, self.twin = namespace, twin
        self.informers = dict(informers)
        self.written = written
        self.own_writes = OwnWrites()
        self._relists = {name: informer.relists for name, informer in self.informers.items()}
        self.tasks: dict[str, asyncio.Task[None]] = {}  # by informer name, and "synced"

    def __getitem__(self, name: str) -> Watched:
        return self.informers[name]

    def start(self, on_event: Callable[[TwinScope, str, Event], None], on_synced: Callable[[TwinScope], None]) -> None:
        """`on_synced`: once every informer is synced (an unreachable cluster: when it is back)."""
        for name, informer in self.informers.items():
            informer.add_handler(lambda event, name=name: on_event(self, name, event))  # type: ignore[misc]
        self.tasks = {name: asyncio.create_task(informer.run()) for name, informer in self.informers.items()}
        self.tasks["synced"] = asyncio.create_task(self._when_synced(on_synced))

    async def _when_synced(self, on_synced: Callable[[TwinScope], None]) -> None:
        for informer in self.informers.values():
            await informer.synced.wait()
        on_synced(self)

    def synced(self) -> bool:
        return all(informer.synced.is_set() for informer in self.informers.values())

    def names(self, *informers: str) -> set[str]:
        """The names of the objects these stores (default: all) hold."""
        return {key.partition("/")[2] for name in informers or self.informers for key in self.informers[name].store}

    def is_echo(self, informer: str, event: Event) -> bool:
        """The event (of that informer) shows exactly what our last write there made."""
        return informer == self.written and self.own_writes.is_echo(event)

    def write_in_flight(self, key: str, stored_version: str | None) -> str | None:
        """The tag our last write of `key` recorded, when the written store does not show it yet."""
        assert self.written is not None
        relists = self.informers[self.written].relists
        if relists != self._relists[self.written]:
            # a relist tells nothing of an object created and deleted while the watch was down:
            # a record it did not clear may be of an object long gone
            self.own_writes.clear()
            self._relists[self.written] = relists
        return self.own_writes.in_flight(key, stored_version)

    def stop(self) -> None:
        for task in self.tasks.values():
            task.cancel()


class TwinMember(Protocol):
    """What a virtual kubelet's reflection manager starts, tells and stops."""

    async def start(self) -> None:
        """Once the home informers it reads are synced."""

    def follow(self, twins: Twins) -> None:
        """Keep scopes for exactly these twinned namespaces."""

    def on_settings(self) -> None:
        """The VirtualNode changed: take up its settings (workers, policies) live."""

    def retry_failed(self) -> int:
        """The foreign cluster answers again: what failed meanwhile is retried now, not after its backoff."""

    async def stop(self) -> None: ...


class TwinFollower:
    """A member's common part: a work queue keyed by home namespace/name and a scope per twin.

    A subclass says which informers a scope holds (`open_scope`) and reconciles; by default any
    event in a scope queues the object's name in the home namespace, a write of ours excepted, and
    a scope that syncs queues every key it may decide (`requeue`: the names its stores hold).
    """

    written: str | None = None  # the scope's informer whose objects this member writes, if it records them

    def __init__(self, name: str, *, workers: int, metrics: EngineMetrics | None = None) -> None:
        self.queue = WorkQueue(self.reconcile, workers=max(1, workers), name=name, metrics=metrics)
        self.scopes: dict[str, TwinScope] = {}  # home namespace -> its scope

    async def reconcile(self, key: str) -> None:
        raise NotImplementedError

    def open_scope(self, namespace: str, twin: str) -> dict[str, Watched]:
        raise NotImplementedError

    def on_event(self, scope: TwinScope, informer: str, event: Event) -> None:
        if not scope.is_echo(informer, event):
            self.queue.add(f"{scope.namespace}/{event.key.partition('/')[2]}")

    def requeue(self, scope: TwinScope) -> None:
        """Every key the scope may decide: by default the names its stores hold."""
        for name in scope.names():
            self.queue.add(f"{scope.namespace}/{name}")

    def on_synced(self, scope: TwinScope) -> None:
        self.requeue(scope)

    def requeue_all(self) -> None:
        for scope in list(self.scopes.values()):
            self.requeue(scope)

    def follow(self, twins: Twins) -> None:
        for namespace in list(self.scopes):
            if twins.get(namespace) != self.scopes[namespace].twin:
                self.scopes.pop(namespace).stop()
        for namespace, twin in twins.items():
            if namespace not in self.scopes:
                scope = TwinScope(namespace, twin, self.open_scope(namespace, twin), self.written)
                self.scopes[namespace] = scope
                scope.start(self.on_event, self.on_synced)

    def synced_scope(self, namespace: str) -> TwinScope | None:
        """The namespace's scope once it is synced: a reconcile decides only on known stores."""
        scope = self.scopes.get(namespace)
        return scope if scope is not None and scope.synced() else None

    def __iter__(self) -> Iterator[TwinScope]:
        return iter(list(self.scopes.values()))

    def resize(self, workers: int) -> None:
        """Workers from the VirtualNode, live; 0 (the kind off) keeps one to see each key through."""
        if max(1, workers) != self.queue.workers:
            self.queue.resize(max(1, workers))

    def on_settings(self) -> None:
        pass

    def retry_failed(self) -> int:
        return self.queue.retry_failed()

    async def start(self) -> None:
        self.queue.start()

    async def stop(self) -> None:
        for scope in self.scopes.values():
            scope.stop()
        self.scopes.clear()
        await self.queue.shutdown()
