"""Own writes: a controller's write comes back to it as a watch event, and that echo tells it
nothing it did not know. Recording the resourceVersion each write produced lets the event handler
drop exactly that event; any other change to the object has another resourceVersion and is
reconciled as usual. An echo that arrives before the write's response is simply not recognised
(one reconcile too many, never one too few).
"""

from __future__ import annotations

from typing import Any

from runtime.kube.informing import Event


class OwnWrites:
    def __init__(self) -> None:
        self._versions: dict[str, str] = {}  # object key -> the resourceVersion our last write produced

    def record(self, key: str, written: Any) -> None:
        """`written`: the object the API server answered the write with."""
        version = getattr(getattr(written, "metadata", None), "resourceVersion", None)
        if version:
            self._versions[key] = version

    def is_echo(self, event: Event) -> bool:
        """The event shows exactly what our last write made (each recorded write is matched once)."""
        written = self._versions.pop(event.key, None)
        return event.type != "DELETED" and written is not None and written == event.obj.metadata.resourceVersion

    def __len__(self) -> int:
        return len(self._versions)
