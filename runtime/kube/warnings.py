"""Warning events on home objects: the one writer of them (reflection conflicts and refusals,
offloading failures and back-offs), so every such event names the same source the same way."""

from __future__ import annotations

import datetime
from collections.abc import Mapping
from typing import Any

from lightkube import AsyncClient
from lightkube.resources.core_v1 import Event as CoreEvent

from runtime.kube.errors import unless_gone


class Warnings:
    def __init__(self, home: AsyncClient, component: str, host: str | None = None) -> None:
        """`host`: the node the objects are on, as a kubelet names itself in its events."""
        self.home = home
        self.component, self.host = component, host
        self._sent: set[tuple[str, str, str]] = set()

    async def warn(
        self, obj: Mapping[str, Any], reason: str, message: str, *, once: bool = True, normal: bool = False
    ) -> None:
        """`once`: each (object, reason, message) once per process, so a conflict that lasts is
        reported, not repeated on every reconcile (else the caller decides when it is news);
        `normal`: a step taken rather than a problem (type Normal)."""
        meta = obj.get("metadata") or {}
        key = (str(meta.get("uid")), reason, message)
        if once and key in self._sent:
            return
        now = datetime.datetime.now(datetime.UTC).strftime("%Y-%m-%dT%H:%M:%SZ")
        source = {"component": self.component, **({"host": self.host} if self.host else {})}
        event: Any = CoreEvent.from_dict(
            {
                "metadata": {"generateName": f"{meta.get('name')}.", "namespace": meta.get("namespace")},
                "involvedObject": {
                    "apiVersion": obj.get("apiVersion"),
                    "kind": obj.get("kind"),
                    "name": meta.get("name"),
                    "namespace": meta.get("namespace"),
                    "uid": meta.get("uid"),
                },
                "reason": reason,
                "message": message,
                "type": "Normal" if normal else "Warning",
                "source": source,
                "reportingComponent": self.component,
                **({"reportingInstance": self.host} if self.host else {}),
                "firstTimestamp": now,
                "lastTimestamp": now,
                "count": 1,
            }
        )
        with unless_gone():  # the namespace may be going away
            await self.home.create(event)
        if once:
            self._sent.add(key)
