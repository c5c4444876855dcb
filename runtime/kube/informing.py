"""Informer: a local, always-current copy of one kind of object, and events for every change.

Paginated list, then watch from the list's resourceVersion with bookmarks (so a quiet watch
still advances its resourceVersion and reconnects cheaply). When the API server answers
410 Gone (the resourceVersion left its watch window), the informer lists again and compares the
new list with its store: objects that vanished meanwhile get a synthetic DELETED event, so no
handler ever misses a delete.

A `trim` function (client-go's SetTransform) may drop what no reader of the store needs before an
object is stored: memory held per object is memory held per pod. A `packed` informer keeps its
objects compressed (packing.py), for stores that hold one object per offloaded pod.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import math
import time
from collections import ChainMap, deque
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any, Literal, Protocol, cast

import httpx2
import msgspec
from lightkube import ApiError, AsyncClient
from lightkube.core import decoders
from lightkube.core.exceptions import NotReadyError
from lightkube.core.generic_client import BasicRequest
from lightkube.core.resource import NamespacedResource
from lightkube.core.selector import build_selector

from runtime.kube.client import watch_lines
from runtime.kube.errors import status_code_of
from runtime.kube.liveness import WATCH_READ_IDLE_SECONDS, reachability_of
from runtime.kube.packing import Packer
from runtime.kube.serving import EngineMetrics
from runtime.kube.transport import AiohttpTransport

log = logging.getLogger(__name__)

EventType = Literal["ADDED", "MODIFIED", "DELETED"]


@dataclass(frozen=True)
class Event:
    type: EventType
    key: str  # "namespace/name", or "name" for cluster-scoped kinds
    obj: Any


Handler = Callable[[Event], None]


def object_key(obj: Any) -> str:
    meta = obj.metadata
    return f"{meta.namespace}/{meta.name}" if meta.namespace else str(meta.name)


def diff_stores(old: dict[str, Any], new: dict[str, Any]) -> list[Event]:
    """Events that turn `old` into `new`: deletes for vanished keys, adds, and modifications by resourceVersion."""
    events = [Event("DELETED", key, obj) for key, obj in old.items() if key not in new]
    for key, obj in new.items():
        before = old.get(key)
        if before is None:
            events.append(Event("ADDED", key, obj))
        elif before.metadata.resourceVersion != obj.metadata.resourceVersion:
            events.append(Event("MODIFIED", key, obj))
    return events


def _without_managed_fields(obj: Any) -> Any:
    """Server-side-apply bookkeeping no controller here reads: often a third of an object's memory."""
    if isinstance(obj, dict):  # a generic (custom) resource: its `metadata` property is a copy
        meta = obj.get("metadata")
        if isinstance(meta, dict):
            meta.pop("managedFields", None)
    elif obj.metadata is not None:
        obj.metadata.managedFields = None
    return obj


# A multiplexed watch that gets BUSY_EVENTS events within BUSY_SECONDS goes on from its resourceVersion
# over a connection of its own (HTTP/1.1 costs less CPU per event); it is multiplexed again from a watch
# that ends with fewer than BUSY_EVENTS events in its last QUIET_SECONDS.
BUSY_EVENTS = 20
BUSY_SECONDS = 5.0
QUIET_SECONDS = 60.0
# A watch that is never multiplexed reads at least a bookmark or the end the server puts to it at
# its timeoutSeconds: nothing for that long and this more, and its connection is dead.
WATCH_END_GRACE_SECONDS = 30.0


class _Gone(Exception):
    """The watch's resourceVersion is too old: list again."""


class _BookmarkMeta(msgspec.Struct):
    resourceVersion: str


class _Bookmark(msgspec.Struct):
    metadata: _BookmarkMeta


class Informer:
    def __init__(
        self,
        client: AsyncClient,
        resource: type[Any],
        *,
        namespace: str | None = None,
        labels: dict[str, Any] | None = None,
        fields: dict[str, Any] | None = None,
        page_size: int = 500,
        watch_timeout_seconds: int = 300,
        retry_delay: float = 1.0,
        metrics: EngineMetrics | None = None,
        cluster_id: str = "",
        trim: Callable[[Any], Any] | None = None,
        packed: bool = False,
        multiplexed: bool = True,
        absent_ok: bool = False,
    ) -> None:
        """`trim`: object -> the object as stored and handed to handlers (fields nobody reads dropped);
        `packed`: objects stored and handed over as `Packed` (packing.py); `multiplexed` (the default):
        while quiet, the watch is a stream of an HTTP/2 connection the client's other watches share
        (runtime/kube/multiplexing.py), so a process holds one connection per API server for all its
        quiet watches, however many peerings and twin namespaces it serves. While busy it has a
        connection of its own: over HTTP/1.1 an event costs the client and the API server less
        CPU (a 1,000-pod burst with its watches multiplexed: the virtual kubelet 8.8 ms of CPU per pod
        against 6.4, the foreign API server 19.8 against 15.4). `absent_ok`: a kind that may not be
        there (its CRD not installed, or not readable by an identity an older stack made): a list
        answered 404 or 403 counts as synced with none, and is tried again until it answers."""
        self.absent_ok = absent_ok
        self.client = client
        self.multiplexed = multiplexed
        self.busy = False  # a multiplexed watch, busy of late: on a connection of its own
        self._event_times: deque[float] = deque(maxlen=BUSY_EVENTS)
        self.trim = trim
        self.packer = Packer(resource) if packed else None
        self.resource = resource
        self.namespace = namespace
        self.labels = labels
        self.fields = fields
        self.page_size = page_size
        self.watch_timeout_seconds = watch_timeout_seconds
        self.retry_delay = retry_delay
        self.metrics = metrics
        self.cluster_id = cluster_id
        self.store: dict[str, Any] = {}
        self.resource_version: str | None = None
        self.synced = asyncio.Event()
        self.relists = 0
        self.failures = 0  # in a row: the watch's backoff is retry_delay times as many seconds (30 at most)
        self._handlers: list[Handler] = []

    def add_handler(self, handler: Handler) -> None:
        self._handlers.append(handler)

    def resume(self, store: dict[str, Any], resource_version: str) -> None:
        """Continue from a known state (e.g. after a restart) instead of listing first."""
        self.store = dict(store)
        self.resource_version = resource_version

    def _dispatch(self, events: Iterable[Event]) -> None:
        for event in events:
            for handler in self._handlers:
                handler(event)

    async def _list(self) -> None:
        namespace = (self.namespace or "*") if self._namespaced else None
        items = self.client.list(
            self.resource, namespace=namespace, labels=self.labels, fields=self.fields, chunk_size=self.page_size
        )
        fresh = {object_key(obj): self._stored(obj) async for obj in items}
        try:
            self.resource_version = items.resourceVersion
        except NotReadyError:  # an empty first page still carries one; be safe
            self.resource_version = None
        self._count("list", max(1, math.ceil(len(fresh) / self.page_size)))
        events = diff_stores(self.store, fresh)
        self.store = fresh
        self.relists += 1
        self._dispatch(events)
        self.synced.set()

    def _stored(self, obj: Any) -> Any:
        obj = _without_managed_fields(obj)
        if self.trim is not None:
            obj = self.trim(obj)
        return self.packer.pack(obj) if self.packer is not None else obj

    @property
    def _namespaced(self) -> bool:
        return issubclass(self.resource, NamespacedResource)

    def _watch_request(self) -> BasicRequest:
        params = {
            "resourceVersion": self.resource_version,
            "allowWatchBookmarks": "true",
            "timeoutSeconds": self.watch_timeout_seconds,
            "labelSelector": build_selector(self.labels) if self.labels else None,
            "fieldSelector": build_selector(self.fields, for_fields=True) if self.fields else None,
        }
        namespace = (self.namespace or "*") if self._namespaced else None
        # lightkube's public watch() sends no allowWatchBookmarks; its request builder does.
        return self.client._client.prepare_request(
            "list", res=self.resource, namespace=namespace, watch=True, params=params
        )

    def _count(self, verb: str, calls: int = 1) -> None:
        if self.metrics:
            self.metrics.api_calls.labels(self.cluster_id, verb, self.resource.__name__).inc(calls)

    async def _watch(self) -> None:
        """One watch request, streamed until the server ends it.

        Streamed here rather than with lightkube's watch(): a BOOKMARK carries an object with only
        its resourceVersion (a Pod's has `spec.containers: null`, which the typed models reject), and
        an API server going away must end in a retry, not in a crash.
        """
        self._count("watch")
        multiplexed = self.multiplexed and not self.busy
        # Over a connection of its own (HTTP/1.1) a read deadline is the liveness check: a busy watch
        # silent for WATCH_READ_IDLE_SECONDS is quiet or dead, and goes on over HTTP/2 either way
        # (runtime/kube/liveness.py); any other waits for its bookmarks and its end.
        read_idle = self._read_idle_seconds()
        try:
            # closed here, not whenever the collector gets to it: its connection goes back at once
            async with contextlib.aclosing(
                watch_lines(self.client, self._watch_request(), multiplexed, read_idle)
            ) as lines:
                async for line in lines:
                    self._on_watch_line(line)
                    if multiplexed and self.busy:
                        return  # the next watch goes on from here over a connection of its own
        except httpx2.ReadTimeout:
            if not self.busy:
                raise
            log.info("busy watch of %s read nothing in %.0f s: going on over HTTP/2", self.resource.__name__, read_idle)
            self._event_times.clear()
            self._set_busy(False)
            return
        if self.busy and not self._recently_busy(QUIET_SECONDS):
            self._set_busy(False)

    def _set_busy(self, busy: bool) -> None:
        """Busy: on a connection of its own, if the client's budget of those has room (else it stays
        multiplexed: runtime/kube/transport.py OWN_WATCH_CONNECTIONS bounds a peering's connections)."""
        transport = getattr(self.client, "transport", None)
        budget = transport if isinstance(transport, AiohttpTransport) else None
        if busy and not self.busy:
            self.busy = budget is None or budget.claim_own_watch()
        elif not busy and self.busy:
            self.busy = False
            if budget is not None:
                budget.release_own_watch()

    def _read_idle_seconds(self) -> float:
        """How long the watch may read nothing over HTTP/1.1 (over HTTP/2 the connection's PING checks)."""
        if self.multiplexed and self.busy:  # on a connection of its own while busy
            return WATCH_READ_IDLE_SECONDS
        return self.watch_timeout_seconds + WATCH_END_GRACE_SECONDS

    def _recently_busy(self, seconds: float) -> bool:
        """BUSY_EVENTS events, the last of them, came within `seconds`."""
        times = self._event_times
        return len(times) == BUSY_EVENTS and time.monotonic() - times[0] <= seconds

    def _on_watch_line(self, line: bytes) -> None:
        event = decoders.decode_watch_event(line)
        if event.type == "ERROR":
            status = decoders.decode_status(event.object)
            if status.code == 410:
                raise _Gone(status.message)
            raise ApiError(status=status)
        if event.type == "BOOKMARK":
            self.resource_version = msgspec.json.decode(event.object, type=_Bookmark).metadata.resourceVersion
            return
        decoded = decoders.decode_object(event.object, self.resource)
        self.resource_version = decoded.metadata.resourceVersion
        if self.multiplexed:
            self._event_times.append(time.monotonic())
            if not self.busy and self._recently_busy(BUSY_SECONDS):
                self._set_busy(True)
        key = object_key(decoded)
        obj = self._stored(decoded)
        if event.type == "DELETED":
            self.store.pop(key, None)
        else:
            self.store[key] = obj
        self._dispatch([Event(cast(EventType, event.type), key, obj)])

    async def run(self) -> None:
        """List (unless resumed), then watch forever; cancel the task to stop.

        Any failure (the API server unreachable, a broken stream) is retried with a growing delay,
        resuming from the last resourceVersion; 410 Gone or an undecodable event lists again.
        """
        try:
            await self._run()
        finally:
            self._set_busy(False)  # its connection's place in the budget goes back

    async def _run(self) -> None:
        self.failures = 0
        while True:
            try:
                if self.resource_version is None:
                    await self._list()
                else:
                    self.synced.set()
                await self._watch()
                self.failures = 0
            except asyncio.CancelledError:
                raise
            except Exception as err:
                if isinstance(err, _Gone) or (isinstance(err, ApiError) and err.status.code == 410):
                    log.info("watch of %s expired at %s: listing again", self.resource.__name__, self.resource_version)
                    self.resource_version = None
                    continue
                if isinstance(err, msgspec.MsgspecError):
                    self.resource_version = None  # we cannot tell what we missed: list again
                absent = status_code_of(err) in (403, 404)  # a list answers through httpx2, not ApiError
                if self.absent_ok and absent and not self.synced.is_set():
                    log.warning("%s cannot be listed (%s): none, until it can", self.resource.__name__, err)
                    self.synced.set()
                self.failures += 1
                delay = min(self.retry_delay * self.failures, 30.0)
                log.warning(
                    "watch of %s failed (%s); retry %d in %.0fs", self.resource.__name__, err, self.failures, delay
                )
                if await self._back_off(delay, unreachable=isinstance(err, httpx2.TransportError)):
                    log.info("watch of %s: its API server answers again; retrying now", self.resource.__name__)
                    self.failures = 0  # a server just back (its storage initializing) is retried from 1 s again

    async def _back_off(self, delay: float, unreachable: bool) -> bool:
        """Sleep `delay`; after a failure to reach the server, only until it answers another request
        (liveness.Reachability; True then)."""
        reachability = reachability_of(self.client)
        if not unreachable or reachability is None:
            await asyncio.sleep(delay)
            return False
        return await reachability.answer_within(delay)


async def call_when_synced(informers: Iterable[Informer], callback: Callable[[], None]) -> None:
    """Call `callback` once every informer has synced: work put off until then is due."""
    for informer in informers:
        await informer.synced.wait()
    callback()


class ObjectSource(Protocol):
    """What a reader of watched objects needs: their store (key -> object) and their events."""

    @property
    def store(self) -> Mapping[str, Any]: ...

    def add_handler(self, handler: Handler) -> None: ...


class InformerUnion:
    """Several informers of disjoint objects read as one (e.g. the pods of the virtual nodes of one
    foreign cluster: a field selector matches a single node). Each informer runs on its own; this is
    only the view, and it copies nothing."""

    def __init__(self, parts: Sequence[Informer]) -> None:
        self.parts = tuple(parts)

    @property
    def store(self) -> Mapping[str, Any]:
        # read anew each time: an informer replaces its store when it lists again
        if len(self.parts) == 1:
            return self.parts[0].store
        return ChainMap(*(part.store for part in self.parts))

    def add_handler(self, handler: Handler) -> None:
        for part in self.parts:
            part.add_handler(handler)
