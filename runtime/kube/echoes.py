"""Own writes: a controller's write comes back to it as a watch event, and that echo tells it
nothing it did not know. Recording the resourceVersion each write produced lets the event handler
drop exactly that event; any other change to the object has another resourceVersion and is
reconciled as usual. An echo that arrives before the write's response is simply not recognised
(one reconcile too many, never one too few).

Until its echo arrives, the store still shows the object as it was before the write: a reconcile of
the same key in that window (the key added again while the write was in flight) would write the
same thing again. `in_flight` tells it what it wrote, as client-go controllers' expectations do.
Every event of a key ends its record, so this holds only while the store sees every event: a store
that relisted (its watch down meanwhile) or was started anew must `clear()` what it may have missed.
"""

from __future__ import annotations

from typing import Any, NamedTuple

from runtime.kube.informing import Event


class _Write(NamedTuple):
    version: str  # the resourceVersion the write produced
    tag: str  # what the writer wrote, in its own terms (e.g. a content hash)


class OwnWrites:
    def __init__(self) -> None:
        self._writes: dict[str, _Write] = {}  # object key -> our last write whose echo is not in yet

    def record(self, key: str, written: Any, tag: str = "") -> None:
        """`written`: the object the API server answered the write with; `tag`: what was written."""
        version = getattr(getattr(written, "metadata", None), "resourceVersion", None)
        if version:
            self._writes[key] = _Write(version, tag)

    def is_echo(self, event: Event) -> bool:
        """The event shows exactly what our last write made (each recorded write is matched once).
        Any event of the key ends the record: the store now holds what the server has."""
        written = self._writes.pop(event.key, None)
        return event.type != "DELETED" and written is not None and written.version == event.obj.metadata.resourceVersion

    def in_flight(self, key: str, stored_version: str | None) -> str | None:
        """The tag of our last write of `key` when the store (at `stored_version`, None: absent) does
        not show it yet; None when it does or nothing was recorded."""
        written = self._writes.get(key)
        if written is None or written.version == stored_version:
            return None
        return written.tag

    def clear(self) -> None:
        self._writes.clear()

    def __len__(self) -> int:
        return len(self._writes)
