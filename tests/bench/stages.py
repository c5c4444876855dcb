"""When each pod of a burst passes each stage, seen from the bench's own watches (one clock).

Offloaded pods: submitted at home -> bound to the virtual node -> ShadowPod created in the foreign
cluster -> foreign pod created -> foreign pod bound -> foreign pod Running -> Running at home.
Direct pods: submitted -> bound -> Running. A stage's duration per pod is the difference of two
first sightings; the table gives p50/p99 per stage, so the slow stage is a number. Watch latency is
in every sighting alike, so it cancels out of the differences. `reached_by_all` gives when the
last pod passed each point: the stage that ends the burst.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Callable
from typing import Any

from lightkube import AsyncClient
from lightkube.resources.core_v1 import Pod

from runtime.api.resources import ShadowPodResource
from runtime.kube import Event, Informer

OFFLOADED_STAGES = [
    ("scheduled at home", "submitted", "home bound"),
    ("ShadowPod created", "home bound", "shadow created"),
    ("foreign pod created", "shadow created", "foreign created"),
    ("scheduled there", "foreign created", "foreign bound"),
    ("Running there", "foreign bound", "foreign running"),
    ("Running at home", "foreign running", "home running"),
]
DIRECT_STAGES = [
    ("scheduled", "submitted", "foreign bound"),
    ("Running", "foreign bound", "foreign running"),
]


def _bound(obj: Any) -> bool:
    return bool(obj.spec and obj.spec.nodeName)


def _running(obj: Any) -> bool:
    return bool(obj.status and obj.status.phase == "Running")


class StageClock:
    """First sightings per pod name and stage for one burst."""

    def __init__(self) -> None:
        self.seen: dict[str, dict[str, float]] = {}
        self._informers: list[Informer] = []
        self._tasks: list[asyncio.Task[None]] = []

    def mark(self, pod: str, stage: str) -> None:
        """The first sighting counts (a pod created by the bench is stamped before its create call;
        one created by a Deployment when the bench first sees it)."""
        self.seen.setdefault(pod, {}).setdefault(stage, time.perf_counter())

    def _watch(
        self,
        client: AsyncClient,
        resource: Any,
        namespace: str,
        burst: str,
        marks: list[tuple[str, Callable[[Any], bool]]],
    ) -> None:
        def on_event(event: Event) -> None:
            if event.type == "DELETED":
                return
            name = event.key.partition("/")[2]
            for stage, reached in marks:
                if reached(event.obj):
                    self.mark(name, stage)

        informer = Informer(client, resource, namespace=namespace, labels={"burst": burst})
        informer.add_handler(on_event)
        self._informers.append(informer)

    def watch_offloaded(self, home: AsyncClient, foreign: AsyncClient, namespace: str, twin: str, burst: str) -> None:
        always = lambda _: True  # noqa: E731
        home_marks = [("submitted", always), ("home bound", _bound), ("home running", _running)]
        self._watch(home, Pod, namespace, burst, home_marks)
        self._watch(foreign, ShadowPodResource, twin, burst, [("shadow created", always)])
        self._watch(
            foreign,
            Pod,
            twin,
            burst,
            [("foreign created", always), ("foreign bound", _bound), ("foreign running", _running)],
        )

    def watch_direct(self, foreign: AsyncClient, namespace: str, burst: str) -> None:
        always = lambda _: True  # noqa: E731
        marks = [("submitted", always), ("foreign bound", _bound), ("foreign running", _running)]
        self._watch(foreign, Pod, namespace, burst, marks)

    async def start(self) -> None:
        self._tasks = [asyncio.create_task(i.run()) for i in self._informers]
        await asyncio.gather(*(i.synced.wait() for i in self._informers))

    def stop(self) -> None:
        for task in self._tasks:
            task.cancel()

    def durations(self, stages: list[tuple[str, str, str]]) -> dict[str, list[float]]:
        """Per stage, the seconds each pod spent in it (pods that passed both ends)."""
        found: dict[str, list[float]] = {}
        for label, start, end in stages:
            found[label] = [
                marks[end] - marks[start] for marks in self.seen.values() if start in marks and end in marks
            ]
        return found

    def reached_by_all(self, stages: list[tuple[str, str, str]]) -> dict[str, float]:
        """Per point, seconds from the burst's first submit until its last pod got there: the
        burst's critical path (the stage that still held pods when the others were done)."""
        firsts = [marks["submitted"] for marks in self.seen.values() if "submitted" in marks]
        if not firsts:
            return {}
        start = min(firsts)
        timeline = {}
        for point in ["submitted", *(end for _, _, end in stages)]:
            sightings = [marks[point] for marks in self.seen.values() if point in marks]
            if sightings:
                timeline[point] = max(sightings) - start
        return timeline


def percentile(values: list[float], q: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, round(q * (len(ordered) - 1)))] if ordered else float("nan")
