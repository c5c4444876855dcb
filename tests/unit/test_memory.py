"""Freed memory goes back to the operating system (runtime.kube.memory), measured in a child
process of its own so that nothing else the test session holds moves its RSS."""

from __future__ import annotations

import gc
import subprocess
import sys

import pytest
from prometheus_client import CollectorRegistry

from runtime.kube.memory import GcPauses, release_free_memory

FRAGMENTED_THEN_RELEASED = """
import sys
from runtime.kube.memory import release_free_memory

def rss_mb():
    for line in open("/proc/self/status"):
        if line.startswith("VmRSS:"):
            return int(line.split()[1]) / 1024

# Objects too big for CPython's small-object allocator but under malloc's mmap threshold: they live
# in malloc's heap. One in eight is kept, so the heap cannot shrink from its top on its own.
blocks = [bytes(4000 + i % 64) for i in range(50_000)]
kept = blocks[::8]
del blocks
before = rss_mb()
assert release_free_memory()
after = rss_mb()
print(before, after, len(kept))
"""


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="reads /proc/self/status")
def test_the_memory_a_burst_freed_goes_back_to_the_os() -> None:
    if not release_free_memory():
        pytest.skip("this C library has no malloc_trim")
    run = subprocess.run([sys.executable, "-c", FRAGMENTED_THEN_RELEASED], capture_output=True, text=True, check=True)
    before, after, _ = (float(figure) for figure in run.stdout.split())
    # 50,000 blocks of ~4 KB: ~200 MB allocated, ~175 MB of it freed but still resident before the trim
    assert before - after > 100, (before, after)


def test_each_collection_is_timed_in_its_generation() -> None:
    registry = CollectorRegistry()
    pauses = GcPauses()
    registry.register(pauses)
    gc.callbacks.append(pauses)
    try:
        counted = [registry.get_sample_value("liqo_gc_pause_seconds_count", {"generation": g}) for g in "012"]
        gc.collect(2)
        gc.collect(1)
        after = [registry.get_sample_value("liqo_gc_pause_seconds_count", {"generation": g}) for g in "012"]
    finally:
        gc.callbacks.remove(pauses)
    # the test's own allocations may trigger young collections meanwhile, never a full one
    assert counted[2] == 0 and after[2] == 1
    assert after[1] is not None and counted[1] is not None and after[1] >= counted[1] + 1
    paused = registry.get_sample_value("liqo_gc_pause_seconds_sum", {"generation": "2"}) or 0.0
    assert paused > 0
    # cumulative buckets: the one full collection counts in every bucket whose bound holds its length
    buckets = {
        bound: registry.get_sample_value("liqo_gc_pause_seconds_bucket", {"generation": "2", "le": str(bound)})
        for bound in GcPauses().buckets
    }
    assert buckets == {bound: (1.0 if paused <= bound else 0.0) for bound in buckets}
    assert registry.get_sample_value("liqo_gc_pause_seconds_bucket", {"generation": "2", "le": "+Inf"}) == 1
