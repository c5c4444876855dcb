"""Own writes: a controller's write comes back to it as a watch event, and that echo tells it
nothing it did not know. Recording the resourceVersion each write produced lets the event handler
drop exactly that event; any other change to the object has another resourceVersion and is
reconciled as usual. An echo that arrives before the write's response is simply not recognised
(one reconcile too many, never one too few).

Until its echo arrives, the store still shows the object as it was before the write: a reconcile of
the same key in that window (the key added again while the write was in flight) would write the
same thing again. `in_flight` tells it what it wrote, as client-go controllers' expectations do.
A reconcile that finds the store behind its write and so decides nothing (a create answered 409
AlreadyExists: ours, not in the store yet) must be brought back by the echo: `await_echo` makes the
echo count as news, else the key would wait for a change that may never come.
Every event of a key ends its record, so this holds only while the store sees every event: a store
that relisted (its watch down meanwhile) or was started anew must `clear()` what it may have missed.
"""

from __future__ import annotations

from collections.abc import Container
from typing import Any, NamedTuple

from runtime.kube.informing import Event


class _Write(NamedTuple):
    version: str  # the resourceVersion the write produced
    tag: str  # what the writer wrote, in its own terms (e.g. a content hash)
    awaited: bool = False  # a reconcile decided nothing until the store shows this write


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
        if written is None or written.awaited or event.type == "DELETED":
            return False
        return bool(written.version == event.obj.metadata.resourceVersion)

    def await_echo(self, key: str) -> bool:
        """A reconcile found the store without our last write of `key` and decided nothing: that
        write's echo is to be reconciled like any event. False when no write of `key` awaits its
        echo (it came already, or none was recorded): the store shows what the server has."""
        written = self._writes.get(key)
        if written is None:
            return False
        self._writes[key] = written._replace(awaited=True)
        return True

    def create_conflicted(self, key: str, stored: Container[str]) -> bool:
        """A create of `key`, made because the store (`stored`: its keys) showed none, was answered 409
        AlreadyExists: whether to reconcile the key again at once. Ours not shown yet: no, its echo
        brings the key back (`await_echo`). The store shows it now (its event came during the call):
        yes. Another's not shown yet: no, its event is still to come; and a name held by an object
        the store never shows is never retried in a loop."""
        return not self.await_echo(key) and key in stored

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
