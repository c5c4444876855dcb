"""One watch per kind and cluster, shared by every reader in the process (client-go's
SharedInformerFactory): the home namespaces each peering's twin scopes follow, and the whole-cluster
informers (VirtualNodes, NamespaceOffloadings) that every peering of a virtual-kubelet process reads.

A twin scope opened its informers per namespace: one watch, and with the HTTP/1.1 transport one
connection, per namespace per kind, so each offloaded namespace cost every virtual kubelet seven
watches at home. At home the virtual kubelet may read these kinds cluster-wide (its ClusterRole), so
a scope's home informers are `NamespaceView`s of one `SharedInformer` per kind: a view holds its
namespace's objects and hands on their events, and shares the informer's sync and relists. The
shared store holds every object of the kind at home, not only those of offloaded namespaces: the
price of a constant number of watches. A process serving many peerings (runtime/virtualkubelet/
peerings.py) hands them one `SharedWatches` of the home cluster, so a kind watched by two peerings
is watched once; a `SharedView` reads the whole of what its informer holds.

In the foreign cluster the home identity may read only in the twin namespaces it was granted (a
RoleBinding in each, made by the foreign agent), so the scopes' foreign informers stay per namespace.
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable
from typing import Any

from lightkube import AsyncClient

from runtime.kube.informing import Event, Handler, Informer


class SharedInformer:
    """One informer of a kind in every namespace, started with its first view, stopped with its last."""

    def __init__(self, make: Callable[[], Informer]) -> None:
        """`make`: the cluster-wide informer (made anew after its last view stopped it)."""
        self.make = make
        self.informer: Informer | None = None
        self._task: asyncio.Task[None] | None = None
        self._views: dict[str, set[NamespaceView]] = {}
        self._whole: set[_View] = set()

    def view(self, namespace: str) -> NamespaceView:
        return NamespaceView(self, namespace)

    def whole(self) -> SharedView:
        return SharedView(self)

    def _started(self) -> Informer:
        if self.informer is None:
            self.informer = self.make()
            self.informer.add_handler(self._route)
            self._task = asyncio.create_task(self.informer.run())
        return self.informer

    def _attach(self, view: _View) -> Informer:
        informer = self._started()
        if not isinstance(view, NamespaceView):
            self._whole.add(view)
            return informer
        self._views.setdefault(view.namespace, set()).add(view)
        if informer.synced.is_set():  # a namespace followed later: what the store holds already
            prefix = f"{view.namespace}/"
            view.store = {key: obj for key, obj in informer.store.items() if key.startswith(prefix)}
        return informer

    def _detach(self, view: _View) -> None:
        if not isinstance(view, NamespaceView):
            self._whole.discard(view)
        else:
            views = self._views.get(view.namespace, set())
            views.discard(view)
            if not views:
                self._views.pop(view.namespace, None)
        if not self._views and not self._whole and self._task is not None:
            self._task.cancel()
            self.informer, self._task = None, None

    def _route(self, event: Event) -> None:
        for whole in list(self._whole):
            whole.on_event(event)
        for view in list(self._views.get(event.key.partition("/")[0], ())):
            view.on_event(event)


class _View:
    """A reader of a shared informer: its sync, its relists and its own handlers, attached while it runs."""

    def __init__(self, shared: SharedInformer) -> None:
        self.shared = shared
        self.synced = asyncio.Event()
        self._informer: Informer | None = None
        self._handlers: list[Handler] = []

    @property
    def relists(self) -> int:
        """The shared informer's: a relist there may have missed this reader's writes too."""
        return self._informer.relists if self._informer is not None else 0

    def add_handler(self, handler: Handler) -> None:
        self._handlers.append(handler)

    def on_event(self, event: Event) -> None:
        for handler in self._handlers:
            handler(event)

    async def run(self) -> None:
        """Read the shared informer until cancelled (as an informer's run)."""
        self._informer = self.shared._attach(self)
        try:
            await self._informer.synced.wait()
            self.synced.set()
            await asyncio.Future()  # until its reader stops
        finally:
            self.shared._detach(self)


class SharedView(_View):
    """What an informer of its own would give a reader (store, sync, events), from a shared one.
    Its handlers go with it: a peering that stops leaves nothing behind in the shared informer."""

    @property
    def store(self) -> dict[str, Any]:
        # read anew each time: the informer replaces its store when it lists again
        return self._informer.store if self._informer is not None else {}


class NamespaceView(_View):
    """What a twin scope reads of one namespace: the shared informer's objects and events there."""

    def __init__(self, shared: SharedInformer, namespace: str) -> None:
        super().__init__(shared)
        self.namespace = namespace
        self.store: dict[str, Any] = {}

    def on_event(self, event: Event) -> None:
        if event.type == "DELETED":
            self.store.pop(event.key, None)
        else:
            self.store[event.key] = event.obj
        super().on_event(event)


class SharedWatches:
    """The shared informers of one client (one cluster), by kind, scope and selectors."""

    def __init__(self, client: AsyncClient) -> None:
        self.client = client
        self._shared: dict[tuple[Any, ...], SharedInformer] = {}

    def view(
        self, resource: type[Any], namespace: str, *, labels: dict[str, str] | None = None, packed: bool = False
    ) -> NamespaceView:
        """Objects of `resource` (with these labels) in `namespace`, from one watch of the whole cluster."""
        key = (resource, tuple(sorted((labels or {}).items())), packed)
        shared = self._shared.get(key)
        if shared is None:
            shared = self._shared[key] = SharedInformer(
                lambda: Informer(self.client, resource, labels=dict(labels) if labels else None, packed=packed)
            )
        return shared.view(namespace)

    def informer(
        self,
        resource: type[Any],
        *,
        namespace: str | None = None,
        labels: dict[str, str] | None = None,
        fields: dict[str, str] | None = None,
    ) -> SharedView:
        """Every object of `resource` (in `namespace`, with these labels and fields), from one watch
        however many readers ask."""
        key = (
            resource,
            namespace,
            tuple(sorted((labels or {}).items())),
            tuple(sorted((fields or {}).items())),
            "whole",
        )
        shared = self._shared.get(key)
        if shared is None:
            shared = self._shared[key] = SharedInformer(
                lambda: Informer(
                    self.client,
                    resource,
                    namespace=namespace,
                    labels=dict(labels) if labels else None,
                    fields=dict(fields) if fields else None,
                )
            )
        return shared.whole()
