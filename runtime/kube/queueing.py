"""Work queue: per-key coalescing, rate-limited retries, a number of workers that may change live.

Semantics of client-go's workqueue: a key waits in the queue at most once however often it is
added; a key being reconciled is never handed to a second worker, and adds that arrive meanwhile
make it run once more afterwards; a failed reconcile is retried after an exponential backoff per
key, reset by the next success. Beyond client-go: keys added `first` are handed out ahead of the
others, two for one (the pod offloader's newly bound pods ahead of status updates of pods already
running).
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections import deque
from collections.abc import Awaitable, Callable
from dataclasses import dataclass

from runtime.kube.serving import EngineMetrics

log = logging.getLogger(__name__)

Reconcile = Callable[[str], Awaitable[None]]

# Keys added `first` handed out in a row while other keys wait (then one of those): new work twice
# as fast as follow-ups, and follow-ups never starved.
FIRST_IN_A_ROW = 2


@dataclass
class QueueStats:
    reconciles: int = 0
    failures: int = 0
    retries_scheduled: int = 0
    latency_seconds_total: float = 0.0


class WorkQueue:
    def __init__(
        self,
        reconcile: Reconcile,
        *,
        workers: int = 4,
        base_delay: float = 0.05,
        max_delay: float = 60.0,
        name: str = "queue",
        metrics: EngineMetrics | None = None,
    ) -> None:
        if workers < 1:
            raise ValueError("a work queue needs at least one worker")
        self.reconcile = reconcile
        self.workers = workers
        self.base_delay = base_delay
        self.max_delay = max_delay
        self.name = name
        self.metrics = metrics
        self.stats = QueueStats()
        self._first: deque[str] = deque()  # keys added `first`, in order
        self._rest: deque[str] = deque()  # the others, in order
        self._waiting = asyncio.Semaphore(0)  # one per key in either
        self._first_in_a_row = 0
        # the metrics' children, looked up once: prometheus_client's labels() takes a lock per call
        if metrics is not None:
            self._depth = metrics.queue_depth.labels(name, metrics.cluster)
            self._durations = {
                r: metrics.reconcile_seconds.labels(name, metrics.cluster, r) for r in ("success", "failure")
            }
        self._queued: set[str] = set()
        self._processing: set[str] = set()
        self._dirty: set[str] = set()
        self._failures: dict[str, int] = {}
        self._delayed: dict[str, asyncio.TimerHandle] = {}
        self._tasks: list[asyncio.Task[None]] = []  # the workers that count
        self._busy: set[asyncio.Task[None]] = set()  # workers inside a reconcile
        self._retiring: set[asyncio.Task[None]] = set()  # let go, leaving once their reconcile ends
        self._started = False
        self._idle = asyncio.Event()
        self._idle.set()

    # -- adding ----------------------------------------------------------------------------
    def add(self, key: str, *, first: bool = False) -> None:
        """`first`: ahead of the keys added without it (new work before follow-ups of work begun)."""
        if key in self._processing:
            self._dirty.add(key)  # run again once the current reconcile ends
            return
        if key in self._queued:
            return
        self._queued.add(key)
        self._idle.clear()
        (self._first if first else self._rest).append(key)
        self._waiting.release()
        self._report_depth()

    def add_after(self, key: str, delay: float) -> None:
        """`key` added in `delay` seconds, or sooner if it already waits for an earlier time: a retry in 30 s
        must not hold back a look in 1 s asked for since (a refused twin's offloading being deleted)."""
        loop = asyncio.get_running_loop()
        when = loop.time() + delay
        planned = self._delayed.get(key)
        if planned is not None:
            if planned.when() <= when:
                return
            planned.cancel()
        self._idle.clear()

        def fire() -> None:
            self._delayed.pop(key, None)
            self.add(key)

        self._delayed[key] = loop.call_at(when, fire)

    def retry_failed(self) -> int:
        """Every key waiting out its backoff after failures runs now, its count of failures cleared:
        what made it fail is known to be over (its foreign cluster answers again after an outage, when
        the backoff may have grown to `max_delay`). Looks planned without a failure keep their time.
        Returns how many keys it let go."""
        woken = [key for key in self._delayed if key in self._failures]
        for key in woken:
            self._delayed.pop(key).cancel()
            self._failures.pop(key, None)
            self.add(key)
        return len(woken)

    def backoff(self, key: str) -> float:
        failures = self._failures.get(key, 0)
        return float(min(self.base_delay * (2 ** max(failures - 1, 0)), self.max_delay))

    def _report_depth(self) -> None:
        if self.metrics:
            self._depth.set(len(self._queued))

    # -- state -----------------------------------------------------------------------------
    @property
    def depth(self) -> int:
        return len(self._queued)

    def pending(self) -> bool:
        return bool(self._queued or self._processing or self._dirty or self._delayed)

    def working(self) -> bool:
        """A key queued or being reconciled now (not counting those scheduled for later)."""
        return bool(self._queued or self._processing or self._dirty)

    async def wait_idle(self, timeout: float | None = None) -> None:
        """Until nothing is queued, running or scheduled for retry."""
        async with asyncio.timeout(timeout):
            await self._idle.wait()

    def _next_key(self) -> str:
        """Keys added `first` go ahead, but at most FIRST_IN_A_ROW of them while others wait: a burst
        of new pods (1,000 bound at once) must not hold back the status of those already running."""
        if self._first and (not self._rest or self._first_in_a_row < FIRST_IN_A_ROW):
            self._first_in_a_row += 1
            return self._first.popleft()
        self._first_in_a_row = 0
        return self._rest.popleft()

    # -- running ---------------------------------------------------------------------------
    async def _worker(self) -> None:
        me = asyncio.current_task()
        assert me is not None
        while me not in self._retiring:
            await self._waiting.acquire()
            key = self._next_key()
            self._busy.add(me)
            self._queued.discard(key)
            self._report_depth()
            result = "success"
            self._processing.add(key)
            started = time.monotonic()
            try:
                await self.reconcile(key)
            except asyncio.CancelledError:
                raise
            except Exception:
                result = "failure"
                self.stats.failures += 1
                self._failures[key] = self._failures.get(key, 0) + 1
                delay = self.backoff(key)
                count = self._failures[key]
                log.exception("%s: reconcile of %s failed (%d in a row), retry in %.2fs", self.name, key, count, delay)
                self.stats.retries_scheduled += 1
                self.add_after(key, delay)
            else:
                self._failures.pop(key, None)
            finally:
                elapsed = time.monotonic() - started
                self.stats.reconciles += 1
                self.stats.latency_seconds_total += elapsed
                if self.metrics:
                    self._durations[result].observe(elapsed)
                self._processing.discard(key)
                self._busy.discard(me)
                if key in self._dirty:
                    self._dirty.discard(key)
                    self.add(key)
                if not self.pending():
                    self._idle.set()
        self._retiring.discard(me)

    def start(self) -> None:
        self._started = True
        self.resize(self.workers)

    def resize(self, workers: int) -> None:
        """Run `workers` workers from now on (before `start`: from the start). A worker let go in the
        middle of a reconcile finishes it first: cancelling it could leave a write half done."""
        if workers < 1:
            raise ValueError("a work queue needs at least one worker")
        self.workers = workers
        if not self._started:
            return
        while len(self._tasks) < workers:
            self._tasks.append(asyncio.create_task(self._worker(), name=f"{self.name}-worker-{len(self._tasks)}"))
        for task in self._tasks[workers:]:
            if task in self._busy:
                self._retiring.add(task)
            else:
                task.cancel()  # waiting for a key: the queue keeps it for the others
        del self._tasks[workers:]
        if self.metrics:
            self.metrics.queue_workers.labels(self.name, self.metrics.cluster).set(workers)

    async def shutdown(self, drain_timeout: float = 10.0) -> None:
        """Let queued work finish (up to `drain_timeout`), then stop the workers and pending retries.
        A queue whose workers never started (a stand-by replica's) has nobody to drain it: it stops at once."""
        for handle in self._delayed.values():
            handle.cancel()
        self._delayed.clear()
        try:
            if self._started and (self._queued or self._processing):
                try:
                    async with asyncio.timeout(drain_timeout):
                        await self._wait_drained()
                except TimeoutError:
                    log.warning("%s: %d keys not reconciled at shutdown", self.name, self.depth)
        finally:  # a shutdown cancelled while it drains still stops its workers
            stopping = [*self._tasks, *self._retiring]
            for task in stopping:
                task.cancel()
            await asyncio.gather(*stopping, return_exceptions=True)
            self._tasks, self._started = [], False
            self._retiring.clear()

    async def _wait_drained(self) -> None:
        while self.working():
            await asyncio.sleep(0.01)
